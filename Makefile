# The two commands of the quick start, plus developer conveniences.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-fast lint bootstrap kit

## demo: set everything up on embedded defaults and run the main job (SQLite, no broker server, vLLM on CPU)
demo: bootstrap
	$(PY) manage.py demo

## test: run the whole test suite (real engine, worker and browser tests included)
test: bootstrap
	scripts/test.sh

## test-fast: the suite without the slow real-engine, worker and browser tests
test-fast: bootstrap
	$(PY) -m pytest -m "not engine and not worker and not browser"

## kit: retrain the tiny model kit from scratch and say whether it matches the shipped one (kit/)
kit: bootstrap
	$(PY) -m tools.kit --rebuild

lint: bootstrap
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .
	$(VENV)/bin/lint-imports

bootstrap:
	scripts/bootstrap.sh
