#!/bin/bash
# s3-local.sh — a real S3 server on this machine, for soma's tests and for
# trying soma's bucket store (s3://bucket/prefix) without a cloud account.
#
#   scripts/s3-local.sh start    start it (building it first if need be) and make the test bucket
#   scripts/s3-local.sh stop     stop what start started
#   scripts/s3-local.sh status   say what runs; exit 0 only if it answers
#   scripts/s3-local.sh env      print the export lines that point soma at it:
#                                eval "$(scripts/s3-local.sh env)"
#
# The server is versitygw v1.8.0 (Go, Apache-2.0) with its POSIX backend:
# each bucket is a folder under the state directory. It enforces
# If-None-Match: * on PUT under concurrent writers (shared/notes: 8
# concurrent PUTs of one key, 6 rounds, exactly one 200 each), which is
# what soma's claims need. It is built once with `go install
# github.com/versity/versitygw/cmd/versitygw@v1.8.0` (about 5 minutes and
# 480 MB of modules the first time) into $(go env GOPATH)/bin.
#
# start is idempotent: with the server up and the bucket there it does
# nothing. The keys are made once, at random, and kept in the state
# directory (so env prints the same ones each time); start also writes
# the export lines to $STATE/env, where soma's tests find them when the
# variables are not set (internal/testutil.NeedS3). stop ends exactly the
# process start started, by pid file, after checking /proc/PID/comm;
# never by name.
#
# Environment: SOMA_S3_STATE (state directory, default
# ${XDG_STATE_HOME:-$HOME/.local/state}/soma-s3), SOMA_S3_PORT (9740),
# SOMA_S3_BUCKET (soma-test), SOMA_S3_TIMEOUT (seconds to wait for the
# server, 30).

set -euo pipefail

STATE=${SOMA_S3_STATE:-${XDG_STATE_HOME:-$HOME/.local/state}/soma-s3}
PORT=${SOMA_S3_PORT:-9740}
BUCKET=${SOMA_S3_BUCKET:-soma-test}
TIMEOUT=${SOMA_S3_TIMEOUT:-30}
readonly VERSION=v1.8.0
readonly REGION=us-east-1
ENDPOINT="http://127.0.0.1:$PORT"

say() { printf 's3-local: %s\n' "$*" >&2; }
die() {
	printf 's3-local: error: %s\n' "$*" >&2
	exit 1
}

usage() {
	echo "usage: s3-local.sh start | stop | status | env" >&2
	exit 2
}

# binary prints the path of versitygw, building it if it is missing.
binary() {
	local gobin
	if command -v versitygw >/dev/null; then
		command -v versitygw
		return
	fi
	command -v go >/dev/null || die "versitygw is not installed and there is no go to build it (install Go, or put versitygw on PATH)"
	gobin=$(go env GOBIN)
	[[ -n $gobin ]] || gobin=$(go env GOPATH)/bin
	if [[ ! -x $gobin/versitygw ]]; then
		say "building versitygw $VERSION (go install; a few minutes the first time)"
		(cd / && go install "github.com/versity/versitygw/cmd/versitygw@$VERSION") >&2 ||
			die "go install github.com/versity/versitygw/cmd/versitygw@$VERSION failed (see above)"
	fi
	echo "$gobin/versitygw"
}

# pid_of prints the server's pid if the pid file names a live versitygw.
pid_of() {
	local pid
	[[ -f $STATE/pid ]] || return 1
	pid=$(<"$STATE/pid")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	[[ -r /proc/$pid/comm && $(</proc/"$pid"/comm) == versitygw ]] || return 1
	echo "$pid"
}

# keys makes the access and secret keys once.
keys() {
	if [[ ! -s $STATE/keys ]]; then
		umask 077
		printf 'ACCESS=soma%s\nSECRET=%s\n' "$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')" "$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')" >"$STATE/keys"
	fi
	# shellcheck disable=SC1091
	. "$STATE/keys"
}

# answers reports whether something answers HTTP at the endpoint.
answers() {
	local code
	code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$ENDPOINT/" 2>/dev/null) || return 1
	[[ $code != 000 ]]
}

# s3 runs a SigV4-signed request with curl: s3 METHOD PATH [curl args].
s3() {
	local method=$1 path=$2
	shift 2
	curl -s -m 10 -X "$method" --aws-sigv4 "aws:amz:$REGION:s3" --user "$ACCESS:$SECRET" \
		-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@" "$ENDPOINT$path"
}

write_env() {
	cat >"$STATE/env.tmp" <<EOF
export AWS_ENDPOINT_URL=$ENDPOINT
export AWS_ACCESS_KEY_ID=$ACCESS
export AWS_SECRET_ACCESS_KEY=$SECRET
export AWS_REGION=$REGION
export SOMA_TEST_BUCKET=$BUCKET
EOF
	mv "$STATE/env.tmp" "$STATE/env"
}

start() {
	local bin pid code i
	mkdir -p "$STATE/data"
	keys
	if pid=$(pid_of) && answers; then
		:
	else
		if answers; then
			die "something else answers at $ENDPOINT (not the versitygw this script started): set SOMA_S3_PORT to a free port"
		fi
		bin=$(binary)
		say "starting versitygw on $ENDPOINT (data in $STATE/data, log in $STATE/log)"
		# The root account's keys are given as flags and in the
		# environment (ROOT_ACCESS_KEY/ROOT_SECRET_KEY), as versitygw's
		# documentation shows both. --keep-alive: without it every request
		# opens a new connection. --quiet: no line per request in the log.
		ROOT_ACCESS_KEY=$ACCESS ROOT_SECRET_KEY=$SECRET \
			setsid nohup "$bin" --port "127.0.0.1:$PORT" --access "$ACCESS" --secret "$SECRET" --region "$REGION" --quiet --keep-alive \
			posix "$STATE/data" >"$STATE/log" 2>&1 </dev/null &
		echo $! >"$STATE/pid"
		for ((i = 0; i < TIMEOUT * 10; i++)); do
			answers && break
			pid_of >/dev/null || die "versitygw exited at start; its log ($STATE/log):
$(tail -20 "$STATE/log")"
			sleep 0.1
		done
		answers || die "versitygw did not answer at $ENDPOINT within ${TIMEOUT}s; its log: $STATE/log"
	fi
	code=$(s3 HEAD "/$BUCKET" -o /dev/null -w '%{http_code}' -I) || true
	case $code in
	200) ;;
	404)
		code=$(s3 PUT "/$BUCKET" -o /dev/null -w '%{http_code}') || true
		[[ $code == 200 ]] || die "could not make the bucket $BUCKET (HTTP $code); log: $STATE/log"
		say "made bucket $BUCKET"
		;;
	*) die "HEAD of bucket $BUCKET answered HTTP $code (the keys in $STATE/keys are not the server's? stop and start again)" ;;
	esac
	write_env
	say "up: $ENDPOINT, bucket $BUCKET (eval \"\$(scripts/s3-local.sh env)\")"
}

stop() {
	local pid i
	if ! pid=$(pid_of); then
		say "not running"
		rm -f "$STATE/pid"
		return
	fi
	kill "$pid"
	for ((i = 0; i < 50; i++)); do
		pid_of >/dev/null || break
		sleep 0.1
	done
	if pid_of >/dev/null; then
		kill -9 "$pid"
	fi
	rm -f "$STATE/pid"
	say "stopped versitygw ($pid)"
}

status() {
	local pid
	if pid=$(pid_of) && answers; then
		echo "s3-local: versitygw $pid answers at $ENDPOINT (state $STATE)"
		return 0
	fi
	echo "s3-local: not running (scripts/s3-local.sh start)"
	return 1
}

env_lines() {
	[[ -s $STATE/keys ]] || die "never started: run scripts/s3-local.sh start first"
	keys
	pid_of >/dev/null || say "warning: the server is not running (scripts/s3-local.sh start)"
	cat <<EOF
export AWS_ENDPOINT_URL=$ENDPOINT
export AWS_ACCESS_KEY_ID=$ACCESS
export AWS_SECRET_ACCESS_KEY=$SECRET
export AWS_REGION=$REGION
export SOMA_TEST_BUCKET=$BUCKET
EOF
}

case ${1:-} in
start) start ;;
stop) stop ;;
status) status ;;
env) env_lines ;;
*) usage ;;
esac
