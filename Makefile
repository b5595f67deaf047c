# sluice: `make run` serves descriptors/ in memory; `make test` is what CI runs.
CARGO ?= cargo
# Tests start real servers; keep parallelism sane on small machines.
TEST_THREADS ?= 4

.PHONY: run build test lint deps bench clean

run:
	$(CARGO) run --release -- serve --config descriptors

build:
	$(CARGO) build --release

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings

# What the tests start for real: redis-server and redis-cli (Debian's
# package), and openssl for the TLS test's certificate.
deps:
	@command -v redis-server >/dev/null && command -v redis-cli >/dev/null && command -v openssl >/dev/null || { \
	  echo "installing redis-server and openssl (apt)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y -q redis-server openssl >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -q >/dev/null && $$SUDO apt-get install -y -q redis-server openssl >/dev/null; }; }
	@redis-server --version

test: lint deps
	$(CARGO) test --lib --bins --tests -- --test-threads=$(TEST_THREADS)

# Throughput and latency, memory against Redis (starts its own redis-server).
bench: deps
	$(CARGO) bench --bench load

clean:
	$(CARGO) clean
