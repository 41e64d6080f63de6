# Set up, run and test Market Analyst Agent. `make install && make demo` on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
MA := $(BIN)/market-analyst
PYTEST_WORKERS ?= 4

.PHONY: install demo test test-fast flaky lint bench eval-memory fuzz graph crash-soak up down clean

# The Redis Stack server the tests start needs Debian 11's libssl1.1 (see scripts/fetch-libssl.sh);
# without it the Redis tests need REDIS_URL, so a machine that cannot fetch it still installs.
install: $(VENV)/.installed
	@bash scripts/fetch-libssl.sh >/dev/null || echo "note: libssl1.1 not fetched; set REDIS_URL for the Redis tests" >&2
	@echo "Installed. Next: make demo"

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

demo:
	MA="$(MA)" bash scripts/demo.sh

# The tests live in four tiers, one folder each (see docs/development.md): `make test` runs them all,
# the longest first so that no long test starts last; `make test-fast` runs unit and conformance.
# pytest exits 5 when it collected no tests: that is a failure here, never a pass.
ALL_TIERS := tests/system tests/journeys tests/conformance tests/unit
FAST_TIERS := tests/unit tests/conformance

test:
	@$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup -q --durations=25 $(ALL_TIERS) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: no tests were collected" >&2; exit 1; fi; exit $$rc

test-fast:
	@$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup -q $(FAST_TIERS) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test-fast: no tests were collected" >&2; exit 1; fi; exit $$rc

# The flake census (scripts/flaky.py): the whole suite FLAKY_RUNS times in a row, each in a random order
# of its own, then a table of every test that failed in any run. FLAKY_ARGS adds options or picks
# tiers (FLAKY_ARGS=tests/unit); exits 1 when any test failed.
FLAKY_RUNS ?= 3

flaky:
	$(BIN)/python scripts/flaky.py --runs $(FLAKY_RUNS) --workers $(PYTEST_WORKERS) $(FLAKY_ARGS)

# ruff, mypy, and the import contracts in pyproject.toml (layers; adapters only through deps.py).
lint:
	$(BIN)/ruff check src tests graphs scripts
	$(BIN)/mypy
	$(BIN)/lint-imports

# Every section of scripts/bench.py at its real size (minutes). BENCH_ARGS picks sections and sizes:
# BENCH_ARGS=threads (one section), BENCH_ARGS='--n 20000' (every section at one size),
# BENCH_ARGS=--small (every section at its own small size, one timed process of each kind: a check
# that each runs, not a measurement), --check (exit 1 when a target is missed).
bench:
	$(BIN)/python scripts/bench.py $(BENCH_ARGS)

# Recall on the labelled set in eval/memory/ through the real memory store, per mode; fails when the
# figures miss their targets (see docs/memory.md, "Memory recall, measured"). EVAL_ARGS=--json for JSON.
eval-memory:
	$(BIN)/python scripts/eval_memory.py $(EVAL_ARGS)

FUZZ_EXAMPLES ?= 400

# The command line under generated input (tests/system/test_fuzz.py), with many more examples than the suite.
fuzz:
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest -q -p no:cacheprovider tests/system/test_fuzz.py -k generated

CRASH_REPORT ?= $(CURDIR)/.cache/crash-report.jsonl
CRASH_RANDOM_KILLS ?= 500

# The crash matrix alone with more seeded random kills (CRASH_RANDOM_KILLS, default 500), then a
# table of what each durability mode lost in this run.
crash-soak:
	@mkdir -p .cache && rm -f $(CRASH_REPORT)
	CRASH_RANDOM_KILLS=$(CRASH_RANDOM_KILLS) CRASH_REPORT_FILE=$(CRASH_REPORT) \
	  $(BIN)/pytest -n $(PYTEST_WORKERS) -q tests/system/test_crash_recovery.py $(PYTEST_ARGS)
	@$(BIN)/python -m tests.support.crash_matrix summarize $(CRASH_REPORT)

graph:
	$(BIN)/python -c "from market_analyst.graph import mermaid; print(mermaid(), end='')" > graphs/analyst.mmd

up:
	docker compose up -d

down:
	docker compose down

# Stops the embedded PostgreSQL of the default data directory (MA_DATA_DIR, ./.market-analyst) first:
# its binary lives in the venv removed here. Nothing running, or no venv, is fine. Data stays.
clean:
	@if [ -x "$(MA)" ]; then "$(MA)" db stop || echo "make clean: could not stop the embedded PostgreSQL" >&2; fi
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache .mypy_cache
