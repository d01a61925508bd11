# Two commands on a fresh machine: `make quickstart` and `make test`. Each sets itself up.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python

.PHONY: install test test-slow quickstart lint

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU build of torch first, so no dependency range pulls CUDA wheels.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	# DeepSpeed, for its ZeRO tests on the CPU (make test-slow): built against that torch, ops compiled when used.
	DS_BUILD_OPS=0 $(PY) -m pip install -q --no-build-isolation deepspeed==0.19.8
	touch $@

install: $(VENV)/.installed

test: install
	$(PY) -m pytest; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

test-slow: install
	$(PY) -m pytest -m slow

lint: install
	$(PY) -m ruff check src tests benchmarks recipes

quickstart: install
	$(VENV)/bin/retromae quickstart --overwrite  # a fresh run each time, replacing runs/quickstart
