# Build, test and package simpletuner-orchestratord and simpletuner-workerd.
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/simpletuner/simpletuner-orchestration/internal/version.Version=$(VERSION)
BIN      := bin

.PHONY: all build test lint demo bench faults package man clean

all: build

build:
	mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/simpletuner-orchestratord ./cmd/simpletuner-orchestratord
	CGO_ENABLED=1 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/simpletuner-workerd ./cmd/simpletuner-workerd

# The README's test command: every package, race detector on, real PostgreSQL.
test: lint
	$(GO) test -race -count=1 -timeout 20m ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# The README's run command: orchestrator on the embedded store plus a worker running a demo job.
demo: build
	./scripts/demo.sh

# The whole fault-injection suite (docs/faults.md); plain `go test ./...` runs its fast subset.
faults: build
	SIMPLETUNER_FAULTS_FULL=1 $(GO) test -count=1 -timeout 60m -v ./test/e2e/faults

bench:
	$(GO) run ./test/bench

man:
	./packaging/build-man.sh

package: build man
	./packaging/build-packages.sh

clean:
	rm -rf $(BIN) dist
