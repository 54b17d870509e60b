# Two entry points for people: `make demo` and `make test`. Everything they need is installed here.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench clean debian-packages

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "serving-doctor needs Python >= 3.11, found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $@

demo: $(STAMP)
	$(BIN)/doctor demo

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

# Debian's Prometheus and Alertmanager for the integration tests (apt as root or via sudo; fails loudly otherwise).
DEBIAN_PACKAGES := prometheus prometheus:promtool prometheus-alertmanager

debian-packages:
	@scripts/ensure-debian-packages.sh $(DEBIAN_PACKAGES)

unit: $(STAMP) debian-packages
	$(BIN)/pytest -q

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python bench/sim_calibration.py
	$(BIN)/python bench/sim_speed.py
	$(BIN)/python bench/collect_cost.py
	$(BIN)/python bench/log_scan.py
	$(BIN)/python bench/diagnose_startup.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
