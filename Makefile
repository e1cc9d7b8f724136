# Spool: run `make help` for the targets.
SHELL := /bin/bash
MODULES := shared streams producer consumer tests
GO ?= go
# Each module's packages, so `go test` works at a go.work root with no module of its own.
PKGS = $(foreach m,$(MODULES),./$(m)/...)
TEST_TIMEOUT ?= 15m

.PHONY: help run test vet lint build bench fuzz clean

help: ## Show this help
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

run: ## Run the dev stack: embedded JetStream on 127.0.0.1:4222, topology provisioned
	$(GO) run ./tests/cmd/spool-dev

test: vet ## Vet, then run every module's tests with the race detector
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

vet: ## go vet every module
	$(GO) vet $(PKGS)

lint: vet ## go vet plus a gofmt check
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt wants to rewrite:"; echo "$$out"; exit 1; fi

build: ## Build every binary into bin/
	@mkdir -p bin
	$(GO) build -o bin/ ./streams/cmd/... ./tests/cmd/...

bench: ## Run the benchmarks
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

fuzz: ## Fuzz the parsers for a while each (FUZZTIME, default 30s)
	$(GO) test -run '^$$' -fuzz FuzzParseTaskSubject -fuzztime $${FUZZTIME:-30s} ./shared

clean: ## Remove built binaries and the dev store
	rm -rf bin .data
