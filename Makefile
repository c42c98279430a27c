# Every target sets up its own virtual environment first: a fresh clone needs only Python 3.11 and make.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench setup clean

$(STAMP): pyproject.toml .ci/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(PY) -m pip install -e '.[dev]' -c .ci/constraints.txt
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PY) -m interdist.demo

# tests/ and the doctests of the package (pyproject.toml: testpaths, --doctest-modules)
test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests interdist

# make test with two busy processes beside it (.ci/loaded; docs/reliability.md "A loaded machine").
.PHONY: test-loaded
test-loaded: $(STAMP)
	.ci/loaded

# The documentation site (docs/conf.py) into docs/_build/html, warnings as errors, the lessons executed;
# the docs extra goes into the same .venv (a stamp of its own, so make test stays lean); .ci/run runs it.
DOCS_STAMP := $(VENV)/.installed-docs
.PHONY: docs
$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install -e '.[docs]' -c .ci/constraints.txt
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs docs/_build/html

# The package's lint, format and strict typing, as configured in pyproject.toml; .ci/run runs it.
lint: $(STAMP)
	$(VENV)/bin/ruff check interdist
	$(VENV)/bin/ruff format --check interdist
	$(VENV)/bin/mypy interdist

bench: $(STAMP)
	cd benchmarks && ../$(PY) bench_run.py
	cd benchmarks && ../$(PY) bench_all_reduce.py
	cd benchmarks && ../$(PY) bench_collective_paths.py
	cd benchmarks && ../$(PY) bench_input.py
	cd benchmarks && ../$(PY) bench_optimizer.py
	cd benchmarks && ../$(PY) bench_training.py  # ratios against TF when INTERDIST_TF_SITE names a TF install
	cd benchmarks && ../$(PY) bench_cnn.py  # the tutorial CNN's step against TF and one NumPy process (issue 24)
	cd benchmarks && ../$(PY) bench_latency.py
	cd benchmarks && ../$(PY) bench_cost_model.py
	cd benchmarks && ../$(PY) bench_central_storage.py
	cd benchmarks && ../$(PY) bench_ps.py
	cd benchmarks && ../$(PY) bench_ps_start.py  # against TF with INTERDIST_TF_PYTHON or INTERDIST_TF_SITE (issue 26)
	cd benchmarks && ../$(PY) bench_dashboard.py
	cd benchmarks && ../$(PY) bench_dashboard_lag.py
	cd benchmarks && ../$(PY) bench_soak.py
	cd benchmarks && ../$(PY) bench_gpu_allreduce.py  # says "skipped" and exits 0 without CuPy and a GPU

clean:
	rm -rf $(VENV) build dist *.egg-info

# The committed JupyterLab bundle (interdist/labextension/) against extension/: rebuilt from the
# lockfile (npm ci) in a temporary copy, it must come out byte for byte the same. Needs Node >= 20.
.PHONY: check-extension
check-extension: $(STAMP)
	extension/check_bundle.sh

# The oldest supported Dask, distributed, Bokeh, NumPy and JupyterLab (pyproject.toml's floors, read from
# it), installed alone in build/floors-venv, and a smoke set of tests on them (.ci/floors; docs/compatibility.md).
.PHONY: test-floors
test-floors:
	.ci/floors
