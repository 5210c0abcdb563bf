#!/bin/bash
# slurm-local.sh — a real Slurm cluster on this one machine, for soma's tests
# and for trying soma's Slurm side on a laptop.
#
#   scripts/slurm-local.sh start [--nodes N | --min-nodes N] [--cpus C]
#   scripts/slurm-local.sh stop
#   scripts/slurm-local.sh status
#
# start installs Debian's munge, slurmctld, slurmd and slurm-client if they
# are missing, writes /etc/slurm/slurm.conf (one partition "local", no
# accounting, requeue allowed), makes a munge key if there is none, starts
# munged, slurmctld and one slurmd per node in the background with pid files
# under the state directory, and waits until every node answers sinfo as
# ready. With --nodes N > 1 the nodes are emulated on this host
# (<host>n1..<host>nN, Debian's slurmd is built with multiple-slurmd), each
# slurmd on its own port. Without --nodes or --cpus, start keeps the shape
# of the cluster it configured before (1 node the first time). --min-nodes N
# asks for at least N nodes: a smaller cluster is reshaped to N, a bigger one
# is kept (make test passes --min-nodes 2, so that examples/slurm-workers
# checks one worker per node, without reshaping a developer's 3-node
# cluster). Re-running
# start with everything up and the same configuration is a fast no-op; a
# changed configuration restarts Slurm and clears its job state. A drained
# node is resumed.
#
# stop ends exactly the processes start started, by pid file, after checking
# /proc/PID/comm; never by name. status prints what runs and exits 0 only if
# everything is up.
#
# Environment (flags win): SOMA_SLURM_NODES (1), SOMA_SLURM_MIN_NODES (1),
# SOMA_SLURM_CPUS (per node,
# default max(nproc, 8): advertised with SlurmdParameters=config_overrides so
# that array tests run their tasks at once on a 2-core machine),
# SOMA_SLURM_PROCTRACK (cgroup or linuxproc; default cgroup when the cgroup v1
# freezer is mounted, so that scancel also kills double-forked children),
# SOMA_SLURM_TIMEOUT (seconds to wait for the nodes, 60),
# SOMA_SLURM_STATE (/var/lib/soma-slurm).
#
# Facts and traps this follows: shared/notes/local-slurm.md (no systemd, and
# policy-rc.d stops apt from starting services; other apt runs may hold the
# dpkg lock; the host name must resolve; jobs run as root; requeued jobs wait
# AuthInfo's cred_expire before they may start again).

set -euo pipefail

readonly CONF=/etc/slurm/slurm.conf
readonly CGROUP_CONF=/etc/slurm/cgroup.conf
readonly MARKER="# Managed by soma's scripts/slurm-local.sh: it rewrites this file on every start."
readonly MUNGE_KEY=/etc/munge/munge.key
STATE=${SOMA_SLURM_STATE:-/var/lib/soma-slurm}
TIMEOUT=${SOMA_SLURM_TIMEOUT:-60}
T0=$(date +%s.%N)

say() { printf 'slurm-local: %s\n' "$*"; }
die() {
	printf 'slurm-local: error: %s\n' "$*" >&2
	exit 1
}
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1fs", b - a }'; }

usage() {
	cat >&2 <<'EOF'
usage: slurm-local.sh start [--nodes N | --min-nodes N] [--cpus C] | stop | status
EOF
	exit 2
}

need_root() {
	[[ $(id -u) == 0 ]] && return
	if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
		exec sudo -n --preserve-env=SOMA_SLURM_NODES,SOMA_SLURM_MIN_NODES,SOMA_SLURM_CPUS,SOMA_SLURM_PROCTRACK,SOMA_SLURM_TIMEOUT,SOMA_SLURM_STATE "$0" "$@"
	fi
	die "must run as root (Slurm's daemons and /etc/slurm need it): sudo $0 $*"
}

# --- processes, by pid file ---------------------------------------------------

# pid_of FILE COMM prints the pid recorded in FILE if that process is alive and
# its /proc/PID/comm is COMM; otherwise it prints nothing and fails.
pid_of() {
	local file=$1 comm=$2 pid got
	[[ -r $file ]] || return 1
	read -r pid <"$file" 2>/dev/null || return 1
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	got=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
	[[ $got == "$comm" ]] || return 1
	printf '%s\n' "$pid"
}

# wait_pidfile FILE COMM: a daemon that forks writes its pid file shortly
# after its parent returns; wait up to 10 s for it.
wait_pidfile() {
	local i
	for ((i = 0; i < 100; i++)); do
		pid_of "$1" "$2" >/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# stop_pids FILE:COMM... sends SIGTERM to each recorded live process, waits
# for all of them together, and sends SIGKILL to any left after 20 s.
stop_pids() {
	local spec file comm pid i left
	local -a pids=()
	for spec in "$@"; do
		file=${spec%:*} comm=${spec##*:}
		if pid=$(pid_of "$file" "$comm"); then
			say "stopping $comm (pid $pid)"
			kill -TERM "$pid" 2>/dev/null || true
			pids+=("$pid:$comm")
		fi
		rm -f "$file"
	done
	((${#pids[@]})) || return 0
	for ((i = 0; i < 200; i++)); do
		left=0
		for spec in "${pids[@]}"; do
			[[ $(cat "/proc/${spec%:*}/comm" 2>/dev/null) == "${spec##*:}" ]] && left=1
		done
		((left)) || return 0
		sleep 0.1
	done
	for spec in "${pids[@]}"; do
		if [[ $(cat "/proc/${spec%:*}/comm" 2>/dev/null) == "${spec##*:}" ]]; then
			say "killing ${spec##*:} (pid ${spec%:*}): still alive 20 s after SIGTERM"
			kill -KILL "${spec%:*}" 2>/dev/null || true
		fi
	done
}

# --- configuration ------------------------------------------------------------

host_name() {
	local h
	h=$(hostname -s 2>/dev/null || hostname)
	[[ $h =~ ^[A-Za-z0-9][A-Za-z0-9-]*$ ]] || die "host name '$h' is not a plain name Slurm accepts (set one with: hostname NAME)"
	printf '%s\n' "$h"
}

# node_names prints one Slurm node name per line.
node_names() {
	local i
	if ((NODES == 1)); then
		printf '%s\n' "$HOST"
	else
		for ((i = 1; i <= NODES; i++)); do printf '%sn%d\n' "$HOST" "$i"; done
	fi
}

pick_proctrack() {
	case ${SOMA_SLURM_PROCTRACK:-} in
	cgroup | linuxproc) printf '%s\n' "$SOMA_SLURM_PROCTRACK" ;;
	"")
		# Slurm 22.05's cgroup/v1 plugin needs the freezer controller; on a
		# cgroup v2 host it would need more than this script can promise.
		if [[ -d /sys/fs/cgroup/freezer ]] && grep -q ' /sys/fs/cgroup/freezer cgroup ' /proc/mounts; then
			echo cgroup
		else
			echo linuxproc
		fi
		;;
	*) die "SOMA_SLURM_PROCTRACK='$SOMA_SLURM_PROCTRACK' is neither cgroup nor linuxproc" ;;
	esac
}

# render_conf prints slurm.conf for HOST, NODES, CPUS, MEM and PROCTRACK.
render_conf() {
	local i port name
	cat <<EOF
$MARKER
# Nodes: $NODES, CPUs per node: $CPUS (advertised; see SlurmdParameters).
ClusterName=somalocal
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=6817
# Jobs run as whoever submits them; root owns the daemons (shared/notes/local-slurm.md).
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# A requeued job may start again only after cred_expire (default 120 s);
# 10 s keeps requeue tests short.
AuthInfo=cred_expire=10
MpiDefault=none
ProctrackType=proctrack/$PROCTRACK
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# Schedule at once instead of batching: 4 array tasks run in ~2 s, not ~5.
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=2,bf_interval=2
# Trust the CPU counts below instead of the hardware, so tests can run more
# tasks at once than this machine has cores.
SlurmdParameters=config_overrides
MailProg=/bin/true
ReturnToService=2
JobRequeue=1
KillWait=5
MinJobAge=300
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
EOF
	if ((NODES == 1)); then
		echo "NodeName=$HOST NodeAddr=127.0.0.1 Port=6818 CPUs=$CPUS RealMemory=$MEM State=UNKNOWN"
	else
		i=0
		while read -r name; do
			port=$((6831 + i))
			i=$((i + 1))
			echo "NodeName=$name NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$port CPUs=$CPUS RealMemory=$MEM State=UNKNOWN"
		done < <(node_names)
	fi
	echo "PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
}

render_cgroup_conf() {
	cat <<EOF
$MARKER
CgroupPlugin=cgroup/v1
CgroupAutomount=no
EOF
}

# ours FILE succeeds if FILE is absent or was written by this script; any
# other slurm.conf belongs to someone else and is never overwritten.
ours() {
	[[ ! -e $1 ]] || head -n1 "$1" | grep -qxF "$MARKER"
}

# --- installation and prerequisites -------------------------------------------

install_packages() {
	local missing=() b
	for b in /usr/sbin/munged /usr/sbin/slurmctld /usr/sbin/slurmd /usr/bin/sinfo /usr/bin/sbatch; do
		[[ -x $b ]] || missing+=("$b")
	done
	((${#missing[@]})) || return 0
	command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get: install munge and Slurm (slurmctld, slurmd, slurm-client) yourself"
	say "installing munge slurmctld slurmd slurm-client (apt; missing ${missing[*]})"
	local apt=(apt-get -o DPkg::Lock::Timeout=600 -y -q)
	export DEBIAN_FRONTEND=noninteractive
	# Try without an update first (fast when the lists are fresh); a stale or
	# empty list fails the install, and then one update fixes it.
	if ! "${apt[@]}" install --no-install-recommends munge slurmctld slurmd slurm-client >"$STATE/log/apt.log" 2>&1; then
		"${apt[@]}" update >>"$STATE/log/apt.log" 2>&1 || {
			tail -n 20 "$STATE/log/apt.log" >&2
			die "apt-get update failed (log above, full log $STATE/log/apt.log)"
		}
		"${apt[@]}" install --no-install-recommends munge slurmctld slurmd slurm-client >>"$STATE/log/apt.log" 2>&1 || {
			tail -n 20 "$STATE/log/apt.log" >&2
			die "apt-get install failed (log above, full log $STATE/log/apt.log)"
		}
	fi
}

ensure_host_resolves() {
	getent hosts "$HOST" >/dev/null && return
	say "adding '127.0.0.1 $HOST' to /etc/hosts (the host name did not resolve)"
	printf '127.0.0.1\t%s\n' "$HOST" >>/etc/hosts || die "cannot add $HOST to /etc/hosts: make the host name resolve (Slurm needs it)"
}

ensure_munge_key() {
	install -d -o munge -g munge -m 0700 /etc/munge
	install -d -o munge -g munge -m 0755 /run/munge
	install -d -o munge -g munge -m 0711 /var/lib/munge
	install -d -o munge -g munge -m 0700 /var/log/munge
	[[ -s $MUNGE_KEY ]] && return
	say "creating $MUNGE_KEY"
	(
		umask 077
		dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
	)
	chown munge:munge "$MUNGE_KEY"
	chmod 0400 "$MUNGE_KEY"
}

munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

# --- daemons ------------------------------------------------------------------

start_munged() {
	if munge_works; then
		return 0 # ours from an earlier start, or the system's: either will do
	fi
	rm -f "$STATE/run/munged.pid"
	say "starting munged"
	# munged forks and its parent returns once the daemon is ready; it runs
	# as munge, the owner of the key, and cannot write the root-owned state
	# dir, so its own pid file is copied there.
	runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid </dev/null >>"$STATE/log/munged.out" 2>&1 ||
		fail "munged did not start" "$STATE/log/munged.out" /var/log/munge/munged.log
	wait_pidfile /run/munge/munged.pid munged || fail "munged did not write its pid file" "$STATE/log/munged.out" /var/log/munge/munged.log
	pid_of /run/munge/munged.pid munged >"$STATE/run/munged.pid"
	local i
	for ((i = 0; i < 50; i++)); do
		munge_works && return 0
		sleep 0.1
	done
	fail "munged runs but 'munge -n | unmunge' fails" "$STATE/log/munged.out" /var/log/munge/munged.log
}

start_slurmctld() {
	local clear=$1 flags=()
	pid_of "$STATE/run/slurmctld.pid" slurmctld >/dev/null && return 0
	# -c: a new configuration starts from an empty job table, so no job
	# refers to nodes that no longer exist.
	[[ $clear == 1 ]] && flags+=(-c)
	say "starting slurmctld${flags[*]:+ (${flags[*]}: new configuration, job state cleared)}"
	/usr/sbin/slurmctld "${flags[@]}" </dev/null >>"$STATE/log/slurmctld.out" 2>&1 || fail "slurmctld did not start" "$STATE/log/slurmctld.out" "$STATE/log/slurmctld.log"
	wait_pidfile "$STATE/run/slurmctld.pid" slurmctld || fail "slurmctld exited at start" "$STATE/log/slurmctld.out" "$STATE/log/slurmctld.log"
}

start_slurmds() {
	local name
	while read -r name; do
		pid_of "$STATE/run/slurmd-$name.pid" slurmd >/dev/null && continue
		install -d -m 0755 "$STATE/spool/$name"
		say "starting slurmd for node $name"
		/usr/sbin/slurmd -N "$name" </dev/null >>"$STATE/log/slurmd-$name.out" 2>&1 || fail "slurmd $name did not start" "$STATE/log/slurmd-$name.out" "$STATE/log/slurmd-$name.log"
		wait_pidfile "$STATE/run/slurmd-$name.pid" slurmd || fail "slurmd $name exited at start" "$STATE/log/slurmd-$name.out" "$STATE/log/slurmd-$name.log"
	done < <(node_names)
}

# all_pidfiles prints FILE:COMM for every daemon this script may have
# started, slurmds first, munged last (the order stop wants).
all_pidfiles() {
	local f
	for f in "$STATE"/run/slurmd-*.pid; do
		[[ -e $f ]] && printf '%s:slurmd\n' "$f"
	done
	printf '%s:slurmctld\n' "$STATE/run/slurmctld.pid"
	printf '%s:munged\n' "$STATE/run/munged.pid"
}

stop_slurm_daemons() {
	local -a specs=()
	mapfile -t specs < <(all_pidfiles | grep -v ':munged$')
	stop_pids "${specs[@]}"
}

# nodes_ready succeeds when sinfo answers and every node is in a state that
# runs jobs (idle, or busy with jobs already), none down, drained or
# unresponsive ("*").
nodes_ready() {
	local out want got
	out=$(sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
	want=$(node_names | sort | tr '\n' ' ')
	got=$(awk '$2 ~ /^(idle|mix|alloc|comp)$/ { print $1 }' <<<"$out" | sort -u | tr '\n' ' ')
	[[ $got == "$want" ]]
}

wait_ready() {
	local deadline name state resumed=" "
	deadline=$(($(date +%s) + TIMEOUT))
	until nodes_ready; do
		# A node drained by an earlier mishap (an unkillable step, a
		# restart mid-job) would never come back by itself: resume it once.
		while read -r name state; do
			[[ $state =~ ^(drain|drng|down)$ && $resumed != *" $name "* ]] || continue
			say "resuming node $name ($state)"
			scontrol update NodeName="$name" State=RESUME >/dev/null 2>&1 || true
			resumed+="$name "
		done < <(sinfo -h -N -o '%N %t' 2>/dev/null)
		if (($(date +%s) >= deadline)); then
			fail "nodes not idle after ${TIMEOUT}s; sinfo says: $(sinfo -h -N -o '%N %t %E' 2>&1 | tr '\n' ';')"
		fi
		sleep 0.2
	done
}

# fail MESSAGE [LOG...] prints the tails of the given logs (default: those
# of slurmctld and of this configuration's slurmds), leaving out PMIx's
# harmless "can not load" noise, then dies with MESSAGE.
fail() {
	local msg=$1 f name
	shift
	local -a logs=("$@")
	if ((${#logs[@]} == 0)); then
		logs=("$STATE/log/slurmctld.out" "$STATE/log/slurmctld.log")
		while read -r name; do
			logs+=("$STATE/log/slurmd-$name.out" "$STATE/log/slurmd-$name.log")
		done < <(node_names)
	fi
	for f in "${logs[@]}"; do
		[[ -s $f ]] || continue
		printf -- '--- tail of %s\n' "$f" >&2
		grep -v -i -e pmix -e 'MPI: Cannot create context' "$f" | tail -n 12 >&2
	done
	die "$msg (logs above; all logs in $STATE/log)"
}

# --- commands -----------------------------------------------------------------

cmd_start() {
	# Without --nodes/--cpus (or their variables), keep what runs now: a
	# plain start must not reshape a developer's 3-node cluster, and make
	# test's --min-nodes 2 only grows a smaller one (a 1-node cluster from
	# an earlier make test is restarted once with 2 nodes).
	local cur_nodes="" cur_cpus=""
	if [[ -r $CONF ]] && ours "$CONF"; then
		read -r cur_nodes cur_cpus < <(sed -n 's/^# Nodes: \([0-9]*\), CPUs per node: \([0-9]*\) .*/\1 \2/p' "$CONF") || true
	fi
	NODES=${SOMA_SLURM_NODES:-${cur_nodes:-1}}
	CPUS=${SOMA_SLURM_CPUS:-$cur_cpus}
	local min_nodes=${SOMA_SLURM_MIN_NODES:-1}
	while (($#)); do
		case $1 in
		--nodes | --min-nodes | --cpus)
			(($# >= 2)) || die "$1 needs a value"
			case $1 in
			--nodes) NODES=$2 ;;
			--min-nodes) min_nodes=$2 ;;
			*) CPUS=$2 ;;
			esac
			shift 2
			;;
		--nodes=*) NODES=${1#*=} && shift ;;
		--min-nodes=*) min_nodes=${1#*=} && shift ;;
		--cpus=*) CPUS=${1#*=} && shift ;;
		*) usage ;;
		esac
	done
	[[ $NODES =~ ^[1-9][0-9]?$ ]] || die "--nodes '$NODES' is not a number from 1 to 99"
	[[ $min_nodes =~ ^[1-9][0-9]?$ ]] || die "--min-nodes '$min_nodes' is not a number from 1 to 99"
	((NODES >= min_nodes)) || NODES=$min_nodes
	if [[ -z $CPUS ]]; then
		CPUS=$(nproc)
		((CPUS >= 8)) || CPUS=8
	fi
	[[ $CPUS =~ ^[1-9][0-9]*$ ]] || die "--cpus '$CPUS' is not a positive number"
	[[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "SOMA_SLURM_TIMEOUT '$TIMEOUT' is not a positive number of seconds"
	install -d -m 0755 "$STATE" "$STATE/run" "$STATE/log" "$STATE/spool"
	install -d -m 0700 "$STATE/ctld"
	install_packages
	HOST=$(host_name)
	MEM=$(awk -v n="$NODES" '/^MemTotal:/ { m = int($2 / 1024 / n); print (m > 0 ? m : 1) }' /proc/meminfo)
	PROCTRACK=$(pick_proctrack)

	ours "$CONF" || die "$CONF exists and was not written by this script: move it away to use a local test cluster here"
	[[ $PROCTRACK != cgroup ]] || ours "$CGROUP_CONF" || die "$CGROUP_CONF exists and was not written by this script: move it away to use a local test cluster here"
	local conf cgconf changed=0
	conf=$(render_conf)
	cgconf=$(render_cgroup_conf)
	if [[ ! -e $CONF ]] || [[ $(<"$CONF") != "$conf" ]] ||
		{ [[ $PROCTRACK == cgroup ]] && { [[ ! -e $CGROUP_CONF ]] || [[ $(<"$CGROUP_CONF") != "$cgconf" ]]; }; }; then
		changed=1
	fi

	ensure_host_resolves
	ensure_munge_key

	if ((changed)); then
		if [[ -e $CONF ]]; then
			# The old configuration's nodes may differ: stop its slurmds too.
			stop_slurm_daemons
			say "configuration changed: writing $CONF"
		else
			say "writing $CONF"
		fi
		install -d -m 0755 /etc/slurm
		printf '%s\n' "$conf" >"$CONF.tmp" && mv "$CONF.tmp" "$CONF"
		if [[ $PROCTRACK == cgroup ]]; then
			printf '%s\n' "$cgconf" >"$CGROUP_CONF.tmp" && mv "$CGROUP_CONF.tmp" "$CGROUP_CONF"
		elif ours "$CGROUP_CONF"; then
			rm -f "$CGROUP_CONF"
		fi
	elif munge_works && pid_of "$STATE/run/slurmctld.pid" slurmctld >/dev/null && all_slurmds_up && nodes_ready; then
		say "already running: $NODES node(s) × $CPUS CPUs, proctrack/$PROCTRACK ($(elapsed))"
		return 0
	fi

	start_munged
	start_slurmctld "$changed"
	start_slurmds
	wait_ready
	say "ready: $NODES node(s) ($(node_names | tr '\n' ' ' | sed 's/ $//')) × $CPUS CPUs, proctrack/$PROCTRACK, partition local ($(elapsed))"
}

all_slurmds_up() {
	local name
	while read -r name; do
		pid_of "$STATE/run/slurmd-$name.pid" slurmd >/dev/null || return 1
	done < <(node_names)
}

cmd_stop() {
	(($# == 0)) || usage
	local -a specs=()
	mapfile -t specs < <(all_pidfiles)
	stop_pids "${specs[@]}"
	say "stopped ($(elapsed))"
}

cmd_status() {
	(($# == 0)) || usage
	local ok=0 pid name out
	if pid=$(pid_of "$STATE/run/munged.pid" munged); then
		say "munged: running, pid $pid"
	elif munge_works; then
		say "munged: running (not started by this script)"
	else
		say "munged: not running"
		ok=1
	fi
	if pid=$(pid_of "$STATE/run/slurmctld.pid" slurmctld); then
		say "slurmctld: running, pid $pid"
	else
		say "slurmctld: not running"
		ok=1
	fi
	# The nodes are the configuration's, if this script wrote it.
	if [[ -r $CONF ]] && ours "$CONF"; then
		while read -r name; do
			if pid=$(pid_of "$STATE/run/slurmd-$name.pid" slurmd); then
				say "slurmd $name: running, pid $pid"
			else
				say "slurmd $name: not running"
				ok=1
			fi
		done < <(sed -n 's/^NodeName=\([^ ]*\) .*/\1/p' "$CONF")
	else
		say "no $CONF written by this script"
		ok=1
	fi
	if out=$(sinfo -h -N -o '%N %t %c' 2>&1); then
		while read -r name state cpus; do
			say "node $name: $state, $cpus CPUs"
		done <<<"$out"
		say "jobs in squeue: $(squeue -h -o %i 2>/dev/null | wc -l)"
	else
		say "sinfo: $out"
		ok=1
	fi
	return "$ok"
}

main() {
	(($#)) || usage
	local cmd=$1
	shift
	case $cmd in
	start | stop) need_root "$cmd" "$@" ;;
	status) ;;
	-h | --help | help) usage ;;
	*) usage ;;
	esac
	"cmd_$cmd" "$@"
}

main "$@"
