# The front door. `make demo` and `make test` are all a fresh clone needs; each installs what it uses.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# `make dist` builds in a venv of its own holding only `build` (which builds in an isolated environment).
BUILD_VENV  := .venv-build
BUILD_STAMP := $(BUILD_VENV)/.installed
# What `make test-s2` runs against another S2: SDK conformance, format("s2") reads, S2Writer end to end.
S2_TESTS := tests/lite/test_sdk_records.py tests/lite/test_sessions.py tests/lite/test_records_semantics.py \
	tests/integration/test_datasource_read.py tests/integration/test_writer_spark.py

.DEFAULT_GOAL := help
.PHONY: help venv demo test test-fast test-slow test-faults test-compat test-cluster test-s2 lint typecheck fmt bench bench-quick soak sim dist lite clean

help:  ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)  ## create or refresh .venv with the package and its dev tools

demo: $(STAMP)  ## run the main job: a streaming query into the embedded lite server, read back
	$(PY) -m s2_sink.demo

test: $(STAMP)  ## the suite: unit, simulation, docs, lite conformance, Spark integration, CLI (about 10 min)
	$(PY) -m pytest --durations=15 -m "not slow" --ignore=tests/faults --ignore=tests/cluster tests

test-slow: $(STAMP)  ## end to end: the notebooks, Spark Connect servers, the installed wheel, the quick bench
	$(PY) -m pytest --durations=10 -m slow --ignore=tests/faults --ignore=tests/cluster tests

test-faults: $(STAMP)  ## exactly-once under killed executors, drivers and servers and server faults, about 10 min
	$(PY) -m pytest --durations=10 tests/faults

test-fast: $(STAMP)  ## unit, lite-server and CLI tests on four processes: no Spark, scale or waits tests; fewer property examples
	PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/$(VENV)/pycache $(PY) -m pytest -n 4 --hypothesis-profile=fast -m "not spark and not connect and not slow and not scale and not waits" tests/unit tests/lite tests/cli

test-compat:  ## install into fresh venvs per pyspark x Python (3.5/3.11 .. 4.3/3.13) and per Databricks runtime, smoke each
	$(PYTHON) tests/compat/matrix.py

test-cluster: $(STAMP)  ## faults on a local Spark standalone cluster (master + 2 workers), about 10 min
	S2SINK_CLUSTER=1 $(PY) -m pytest -m cluster -rA tests/cluster

test-s2:  ## SDK conformance, reads, writes against the S2 that S2_SINK_TEST_BASIN_PREFIX, S2_ACCESS_TOKEN name
	@if [ -z "$${S2_SINK_TEST_BASIN_PREFIX:-}" ] || [ -z "$${S2_ACCESS_TOKEN:-}" ]; then \
	  echo "test-s2: skipped: set S2_SINK_TEST_BASIN_PREFIX and S2_ACCESS_TOKEN (and S2_ACCOUNT_ENDPOINT, S2_BASIN_ENDPOINT for an S2 other than the cloud; CONTRIBUTING.md)"; \
	else \
	  $(MAKE) --no-print-directory venv && $(PY) -m pytest -rs -m "not connect" $(S2_TESTS); \
	fi

lint: $(STAMP)  ## ruff
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check s2_sink tests

fmt: $(STAMP)  ## format with ruff
	$(VENV)/bin/ruff format s2_sink tests benchmarks
	$(VENV)/bin/ruff check --fix .

typecheck: $(STAMP)  ## mypy, strict on s2_sink/
	$(VENV)/bin/mypy

bench: $(STAMP)  ## the benchmark harness: side-by-side ratios, results.json and a chart
	$(PY) -m benchmarks.run

bench-quick: $(STAMP)  ## the harness in quick mode: every section on small sizes (~160 CPU-seconds)
	$(PY) -m benchmarks.run --quick

soak: $(STAMP)  ## exactly-once soak: random faults over >= 50 micro-batches
	$(PY) -m tests.faults.soak

sim: $(STAMP)  ## exactly-once deterministic simulation: 100,000 default schedules, 10,000 of each other profile (replay one: python -m tests.sim --seed N --profile P)
	@if [ -n "$${SIM_PROFILE:-}" ]; then \
	  $(PY) -m tests.sim --seed $${SIM_SEED:-0} --count $${SIM_COUNT:-100000} --profile $$SIM_PROFILE; \
	else \
	  $(PY) -m tests.sim --seed $${SIM_SEED:-0} --count $${SIM_COUNT:-100000} --profile default && \
	  for p in stage-retries upsert-order task-zombies stage-zombies renamed cleared-fence zombie-takeover retry-readback recreated several-writers shared-writer foreign-writer ledger-reset changed two-drivers named-writers unreadable-run-id many-streams; do \
	    $(PY) -m tests.sim --seed $${SIM_SEED:-0} --count $${SIM_PROFILE_COUNT:-10000} --profile $$p || exit 1; \
	  done; \
	fi

$(BUILD_STAMP):
	@test -x $(BUILD_VENV)/bin/python || $(PYTHON) -m venv $(BUILD_VENV)
	$(BUILD_VENV)/bin/python -m pip install --quiet --upgrade pip build
	@touch $(BUILD_STAMP)

dist: $(BUILD_STAMP)  ## build the wheel and sdist into dist/ (in a small build venv, not the dev set)
	$(BUILD_VENV)/bin/python -m build --outdir dist .

lite: $(STAMP)  ## run the lite server on port 8080 in the foreground (extra flags: LITE_ARGS=--throttle)
	$(PY) -m s2_sink.lite --port 8080 $(LITE_ARGS)

clean:  ## remove build outputs and the venv
	rm -rf $(VENV) $(BUILD_VENV) dist build *.egg-info .pytest_cache .mypy_cache .ruff_cache
