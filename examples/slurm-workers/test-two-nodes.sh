#!/bin/bash
# test-two-nodes.sh — runs slurm_test.go against a private two-node local
# Slurm (scripts/slurm-local.sh start --nodes 2), in its own network and
# mount namespaces, so that the machine's shared Slurm (whatever shape make
# test gave it) keeps running undisturbed. Needs root.
#
#   sudo examples/slurm-workers/test-two-nodes.sh
#
# Inside: a tmpfs over /etc/slurm for the private configuration, a state
# folder of its own, proctrack/linuxproc (the cgroup tree is shared with
# the other Slurm), and munged's socket is the host's (same key). slurmd
# needs an address besides loopback (getaddrinfo's AI_ADDRCONFIG ignores
# loopback: "Unable to resolve (null)"), hence the veth pair.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ ${1:-} != --inside ]]; then
	exec unshare --net --mount --fork "$0" --inside
fi
ip link set lo up
ip link add v0 type veth peer name v1
ip addr add 10.99.0.1/24 dev v0
ip link set v1 up
ip link set v0 up
mount -t tmpfs tmpfs /etc/slurm
export SOMA_SLURM_STATE=${TMPDIR:-/tmp}/soma-slurm-two-nodes SOMA_SLURM_PROCTRACK=linuxproc
rm -rf "$SOMA_SLURM_STATE"
trap 'bash "$here/../../scripts/slurm-local.sh" stop' EXIT
bash "$here/../../scripts/slurm-local.sh" start --nodes 2
cd "$here"
SOMA_REQUIRE=1 go test -count=1 -v -run TestJobOnSlurm .
