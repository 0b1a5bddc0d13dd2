# The two commands of the quick start, plus developer conveniences.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-fast lint bootstrap kit

## demo: set everything up on embedded defaults and run the main job (SQLite, no broker server, vLLM on CPU;
## Debian's Prometheus for the canary's analysis rounds, installed when this runs as root)
demo: bootstrap
	scripts/install-prometheus.sh
	$(PY) manage.py demo

## test: run the whole test suite (real engine, worker and browser tests included)
test: bootstrap
	scripts/test.sh

## test-fast: the suite without the static checks and the slow real-engine, worker and browser tests,
## on every CPU (pytest-xdist; OPTGATE_TEST_WORKERS=0 for one process)
test-fast: bootstrap
	OPTGATE_STATIC_CHECKS=0 OPTGATE_TEST_SLOW=0 scripts/test.sh

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
