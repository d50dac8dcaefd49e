# graphbatch: two commands work on a fresh machine.
#   make demo   - set up a virtual environment and run the main job on the embedded dataset
#                 (the report: out/report.html; out/ is ignored by git)
#   make test   - set up a virtual environment with every extra and run the test suite
#   make test-fairchem - fairchem's preset against fairchem itself, in its own environment
#   make docs   - the documentation site in docs/_build/html (warnings are errors)
#   make wheel-smoke - build the sdist and wheel, install the wheel in a fresh venv, run it
#   make lint   - ruff check (src, tests) and mypy (src), as configured in pyproject.toml
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install --quiet --disable-pip-version-check

.PHONY: demo test test-fairchem docs wheel-smoke lint setup-core setup-all bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip

# Core + plotting + the QM9 data package: what the demo needs.
$(VENV)/.core: pyproject.toml | $(VENV)/bin/python
	$(PIP) -e ".[bench]"
	$(PIP) --no-deps qm9pack==1.0.3
	touch $@

# Everything: torch (exact CPU pin, installed first, so nothing else downloads torch), PyG,
# JAX, data, test tools and MACE (the atomistic extra). The extras state ranges that admit the
# pin (tests/core/test_packaging.py), so `-e ".[all]"` keeps it: checked after the install.
$(VENV)/.all: pyproject.toml | $(VENV)/bin/python
	$(PIP) torch==2.13.0
	$(PIP) -e ".[all]"
	$(PY) -m pip freeze | grep -q '^torch==2.13.0' || { echo "make: the extras replaced torch==2.13.0" >&2; exit 1; }
	$(PIP) --no-deps qm9pack==1.0.3 molsets==0.3.1
	touch $(VENV)/.core $@

setup-core: $(VENV)/.core
setup-all: $(VENV)/.all

demo: setup-core
	mkdir -p out
	$(PY) -m graphbatch.cli demo --out out/report.html

# Two pytest-xdist workers (CI has 2 cores): the suite is mostly subprocesses and single-threaded
# Python, so two at once take about half as long. Each worker, and every process its tests start,
# gets its share of the cores for torch's and NumPy's thread pools (tests/_threads.py: one thread
# each here, where two spinning per process took ~4x the CPU time). `make test PYTEST_WORKERS=0`
# runs it in one process; PYTEST_ARGS adds options (e.g. PYTEST_ARGS="tests/torch -x").
PYTEST_WORKERS ?= 2
test: setup-all
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

# fairchem-core needs e3nn 0.6 and mace-torch e3nn 0.4, so fairchem gets its own environment:
# torch (exact CPU pin) first, then fairchem-core and the test tools (h5py, vesin and
# torch-geometric: the atomistic store path), then this package without its dependencies (numpy, scipy and ase come
# with fairchem).
FCVENV ?= .venv-fairchem
FCPY   := $(FCVENV)/bin/python
FCPIP  := $(FCPY) -m pip install --quiet --disable-pip-version-check

$(FCVENV)/.fairchem: pyproject.toml
	$(PYTHON) -m venv $(FCVENV)
	$(FCPIP) --upgrade pip
	$(FCPIP) torch==2.13.0
	$(FCPIP) fairchem-core==2.24.0 pytest hypothesis h5py vesin torch-geometric
	$(FCPIP) --no-deps -e .
	touch $@

test-fairchem: $(FCVENV)/.fairchem
	$(FCPY) -m pytest -q tests/fairchem

# Sphinx + MyST + autodoc (imports every adapter, so the whole environment), from scratch each
# time; then every name of every public __all__ must be in the built site's object inventory.
docs: setup-all
	rm -rf docs/_build docs/api
	$(PY) -m sphinx -W --keep-going -q -E -b html docs docs/_build/html
	$(PY) docs/_ext/check_inventory.py docs/_build/html/objects.inv

wheel-smoke: setup-all
	bash .ci/wheel_smoke.sh $(PY)

# Lint and type check (the `lint` extra, pinned, comes with setup-all): the rule set and the
# strictness are in pyproject.toml ([tool.ruff.lint], [tool.mypy]). Both always run; the target
# fails if either finds anything.
lint: setup-all
	$(PY) -m ruff check src tests; ruff=$$?; $(PY) -m ruff format --check src tests; \
	fmt=$$?; $(PY) -m mypy; mypy=$$?; test $$ruff -eq 0 -a $$fmt -eq 0 -a $$mypy -eq 0

bench: setup-all
	$(PY) -m benchmarks.planning.plan_speed

clean:
	rm -rf $(VENV) $(FCVENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache docs/_build docs/api
