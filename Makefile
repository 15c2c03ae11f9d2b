# gpupack: the same commands for developers and CI.
#   make run    the embedded demo (creates the venv on first use)
#   make test   installs what the tests need, then lint, type checks and tests
#   make bench  the benchmarks in bench/ (not part of test)
#   make docs   the documentation site into site/ (mkdocs build --strict; part of test)
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
APT_GET := $(shell command -v apt-get 2>/dev/null)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test lint typecheck unit docs reference system-deps kube-tools bench-deps bench bench-webhook bench-stages bench-hostile bench-extender bench-simulator bench-report bench-cluster monitoring manifests clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The demo prints a report, so it needs the report extra (the core alone is what the services need).
$(VENV)/.run-deps: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[report]'
	touch $@

# test: every extra and the test libraries; dev: the linters and mypy.
$(VENV)/.test-deps: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,dev]'
	touch $@ $(VENV)/.run-deps

run: $(VENV)/.run-deps
	$(BIN)/gpupack demo --prices examples/prices.yaml

# Debian packages, as command:package (the package when it differs): the tests need prometheus, chromium (the
# report page, headless) and etcd (the control plane); the benchmarks also need kubectl and wrk.
define apt_install
	@missing=""; for pair in $(1); do tool=$${pair%%:*}; package=$${pair#*:}; \
	  command -v $$tool >/dev/null || missing="$$missing $$package"; done; \
	if [ -n "$$missing" ]; then \
	  if [ -z "$(APT_GET)" ]; then echo "please install:$$missing" >&2; exit 1; fi; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
endef

system-deps:
	$(call apt_install,prometheus chromium etcd:etcd-server etcdctl:etcd-client)

# kube-apiserver, kube-scheduler, kubectl and helm, and for the living cluster kube-controller-manager, kwok and
# Karpenter's KWOK provider, built from the Go modules pinned in tools/ into a cache outside the work tree
# (tools/build; the first build takes about 7 minutes on two cores, and up to 15 more for the living cluster's
# tools; later ones reuse it). Karpenter builds with the Go toolchain its go.mod asks for, from the module proxy;
# a tool that does not build stops make test.
kube-tools:
	@command -v go >/dev/null || { echo "make test needs Go 1.26 to build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, helm, kwok and Karpenter (tools/build)" >&2; exit 1; }
	@tools/build >/dev/null

bench-deps:
	$(call apt_install,kubectl wrk)

lint: $(VENV)/.test-deps
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(VENV)/.test-deps
	$(BIN)/mypy
	$(BIN)/mypy charts/generate.py

# Three workers on two cores, a test file each at a time (module fixtures such as a control plane stay in one
# worker): the real-control-plane tests spend much of their time waiting on processes (the Karpenter story
# waits minutes for its Jobs), and a third worker fills those waits. Measured warm on two cores: pytest 11 min
# 16 s with two workers, 8 min 50 s with three (2026-12-04).
PYTEST_WORKERS ?= 3
unit: $(VENV)/.test-deps system-deps kube-tools
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile

# The site (mkdocs.yml, docs/): strict, so a broken link, a missing anchor or a page left out of the navigation
# fails. `make reference` writes docs/reference/ from the code (a test fails when it is stale).
docs: $(VENV)/.test-deps
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict  # (not --quiet: it hides the warnings --strict counts)

reference: $(VENV)/.test-deps
	$(BIN)/python -m gpupack.reference

test: lint typecheck docs unit

bench: bench-stages bench-webhook bench-hostile bench-extender bench-simulator bench-report

bench-webhook: $(VENV)/.test-deps bench-deps
	$(BIN)/python -m bench.webhook

bench-stages: $(VENV)/.test-deps
	$(BIN)/python -m bench.webhook.stages

bench-hostile: $(VENV)/.test-deps
	ulimit -n 8192 && $(BIN)/python -m bench.webhook.hostile

bench-extender: $(VENV)/.test-deps bench-deps
	$(BIN)/python -m bench.extender

bench-simulator: $(VENV)/.test-deps
	$(BIN)/python -m bench.simulator --cpu 0

monitoring: $(VENV)/.test-deps
	$(BIN)/python -m gpupack.monitoring

bench-report: $(VENV)/.test-deps system-deps
	$(BIN)/python -m bench.report --data /var/tmp/gpupack-bench-report

# The same workday on the living cluster (Karpenter, kwok) in three arms, about 12 minutes each; not part of
# `make bench`. BENCH_CLUSTER_ARGS=--compare-consolidation also runs gpupack under Karpenter's other policies.
bench-cluster: $(VENV)/.test-deps system-deps kube-tools
	$(BIN)/python -m bench.cluster $(BENCH_CLUSTER_ARGS)

clean:
	rm -rf $(VENV) .run site .mypy_cache .ruff_cache .pytest_cache .hypothesis .import_linter_cache

# The chart (charts/gpupack) is the source of the kustomize base: this renders manifests/ from it, with the chart's
# version and its values.schema.json (charts/generate.py; a test fails when they are stale). It runs helm, the
# pinned one tools/build builds.
manifests: monitoring kube-tools
	PATH="$$(dirname "$$(tools/build | sed -n 's/^helm=//p')"):$$PATH" $(BIN)/python charts/generate.py
