# sluice: the two commands a newcomer needs are `go run ./cmd/gateway` and `make test`.
GO       ?= go
BUF      := $(GO) tool -modfile=tools/go.mod buf
PKGS     := ./...

.PHONY: run test generate check-generated lint vet fmt-check buf-lint bench ci build

## run: start sluice on the embedded backend (./data), with a dev tenant and log sink
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

## lint: formatting, vet, buf lint and buf format
lint: fmt-check vet buf-lint

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

buf-lint:
	$(BUF) lint
	$(BUF) format --diff --exit-code

## bench: benchmarks that print figures (not part of `make test`)
bench:
	$(GO) test -run '^$$' -bench . -benchtime 3s ./queue/... ./router/...

## ci: what .ci/run runs on a fresh clone
ci: lint check-generated test
