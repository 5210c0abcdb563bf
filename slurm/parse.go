package slurm

import (
	"fmt"
	"strings"
)

// ParseSbatchOutput returns the job id in what sbatch printed on stdout:
// "Submitted batch job 1234" (with an optional " on cluster NAME"), or with
// --parsable "1234" or "1234;NAME". Blank lines and surrounding space are
// ignored; other lines are not, since they mean the output is not what this
// parser knows.
func ParseSbatchOutput(out string) (JobID, error) {
	var found []string
	for l := range strings.Lines(out) {
		if l = strings.TrimSpace(l); l != "" {
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("slurm: sbatch printed %q, want one line like \"Submitted batch job 1234\" or \"1234\"", out)
	}
	l := found[0]
	var id string
	if rest, ok := strings.CutPrefix(l, "Submitted batch job "); ok {
		id, _, _ = strings.Cut(rest, " on cluster ")
	} else {
		id, _, _ = strings.Cut(l, ";")
	}
	n, err := ParseJobID(id)
	if err != nil {
		return 0, fmt.Errorf("slurm: sbatch printed %q, want one line like \"Submitted batch job 1234\" or \"1234\": %w", out, err)
	}
	return n, nil
}

// Task is one line of squeue: one array task, a job that is not an array,
// or an array's pending remainder (the tasks not started yet, on one
// line).
type Task struct {
	ID         JobID  // the task's own job id; for a pending remainder, the array's id
	ArrayJobID JobID  // the array's id; equal to ID for a job that is not an array
	ArrayTask  string // the task index, like "3"; "4-63%16" for a pending remainder; "" outside arrays
	State      string // PENDING, RUNNING, COMPLETING, COMPLETED, CANCELLED, FAILED, TIMEOUT...
	Nodes      string // where it runs or ran; "" while pending
	Reason     string // why it pends, or "None"
}

// IsArray reports whether the line belongs to an array job.
func (t Task) IsArray() bool { return t.ArrayTask != "" }

// IsRemainder reports whether the line stands for an array's tasks that
// have not started yet, rather than for one task.
func (t Task) IsRemainder() bool {
	_, err := parseUint(t.ArrayTask, maxArrayIndex)
	return t.ArrayTask != "" && err != nil
}

// Ref returns the address of the line's task ("4242_17") or job ("4243").
// A pending remainder has none: ok is false.
func (t Task) Ref() (ref Ref, ok bool) {
	if !t.IsArray() {
		return Ref{Job: t.ID}, true
	}
	n, err := parseUint(t.ArrayTask, maxArrayIndex)
	if err != nil {
		return Ref{}, false
	}
	return Ref{Job: t.ArrayJobID, Task: int(n), IsTask: true}, true
}

// Ended reports whether the task is in a final state: it will not run
// (again) unless someone requeues it by hand.
func (t Task) Ended() bool { return stateEnded(t.State) }

// stateEnded lists Slurm's final job states (squeue(1), JOB STATE CODES).
func stateEnded(s string) bool {
	switch s {
	case "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
		"OUT_OF_MEMORY", "PREEMPTED", "REVOKED", "TIMEOUT":
		return true
	}
	return false
}

// ParseSqueue parses squeue's output in Client.Tasks's format
// ("%A|%F|%K|%T|%N|%r", without a header). Blank lines are skipped; any
// other malformed line is an error that quotes it.
func ParseSqueue(out string) ([]Task, error) {
	var tasks []Task
	for l := range strings.Lines(out) {
		l = strings.TrimRight(l, "\r\n")
		if strings.TrimSpace(l) == "" {
			continue
		}
		t, err := parseSqueueLine(l)
		if err != nil {
			return nil, fmt.Errorf("slurm: squeue line %q: %w (want %s)", l, err, squeueFormat)
		}
		tasks = append(tasks, t)
	}
	return tasks, nil
}

func parseSqueueLine(l string) (Task, error) {
	f := strings.SplitN(l, "|", 6)
	if len(f) != 6 {
		return Task{}, fmt.Errorf("%d fields, want 6", len(f))
	}
	var t Task
	var err error
	if t.ID, err = ParseJobID(f[0]); err != nil {
		return Task{}, err
	}
	if t.ArrayJobID, err = ParseJobID(f[1]); err != nil {
		return Task{}, err
	}
	switch task := f[2]; {
	case task == "N/A":
		if t.ArrayJobID != t.ID {
			return Task{}, fmt.Errorf("array job id %s differs from job id %s outside an array", t.ArrayJobID, t.ID)
		}
	case isDigits(task):
		if _, err := parseUint(task, maxArrayIndex); err != nil {
			return Task{}, fmt.Errorf("array task %q: not an index from 0 to %d", task, maxArrayIndex)
		}
		t.ArrayTask = task
	default:
		if _, err := ParseArray(task); err != nil {
			return Task{}, fmt.Errorf("array task %q: not an index or an index range", task)
		}
		t.ArrayTask = task
	}
	if t.State = f[3]; !isStateName(t.State) {
		return Task{}, fmt.Errorf("state %q: not a state name like RUNNING", t.State)
	}
	t.Nodes, t.Reason = f[4], f[5]
	return t, nil
}

// JobInfo is one record of `scontrol show job`: the fields soma reads,
// typed, and all of them as printed.
type JobInfo struct {
	ID         JobID             // JobId: the task's own id
	ArrayJobID JobID             // ArrayJobId; zero outside arrays
	ArrayTask  string            // ArrayTaskId: "3", or "4-63%16" for a pending remainder
	Name       string            // JobName
	State      string            // JobState
	Reason     string            // Reason: why it pends or how it ended, "None" if nothing to say
	Restarts   int               // Restarts: how often it was requeued
	ExitCode   string            // ExitCode: "status:signal", like "0:0"
	NodeList   string            // NodeList
	StdOut     string            // StdOut: the log path with %A, %a... expanded
	Fields     map[string]string // every Key=Value of the record
}

// ParseShowJob parses `scontrol show job` output, in its default
// multi-line form or its one-line form (-o). Each "JobId=" starts a record.
// Words that do not start a Key=Value are joined with a single space to the
// value before them, so values with spaces (paths, job names) survive,
// except a value containing " Key=" itself, which no parser can tell from
// a new field. Text before the first JobId= is an error.
func ParseShowJob(out string) ([]JobInfo, error) {
	var recs []map[string]string
	var last string
	for _, w := range strings.Fields(out) {
		key, val, isField := splitField(w)
		switch {
		case isField && key == "JobId":
			recs = append(recs, map[string]string{})
		case len(recs) == 0:
			return nil, fmt.Errorf("slurm: scontrol show job: %q before the first JobId=", w)
		}
		rec := recs[len(recs)-1]
		if isField {
			rec[key], last = val, key
		} else {
			rec[last] += " " + w
		}
	}
	jobs := make([]JobInfo, 0, len(recs))
	for _, r := range recs {
		j, err := jobInfo(r)
		if err != nil {
			return nil, fmt.Errorf("slurm: scontrol show job, record JobId=%s: %w", r["JobId"], err)
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

func jobInfo(r map[string]string) (JobInfo, error) {
	j := JobInfo{
		ArrayTask: r["ArrayTaskId"],
		Name:      r["JobName"],
		State:     r["JobState"],
		Reason:    r["Reason"],
		ExitCode:  r["ExitCode"],
		NodeList:  r["NodeList"],
		StdOut:    r["StdOut"],
		Fields:    r,
	}
	var err error
	if j.ID, err = ParseJobID(r["JobId"]); err != nil {
		return JobInfo{}, err
	}
	if v, ok := r["ArrayJobId"]; ok {
		if j.ArrayJobID, err = ParseJobID(v); err != nil {
			return JobInfo{}, fmt.Errorf("ArrayJobId: %w", err)
		}
		if _, err := ParseArray(j.ArrayTask); err != nil {
			return JobInfo{}, fmt.Errorf("ArrayTaskId %q: not an index or an index range", j.ArrayTask)
		}
	}
	if v, ok := r["Restarts"]; ok {
		n, err := parseUint(v, 1<<31-1)
		if err != nil {
			return JobInfo{}, fmt.Errorf("restarts %q: not a count", v)
		}
		j.Restarts = int(n)
	}
	if j.State != "" && !isStateName(j.State) {
		return JobInfo{}, fmt.Errorf("JobState %q: not a state name like RUNNING", j.State)
	}
	return j, nil
}

// Ended reports whether the job is in a final state (see Task.Ended).
func (j JobInfo) Ended() bool { return stateEnded(j.State) }

// splitField splits "Key=Value" where Key looks like one of scontrol's
// keys: an ASCII capital, then letters, digits and _/: (ReqB:S:C:T,
// CPUs/Task, MCS_label).
func splitField(w string) (key, val string, ok bool) {
	key, val, ok = strings.Cut(w, "=")
	if !ok || key == "" || key[0] < 'A' || key[0] > 'Z' {
		return "", "", false
	}
	for i := 1; i < len(key); i++ {
		c := key[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '/' || c == ':') {
			return "", "", false
		}
	}
	return key, val, true
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isStateName reports whether s looks like a Slurm job state: capitals
// and underscores.
func isStateName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if (s[i] < 'A' || s[i] > 'Z') && s[i] != '_' {
			return false
		}
	}
	return true
}
