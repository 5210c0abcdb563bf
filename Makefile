# soma — build, test, lint, bench. `make test` is what CI runs (.ci/run).
SHELL     := /bin/bash
GO        ?= go
PYTHON    ?= /usr/bin/python3
STATICCHECK_VERSION ?= v0.8.2
# -race on 2 cores: keep packages from running all at once.
TESTFLAGS ?= -race -count=1 -timeout 20m -p 2

export SOMA_PYTHON ?= $(PYTHON)
# go-nvml's nvml.h marks NVML functions soma never calls as deprecated, and
# cgo prints a warning for each when worker builds; -O2 -g is Go's default.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

.PHONY: all build demo test deps fmt-check vet lint race bench clean

all: build

build:
	$(GO) build -o bin/ ./cmd/...

# The main job on a laptop: a local study folder, no Slurm, no daemon.
# Runs examples/quadratic with 2 objectives at once, then shows the study.
# Run it again and it joins the finished study; rm -rf demo-root to start over.
demo: build
	@[ -x $(PYTHON) ] || { echo "demo: installing python3 (Debian)"; apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3 >/dev/null; }
	bin/soma-trial --root demo-root --study quadratic --spec examples/quadratic/spec.toml --parallel 2 -- \
		$(PYTHON) examples/quadratic/objective.py --x {x} --y {y} --noise {noise}
	@if [ -x bin/soma ]; then bin/soma status demo-root; fi

# Everything: install what the tests need (Debian packages, a local Slurm),
# then format check, vet, staticcheck, and the race-enabled tests with every
# optional dependency required (SOMA_REQUIRE=1: nothing silently skipped).
test: deps fmt-check vet lint race

deps:
	bash scripts/test-deps.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi; echo "fmt-check: ok"

vet:
	$(GO) vet ./...

lint: vet
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	@echo "lint: ok"

race:
	@set -o pipefail; SOMA_REQUIRE=1 $(GO) test $(TESTFLAGS) -json ./... | $(GO) run ./internal/tools/testsum

# Benchmarks, printed side by side with the bare syscalls and the peers.
bench:
	@echo "## fsstore: soma vs the raw syscalls it is built on (last column: ratio of times)"
	@$(GO) test -run '^$$' -bench . -benchtime 1s ./fsstore/ | $(GO) run ./internal/tools/benchtable
	@for s in scripts/bench-*.sh; do [ -e "$$s" ] && echo && bash "$$s"; done; true

clean:
	rm -rf bin
