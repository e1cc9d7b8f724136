# Spool: run `make help` for the targets.
SHELL := /bin/bash
MODULES := shared streams producer consumer tests examples/go
GO ?= go
# Each module's packages, so `go test` works at a go.work root with no module of its own.
PKGS = $(foreach m,$(MODULES),./$(m)/...)
TEST_TIMEOUT ?= 15m

.PHONY: help run deps test vet lint build tools examples release-check bench bench-go fuzz soak clean

help: ## Show this help
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

# run builds the commands first, so the block its banner prints (bin/ on
# PATH) finds spool-admin, spool-producer and spool-consumer.
run: ## Build the commands into bin/ and run the dev stack in the foreground (Ctrl-C stops it; SPOOL_NATS_URL, SPOOL_HTTP_ADDR, SPOOL_METRICS_ADDR, SPOOL_DEV_STORE move it)
	@mkdir -p bin
	$(GO) build -o bin/ ./streams/cmd/... ./producer/cmd/... ./consumer/cmd/... ./tests/cmd/spool-dev
	exec ./bin/spool-dev

# Fuzzing budgets are execution counts (Nx): with a duration, Go's fuzz
# engine sometimes fails a clean run with "context deadline exceeded" when
# the time runs out while a worker is busy (seen on a loaded 2-core machine).
FUZZ_SMOKE ?= 20000x

deps: ## Check for what the tests need beyond Go (chromium, script, node and npm, redis-server): install it as root, else name the command
	@scripts/deps.sh

# The fault suite (tests/faults) and the conformance kit (tests/conformancekit)
# write their tables to a directory of this run's own (go test shows a
# passing package's output only with -v).
test: deps vet tools examples ## Check the tools, vet, run every module's tests with the race detector, fuzz each target for FUZZ_SMOKE (20000 inputs)
	@tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/spool-test-XXXXXX") && trap 'rm -rf "$$tmp"' EXIT && \
	  echo "SPOOL_FAULTS_TABLE=$$tmp/faults-table.txt SPOOL_CONFORMANCE_TABLE=$$tmp/conformance-table.txt $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)" && \
	  { SPOOL_FAULTS_TABLE=$$tmp/faults-table.txt SPOOL_CONFORMANCE_TABLE=$$tmp/conformance-table.txt $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS); rc=$$?; \
	    for f in faults-table.txt conformance-table.txt; do if [ -f "$$tmp/$$f" ]; then cat "$$tmp/$$f"; fi; done; exit $$rc; }
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZ_SMOKE)

soak: ## The fault suite at soak size (SPOOL_SOAK=1: 5x the tasks and faults, durable fsync throughout)
	SPOOL_SOAK=1 $(GO) test -race -count=1 -timeout 90m -v -run . ./tests/faults

vet: ## go vet every module
	$(GO) vet $(PKGS)

lint: vet ## go vet plus a gofmt check
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt wants to rewrite:"; echo "$$out"; exit 1; fi

build: ## Build every binary into bin/
	@mkdir -p bin
	$(GO) build -o bin/ ./streams/cmd/... ./producer/cmd/... ./consumer/cmd/... ./tests/cmd/...

# The nats CLI, pinned in tools/go.mod (its own module, outside the workspace,
# so its dependencies never mix with Spool's). The end-to-end test in
# tests/natscli drives the dev stack with it.
tools: bin/nats ## Build the nats CLI v0.4.0 into bin/
bin/nats: tools/go.mod tools/go.sum
	@mkdir -p bin
	cd tools && GOWORK=off $(GO) build -o ../bin/nats github.com/nats-io/natscli/nats
	@touch $@

# The Node.js example's npm packages, pinned by its package-lock.json; the
# test in tests/nodeexample runs it (and examples/shell) against a real server.
# The BullMQ program of make bench's peers rows has its own, pinned the same
# way; a test in tests/cmd/spool-bench runs it.
BULLMQ_DIR := tests/cmd/spool-bench/bullmq
examples: examples/node/node_modules/.package-lock.json $(BULLMQ_DIR)/node_modules/.package-lock.json ## Install the npm packages of the Node.js example and of the bench's BullMQ program (npm ci)
examples/node/node_modules/.package-lock.json: examples/node/package.json examples/node/package-lock.json
	@command -v npm >/dev/null || { echo "npm is missing: run make deps"; exit 1; }
	cd examples/node && npm ci --no-audit --no-fund
	@touch $@
$(BULLMQ_DIR)/node_modules/.package-lock.json: $(BULLMQ_DIR)/package.json $(BULLMQ_DIR)/package-lock.json
	@command -v npm >/dev/null || { echo "npm is missing: run make deps"; exit 1; }
	cd $(BULLMQ_DIR) && npm ci --no-audit --no-fund
	@touch $@

# The version the modules require each other at (their go.mod files); the
# tag a release gets: shared/v0.1.0, streams/v0.1.0, producer/v0.1.0,
# consumer/v0.1.0.
RELEASE_VERSION ?= v0.1.0
release-check: ## Build an outside module importing producer and consumer from a local module proxy of this tree (no workspace)
	$(GO) run ./tests/cmd/spool-release-check -version $(RELEASE_VERSION)

bench: tools examples ## Spool beside raw JetStream (and asynq and BullMQ, if redis-server is on PATH) on one machine; writes BENCHMARKS.md (BENCH_QUICK=1: smoke run)
	@mkdir -p bin
	$(GO) build -o bin/spool-bench ./tests/cmd/spool-bench
	./bin/spool-bench -out=$(if $(BENCH_QUICK),,BENCHMARKS.md)

bench-go: ## Run the go test benchmarks once each
	$(GO) test -run '^$$' -bench . -benchtime 1x -benchmem $(PKGS)

FUZZTIME ?= 300000x
# package:target of every fuzz target.
FUZZ_TARGETS := ./shared:FuzzParseTaskSubject ./shared:FuzzValidateID ./shared:FuzzDecodeMeta \
	./producer/httpapi:FuzzDecodeTaskRequest ./producer/httpapi:FuzzDecodeBatchRequest \
	./consumer/internal/results:FuzzEncodeResult
fuzz: ## Fuzz every parser and request decoder for FUZZTIME each (default 300000 inputs; a duration such as 30s works too)
	@for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; f=$${t##*:}; echo "fuzzing $$f in $$pkg (-fuzztime $(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; done

clean: ## Remove built binaries, the dev store and the example's npm packages
	rm -rf bin .data examples/node/node_modules $(BULLMQ_DIR)/node_modules
