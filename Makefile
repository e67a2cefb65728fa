# sluice: the two commands a newcomer needs are `go run ./cmd/gateway` and `make test`.
GO       ?= go
BUF      := $(GO) tool -modfile=tools/go.mod buf
# golangci-lint v2 from tools/go.mod; config in .golangci.yaml (first run
# builds it: a few minutes).
GOLANGCI := $(GO) tool -modfile=$(CURDIR)/tools/go.mod golangci-lint
PKGS     := ./...

.PHONY: run test generate check-generated lint vet fmt-check fmt golangci buf-lint buf-breaking bench bench-long bench-micro ci build

## run: start sluice on the embedded backend (./data), with a dev tenant; jobs wait for pull workers (sluicectl worker)
run:
	$(GO) run ./cmd/gateway

## test: the whole test suite, with the race detector
test:
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

## build: compile every binary into ./bin
build:
	$(GO) build -o bin/ ./cmd/...

## generate: rebuild gen/ from proto/ with buf (first run builds buf: ~3.5 min)
generate:
	$(BUF) generate

## check-generated: fail if gen/ differs from what `make generate` produces
check-generated: generate
	@git add -N gen >/dev/null 2>&1 || true
	@git diff --exit-code --stat -- gen || { echo "gen/ is stale: run 'make generate' and commit"; exit 1; }

## lint: formatting, vet, golangci-lint, buf lint and buf format
lint: fmt-check vet golangci buf-lint

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)
	cd terraform/test/schemaprovider && $(GO) vet ./...

## golangci: golangci-lint with .golangci.yaml, on both modules
golangci:
	$(GOLANGCI) run $(PKGS)
	cd terraform/test/schemaprovider && $(GOLANGCI) run ./...

## fmt: rewrite the Go files as golangci-lint's formatters (gofumpt) want
fmt:
	$(GOLANGCI) fmt $(PKGS)
	cd terraform/test/schemaprovider && $(GOLANGCI) fmt ./...

buf-lint:
	$(BUF) lint
	$(BUF) format --diff --exit-code

## buf-breaking: fail if proto/ breaks wire or generated-code compatibility
## with main (on main itself: with the previous commit). Override with
## BREAKING_AGAINST='.git#tag=v1.2.0' to check against a release.
BREAKING_AGAINST ?=
buf-breaking:
	@against='$(BREAKING_AGAINST)'; \
	if [ -z "$$against" ]; then \
		if [ "$$(git rev-parse --abbrev-ref HEAD)" = main ]; then against='.git#ref=HEAD~1'; else against='.git#branch=main'; fi; \
	fi; \
	ref=$${against#*ref=}; ref=$${ref#*branch=}; \
	if ! git rev-parse -q --verify "$$ref^{commit}" >/dev/null; then \
		echo "buf breaking: $$ref is not in this clone (shallow?); nothing to compare with"; exit 0; \
	fi; \
	echo "buf breaking --against $$against"; \
	$(BUF) breaking --against "$$against"

## bench: the scenario harness against the real binaries (about 20 min on 2 cores); writes docs/benchmarks.md and docs/bench/
bench:
	$(GO) run ./bench/cmd/sluice-bench

## bench-long: the same, longer and bigger (about 30 min)
bench-long:
	$(GO) run ./bench/cmd/sluice-bench -long

## bench-micro: the packages' Go micro-benchmarks only
bench-micro:
	$(GO) test -run '^$$' -bench . -benchtime 3s ./queue/... ./router/...

## ci: what .ci/run runs on a fresh clone
ci: lint buf-breaking check-generated test

.PHONY: reliability
## reliability: crash, backend-fault, disk, overload and fuzz runs against the
## real binaries (under 15 min on 2 cores); rewrites docs/reliability.md.
## LONG=1 runs the long version (about an hour).
reliability:
	$(GO) run ./reliability/cmd/sluice-reliability $(if $(LONG),-long) -out docs/reliability.md
