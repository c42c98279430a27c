# Every target sets up its own virtual environment first: a fresh clone needs only Python 3.11 and make.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench setup clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(PY) -m pip install -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PY) -m interdist.demo

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests

bench: $(STAMP)
	cd benchmarks && ../$(PY) bench_run.py
	cd benchmarks && ../$(PY) bench_all_reduce.py
	cd benchmarks && ../$(PY) bench_input.py
	cd benchmarks && ../$(PY) bench_optimizer.py
	cd benchmarks && ../$(PY) bench_ps.py

clean:
	rm -rf $(VENV) build dist *.egg-info
