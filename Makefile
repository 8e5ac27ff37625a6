# The two README commands: `make run` (the main job) and `make test` (the test suite).
# Both create .venv and install what they need on first use, and are no-ops to set up afterwards.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Use the read-only dataset mirror beside the checkout when there is one (offline machines, CI).
SHARED_DATASETS := $(abspath ../shared/datasets)
export CALIBFLOW_DATA_MIRROR ?= $(if $(wildcard $(SHARED_DATASETS)),$(SHARED_DATASETS),)
export DVC_NO_ANALYTICS := 1
export GX_ANALYTICS_ENABLED := false
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export PYTHONHASHSEED := 0

.PHONY: run test test-fast lint bench repro clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip "setuptools>=68" wheel

# Re-install only when pyproject.toml changes.
$(VENV)/.run-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $@ $(VENV)/.run-installed

run: $(VENV)/.run-installed
	$(BIN)/calibflow run

# Tests keep their bytecode (__pycache__, git-ignored) even where PYTHONDONTWRITEBYTECODE is set: each xdist
# worker and each `calibflow` process the tests start otherwise compiles every module again (the rewritten
# test modules alone: ~4 s of CPU per worker).
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

# Whole files per worker, in the collection order (longest first: tests/conftest.py's MODULE_SECONDS);
# xdist's default reorder (by test count) would start the long one-test pipeline files last.
test: $(VENV)/.dev-installed
	# One BLAS thread per xdist worker: two workers on two cores, no oversubscription.
	$(TEST_ENV) $(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -q

# The library alone, without the minutes-long experiment and pipeline tests: the edit-test loop.
test-fast: $(VENV)/.dev-installed
	$(TEST_ENV) $(BIN)/python -m pytest -n 2 --dist loadfile -q tests/library -m "not slow"

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check calibflow tests benchmarks

bench: $(VENV)/.dev-installed
	$(BIN)/python -m benchmarks

# `calibflow repro`: params.yaml checked first, then `dvc repro` with the venv's interpreter first on PATH
# and every stage command run as an argument list, never through a shell (docs/reliability.md).
repro: $(VENV)/.run-installed
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/calibflow repro

clean-venv:
	rm -rf $(VENV)
