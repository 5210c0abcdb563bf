#!/usr/bin/env bash
# Installs and starts what soma's tests need, idempotently: Debian's
# Python packages (the peers and the objectives' libraries), Chromium for
# the report test, and a local Slurm. Safe to run again; fast when all is
# there. Needs root for apt-get on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

# gcc and libc6-dev: go test -race needs cgo, and worker's tests build an NVML
# stub with gcc. python3-venv, -pip, -setuptools, -wheel: the env pool tests
# build venvs and a local wheel offline. fuse3: internal/tools/slowfs's tests and
# scripts/slowfs.sh mount FUSE (by mount(2) as root; fusermount3 is the
# fallback where mount(2) is refused).
pkgs=(gcc libc6-dev fuse3 shellcheck python3 python3-venv python3-pip python3-setuptools python3-wheel python3-numpy python3-sklearn python3-optuna python3-pandas python3-zarr chromium)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "test-deps: installing ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then
    echo "test-deps: need root to apt-get install ${missing[*]} (or install them yourself)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
  apt-get -o DPkg::Lock::Timeout=600 install -y -q "${missing[@]}" >/dev/null
fi
# python3-torch (examples/digits-cut: the torch worker's embedding), alone and
# without its Recommends (libtorch-dev, build-essential, ninja...): 134 MB to
# fetch, about 700 MB on disk, 144 packages; 4 minutes to install on a busy
# 2-CPU machine, most of it dpkg unpacking.
if ! dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "install ok installed"; then
  echo "test-deps: installing python3-torch (no recommends)"
  if [ "$(id -u)" != 0 ]; then
    echo "test-deps: need root to apt-get install python3-torch (or install it yourself)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
  apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends python3-torch >/dev/null
fi
echo "test-deps: debian packages ok ($(/usr/bin/python3 -c 'import optuna, zarr, sklearn, torch; print("optuna", optuna.__version__, "zarr", zarr.__version__, "torch", torch.__version__)'))"

if [ -x scripts/slurm-local.sh ] || [ -f scripts/slurm-local.sh ]; then
  # Two nodes at least: examples/slurm-workers checks one soma-worker per
  # node (srun --ntasks-per-node=1), which needs a second node to mean
  # anything. A bigger cluster is kept; a 1-node one is restarted once.
  bash scripts/slurm-local.sh start --min-nodes 2
fi

# A local S3 server (versitygw) with a test bucket, for the bucket store's
# tests (s3store, and soma-trial on s3://): idempotent, and the tests find
# its settings in the env file it writes (internal/testutil.NeedS3).
bash scripts/s3-local.sh start
