# sluice: `make run` serves descriptors/ in memory; `make test` is what CI runs.
CARGO ?= cargo
# Tests start real servers; keep parallelism sane on small machines.
TEST_THREADS ?= 4

.PHONY: run build test lint unit bench clean

run:
	$(CARGO) run --release -- serve --config descriptors

build:
	$(CARGO) build --release

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings

test: lint
	$(CARGO) test --all-targets -- --test-threads=$(TEST_THREADS)

clean:
	$(CARGO) clean
