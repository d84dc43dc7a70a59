# Build, test and package simpletuner-orchestratord and simpletuner-workerd.
GO       ?= go
# The one version the binaries report and the packages carry (see
# packaging/version.sh); make VERSION=1.2.0 sets it, without a leading "v".
override VERSION := $(shell VERSION='$(VERSION)' ./packaging/version.sh)
LDFLAGS  := -s -w -X github.com/simpletuner/simpletuner-orchestration/internal/version.Version=$(VERSION)
BIN      := bin

.PHONY: all build test lint demo bench bench-base bench-launch-ab bench-teams bench-team-list bench-dependencies bench-slurm bench-slurm-teams faults package man completions clean minio gpu-check bench-bundle

all: build

build:
	mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/simpletuner-orchestratord ./cmd/simpletuner-orchestratord
	# workerd links libc for NVML: built as a position-independent executable
	# (not -z now: NVML symbols resolve lazily, when the driver is found).
	CGO_ENABLED=1 $(GO) build -trimpath -buildmode=pie -ldflags '$(LDFLAGS)' -o $(BIN)/simpletuner-workerd ./cmd/simpletuner-workerd
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/simpletunerctl ./cmd/simpletunerctl

# The README's test command: every package, race detector on, real PostgreSQL.
# One package at a time (-p 1): the packages that start real daemons and
# clusters judge heartbeats and deadlines, and on two cores running them side
# by side made those judgements about the machine's load, not the code. The
# tests inside a package still run in parallel.
test: lint
	$(GO) test -race -count=1 -p 1 -timeout 30m ./...

# A real MinIO server for the S3 artifact backend's tests (they skip without
# it). Built once from the Go module proxy into $(go env GOPATH)/bin; about
# ten minutes on two cores. Tests never fetch it themselves.
MINIO_VERSION ?= v0.0.0-20260212201848-7aac2a2c5b7c
minio:
	@command -v minio >/dev/null 2>&1 || test -x "$$($(GO) env GOPATH)/bin/minio" || \
		{ echo "building minio $(MINIO_VERSION)"; $(GO) install github.com/minio/minio@$(MINIO_VERSION); }

# staticcheck is a tool dependency in go.mod: its version is pinned there and
# it comes through the module proxy like every other module.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

# The README's run command: orchestrator on the embedded store plus a worker running a demo job.
demo: build
	./scripts/demo.sh

# The whole fault-injection suite (docs/faults.md); plain `go test ./...` runs its fast subset.
faults: build
	SIMPLETUNER_FAULTS_FULL=1 $(GO) test -count=1 -timeout 60m -v ./test/e2e/faults

# docs/performance.md: the store's job cycle on both stores, the fleet
# (latency, job cycles, 10,000 workers, GPU packing, launches on real
# workerd), then a million finished jobs (reads, start-up, retention).
#
# The launch measurement runs an older build (BASE, a git revision: the
# previous release) beside this tree's daemons, alternating, in one table:
# docs/performance.md records it for every release. make bench BASE=<rev>
# compares with another revision.
BASE     ?= 0a6186c
BASE_DIR := dist/base-$(BASE)
BASE_FLAGS = -base-orchestratord-bin $(BASE_DIR)/simpletuner-orchestratord \
	-base-workerd-bin $(BASE_DIR)/simpletuner-workerd -base-name $(BASE)
bench: bench-base
	$(GO) test -run '^$$' -bench JobCycle -benchtime 3000x ./internal/store/sqlite/ ./internal/store/postgres/
	$(GO) run ./test/bench $(BASE_FLAGS)
	$(GO) run ./test/bench -history=1000000

# BASE's daemons, built by its own make build in a temporary git worktree,
# into the git-ignored dist/base-<rev> (kept: built once per revision).
bench-base:
	./test/bench/build-base.sh $(BASE) $(BASE_DIR)

# The launch A/B alone (a few minutes): this tree's daemons and BASE's, two
# runs each per isolation mode in the order this, BASE, BASE, this.
bench-launch-ab: build bench-base
	$(GO) run ./test/bench -launch-only -orchestratord-bin $(BIN)/simpletuner-orchestratord \
		-workerd-bin $(BIN)/simpletuner-workerd $(BASE_FLAGS)

# The daemons on a real NVIDIA GPU with a small PyTorch trainer (test/gpu):
# the documented submit reaches the GPUs, cancel and kill -9 free them,
# a leftover process holds a GPU back. Skips, saying so, without a GPU.
gpu-check: build
	./test/gpu/check.sh

# Everything `go run ./test/bench` runs, prebuilt into one folder, for a
# machine without Go or a C compiler: copy dist/bench-bundle there and run
# ./bench -bundle . (see dist/bench-bundle/README).
BUNDLE := dist/bench-bundle
bench-bundle: build
	rm -rf $(BUNDLE) && mkdir -p $(BUNDLE)
	cp $(BIN)/simpletuner-orchestratord $(BIN)/simpletuner-workerd $(BIN)/simpletunerctl $(BUNDLE)/
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BUNDLE)/bench ./test/bench
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BUNDLE)/stamp ./test/bench/stamp
	cc -O2 -static -nostdlib -ffreestanding -fno-stack-protector -fno-builtin \
		-fno-tree-loop-distribute-patterns -o $(BUNDLE)/zerojob test/bench/zerojob/zerojob.c
	cp test/bench/bundle-README $(BUNDLE)/README
	du -sh $(BUNDLE)

# The GPU packing trace replayed through Slurm's backfill scheduler on this
# machine (root, Debian's slurm-wlm and munge; see test/bench/slurm/README.md).
bench-slurm:
	./test/bench/slurm/run.sh

# The two-team trace (test/bench/teams.go): team flood fills the fleet at
# 0 s, team late submits 6 s later, shares 50/50. On the orchestrator with
# teams and preemption, with teams without preemption and with no teams
# (about 2 minutes each); through Slurm with fair share (a private slurmdbd
# and MariaDB), with QOS preemption and without. See docs/performance.md.
bench-teams:
	$(GO) run ./test/bench -gpus-only -gpu-teams

# The first page of GET /api/queue from 20,000 jobs of four teams, as the
# fleet's admin and as members walled into their teams, in the store on
# SQLite and PostgreSQL. See docs/performance.md.
bench-team-list:
	$(GO) test -run '^$$' -bench TeamList -benchtime 200x ./internal/store/sqlite/ ./internal/store/postgres/

# The end of a job that 100 and 1,000 (the most) waiting jobs depend on: one
# transaction moves them all (docs/performance.md).
bench-dependencies:
	$(GO) test -run '^$$' -bench ReleaseDependents -benchtime 3x ./internal/store/sqlite/ ./internal/store/postgres/

bench-slurm-teams:
	TEAMS=1 PREEMPT=1 ./test/bench/slurm/run.sh
	TEAMS=1 PREEMPT=0 ./test/bench/slurm/run.sh

man:
	./packaging/build-man.sh

# simpletunerctl's shell completion files, generated by the binary itself, for
# the packages: bash, zsh and fish each look for them under their own name.
completions: build
	mkdir -p packaging/completions
	$(BIN)/simpletunerctl completion bash >packaging/completions/simpletunerctl
	$(BIN)/simpletunerctl completion zsh >packaging/completions/_simpletunerctl
	$(BIN)/simpletunerctl completion fish >packaging/completions/simpletunerctl.fish

package: build man completions
	VERSION='$(VERSION)' ./packaging/build-packages.sh

clean:
	rm -rf $(BIN) dist packaging/completions
