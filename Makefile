# kvfence: `make run` sets up and runs the stack; `make test` sets up and runs every check.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=

.PHONY: setup system-deps run test lint typecheck pytest docs docs-strict test-slow bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# Debian packages the test suite uses for real: PostgreSQL, Redis, headless Chromium.
system-deps:
	bash scripts/system-deps.sh

run: setup
	bash scripts/run-stack.sh $(HOST) $(PORT)

lint: setup
	$(VENV)/bin/ruff check src tests bench

# mypy's cache lives outside the checkout, so a fresh clone (CI runs in one) reuses what an earlier run on
# this machine learnt about torch and transformers: cold, mypy takes minutes; warm, half a minute. Each
# entry is checked against its file's content hash, so nothing stale is trusted.
MYPY_CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kvfence/mypy

# The engine-server seam (kvfence.engine.interface, the outputs it names, the server's engine thread) is
# held to mypy --strict: no Any there. Its own cache, so the two option sets do not invalidate each other.
STRICT_MODULES := src/kvfence/engine/interface.py src/kvfence/engine/core/outputs.py src/kvfence/server/async_engine.py

typecheck: setup
	MYPY_CACHE_DIR='$(MYPY_CACHE_DIR)' $(VENV)/bin/mypy
	MYPY_CACHE_DIR='$(MYPY_CACHE_DIR)-strict' $(VENV)/bin/mypy --strict --disallow-any-explicit --follow-imports=silent $(STRICT_MODULES)

# The test files are spread over PYTEST_WORKERS pytest-xdist processes, a whole file to one worker so that
# its module-scoped servers start once (ports are the OS's, temporary paths per worker, the shared
# ~/.cache/kvfence is written atomically). Two on CI's two cores: tests/server took 76 s against 106 s in one
# process, same run, load average 2.5. PYTEST_WORKERS=0 runs every test in this process.
PYTEST_WORKERS ?= 2

pytest: setup system-deps
	KVFENCE_REQUIRE_SERVICES=1 $(PY) -m pytest -m "not slow" -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The docs site (mkdocs-material, docs/ and mkdocs.yml) into site/; its reference pages are generated from the
# code (scripts/docs/hooks.py). `make test` builds it with --strict: a broken link or a page left out of the
# nav fails the run.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs

docs: setup
	$(MKDOCS) build

docs-strict: setup
	$(MKDOCS) build --strict --quiet

test: lint typecheck docs-strict pytest

test-slow: setup system-deps
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

bench: setup
	$(PY) bench/throughput.py
	$(PY) bench/serving.py
	$(PY) bench/gateway.py
	$(PY) bench/protection.py
	$(PY) bench/detector_quality.py
	$(PY) bench/gemv_ceiling.py
	$(PY) bench/disagg_handoff.py

clean:
	rm -rf $(VENV) site .mypy_cache .ruff_cache .pytest_cache .hypothesis
