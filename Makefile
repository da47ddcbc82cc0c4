# mfukit: `make run` runs the main job on the shipped example, `make test` runs everything CI runs.
# Both create .venv on first use and reinstall when pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint typecheck unit bench docs readme clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed-base: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,torch]'
	touch $@ $(VENV)/.installed-base

run: $(VENV)/.installed-base
	$(BIN)/mfukit plan examples/llama3-70b_h100x1024.toml --report out/
	@echo "the plan report is in out/report.html"

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy src

unit: $(VENV)/.installed-dev
	$(BIN)/pytest -q

test: lint typecheck unit

bench: $(VENV)/.installed-dev
	@set -e; for script in benchmarks/*.py; do \
		echo "== $$script"; $(BIN)/python $$script; \
	done

# Regenerates the CLI reference in docs/cli.md from --help and the scenario reference in docs/scenario.md
# from the schema (tests check both are current).
docs: $(VENV)/.installed-base
	$(BIN)/python -m mfukit.cli.reference > docs/cli.md
	$(BIN)/python -m mfukit.cli.scenario_reference > docs/scenario.md

# Reruns the example commands of README.md and docs/*.md and rewrites their outputs (a test checks they
# are current).
readme: $(VENV)/.installed-base
	$(BIN)/python scripts/readme.py

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
