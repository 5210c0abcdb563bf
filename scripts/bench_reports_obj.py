"""Objective for scripts/bench-reports.sh: N steps of a training loop,
each doing WORK iterations of arithmetic (the "training") and reporting
its value. MODE "stream" writes each report to fd $SOMA_REPORT_FD and
never reads a verdict; "helper" uses soma_report.report(), which waits
for each verdict; "nowait" uses report(..., wait=False), which reads
the verdicts that have come without waiting; "none" does not report at
all: what the training loop costs by itself, the bench's baseline (the
other modes run without SOMA_REPORT_FD still call report(), which then
costs its own do-nothing call: not a baseline).

    python3 bench_reports_obj.py N WORK MODE

It prints its own CPU time on stderr at the end: "cpu <seconds>".
"""
import os
import resource
import sys

from soma_report import report, final

n, work, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
fd = os.environ.get("SOMA_REPORT_FD")
x = 0.0
for i in range(n):
    for j in range(work):
        x += j * 1e-9
    v = 1.0 / (i + 1)
    if mode == "helper":
        if report(i, v):
            break
    elif mode == "nowait":
        if report(i, v, wait=False):
            break
    elif mode == "none":
        pass
    elif fd:
        os.write(int(fd), b"report %d %r\n" % (i, v))
final(x)
# The objective's own CPU time (user+sys), which a noisy machine's other
# load does not add to: the bench's steadier column.
ru = resource.getrusage(resource.RUSAGE_SELF)
print("cpu %.4f" % (ru.ru_utime + ru.ru_stime), file=sys.stderr)
