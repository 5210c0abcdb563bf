#!/bin/bash
# slowfs.sh — a slow filesystem at DIR, for measuring soma as if its folder
# were on NFS (issue 18): a FUSE loopback (internal/tools/slowfs) that waits
# DELAY in every metadata operation, lets the kernel cache no name and no
# attribute (NFS with lookupcache=none,noac), and counts the operations it
# serves, by kind.
#
#   scripts/slowfs.sh start [--delay 1ms] DIR   mount DIR (made if missing)
#   scripts/slowfs.sh counts DIR [--reset]      the counts as one JSON object; --reset zeroes them
#   scripts/slowfs.sh stop DIR                  unmount DIR; deletes what was written on it
#   scripts/slowfs.sh status DIR                exit 0 if DIR is a running slowfs
#
# start builds internal/tools/slowfs/cmd/slowfs, and mounts DIR over a scratch
# folder in the state directory ($SOMA_SLOWFS_STATE, default
# /var/lib/soma-slowfs, one subfolder per DIR: the binary, the pid file,
# the control socket, the log and the backing folder). Starting a DIR that
# runs with the same delay is a no-op; with another delay, it restarts it
# (and what was written on it is gone). It needs root and /dev/fuse (a
# direct mount(2), no fusermount); if fusermount3 is missing it installs
# Debian's fuse3 (go-fuse falls back to it where mount(2) is refused).
#
# stop ends exactly the process start started, by pid file, after checking
# /proc/PID/comm; never by name. A mount whose server died (kill -9) is
# unmounted too. Then the state folder, the backing folder with it, is
# removed.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
STATE=${SOMA_SLOWFS_STATE:-/var/lib/soma-slowfs}

say() { printf 'slowfs: %s\n' "$*" >&2; }
die() {
	printf 'slowfs: error: %s\n' "$*" >&2
	exit 1
}
usage() {
	echo "usage: slowfs.sh start [--delay D] DIR | counts DIR [--reset] | stop DIR | status DIR" >&2
	exit 2
}

# state_of DIR: the state folder of the slowfs at DIR.
state_of() {
	local key
	key=$(printf '%s' "$1" | sha1sum | cut -c1-12)
	printf '%s/%s\n' "$STATE" "$key"
}

# pid_of STATE: the pid of the running slowfs of STATE, or fail.
pid_of() {
	local pid
	{ read -r pid <"$1/pid"; } 2>/dev/null || return 1
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	[[ $(cat "/proc/$pid/comm" 2>/dev/null) == slowfs ]] || return 1
	printf '%s\n' "$pid"
}

mounted() { grep -q " $(printf '%s' "$1" | sed 's/ /\\040/g') fuse" /proc/self/mounts; }

need_fuse() {
	[[ $(id -u) == 0 ]] || die "must run as root (a direct FUSE mount needs it): sudo $0 start DIR"
	[[ -e /dev/fuse ]] || die "no /dev/fuse: load the module (modprobe fuse) or give the container --device /dev/fuse"
	if ! command -v fusermount3 >/dev/null; then
		say "installing fuse3 (Debian)"
		export DEBIAN_FRONTEND=noninteractive
		if ! { apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null &&
			apt-get -o DPkg::Lock::Timeout=600 install -y -q fuse3 >/dev/null; }; then
			say "could not install fuse3; going on with mount(2) alone"
		fi
	fi
}

stop() {
	local dir=$1 st pid i
	st=$(state_of "$dir")
	if pid=$(pid_of "$st"); then
		say "stopping slowfs at $dir (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 150; i++)); do
			[[ $(cat "/proc/$pid/comm" 2>/dev/null) == slowfs ]] || break
			sleep 0.1
		done
		if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == slowfs ]]; then
			say "pid $pid still runs after 15 s (a process keeps a file open in $dir?); killing it"
			kill -KILL "$pid" 2>/dev/null || true
			sleep 0.2
		fi
	fi
	if mounted "$dir"; then
		umount "$dir" 2>/dev/null || umount -l "$dir"
	fi
	rm -rf "$st"
}

start() {
	local delay=1ms dir st pid i
	while (($#)); do
		case $1 in
		--delay) delay=${2:?--delay needs a value, e.g. 1ms}; shift 2 ;;
		--delay=*) delay=${1#*=}; shift ;;
		-*) usage ;;
		*) [[ -z ${dir:-} ]] || usage; dir=$1; shift ;;
		esac
	done
	[[ -n ${dir:-} ]] || usage
	need_fuse
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd -P)
	st=$(state_of "$dir")
	if pid_of "$st" >/dev/null && mounted "$dir"; then
		if [[ $(cat "$st/delay" 2>/dev/null) == "$delay" ]]; then
			say "$dir runs already (delay $delay)"
			return 0
		fi
		say "$dir runs with delay $(cat "$st/delay"); restarting with $delay"
	fi
	stop "$dir"
	mkdir -p "$st/backing"
	"$GO" build -o "$st/slowfs" ./internal/tools/slowfs/cmd/slowfs
	printf '%s\n' "$delay" >"$st/delay"
	setsid "$st/slowfs" serve -backing "$st/backing" -ctl "$st/ctl" -delay "$delay" "$dir" >"$st/log" 2>&1 </dev/null &
	echo $! >"$st/pid"
	for ((i = 0; i < 100; i++)); do
		if "$st/slowfs" counts -ctl "$st/ctl" >/dev/null 2>&1 && mounted "$dir"; then
			say "$dir mounted (delay $delay, state $st)"
			return 0
		fi
		pid_of "$st" >/dev/null || break
		sleep 0.1
	done
	cat "$st/log" >&2 || true
	stop "$dir"
	die "slowfs at $dir did not start (its log is above)"
}

(($# >= 2)) || usage
cmd=$1
shift
case $cmd in
start) start "$@" ;;
stop)
	# A mount whose server died answers ENOTCONN: name it without entering it.
	if ! dir=$(cd "$1" 2>/dev/null && pwd -P); then
		dir=$(realpath -sm "$1")
	fi
	stop "$dir"
	;;
counts)
	dir=$(cd "$1" && pwd -P)
	st=$(state_of "$dir")
	[[ -x $st/slowfs ]] || die "no slowfs at $dir (scripts/slowfs.sh start $dir)"
	if [[ ${2:-} == --reset ]]; then
		"$st/slowfs" counts -ctl "$st/ctl" -reset
	else
		"$st/slowfs" counts -ctl "$st/ctl"
	fi
	;;
status)
	dir=$(cd "$1" && pwd -P)
	st=$(state_of "$dir")
	if pid=$(pid_of "$st") && mounted "$dir"; then
		echo "slowfs at $dir: running (pid $pid, delay $(cat "$st/delay"))"
	else
		echo "slowfs at $dir: not running"
		exit 1
	fi
	;;
*) usage ;;
esac
