# odestudy: `make all` reruns the study, `make test` checks it. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SCALE ?= quick

.PHONY: all setup test lint matrix explain report seed gpu lab clean

all: matrix report

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check odestudy tests notebooks benchmarks
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check odestudy tests notebooks benchmarks

# The quick matrix on this machine's CPU (and GPU rows where GPUs exist); resumable.
matrix: $(STAMP)
	$(BIN)/odestudy matrix --scale $(SCALE) --device auto

report: $(STAMP)
	$(BIN)/odestudy report --scale $(SCALE) $(if $(filter quick,$(SCALE)),--readme README.md)

# The studies that explain the scaling (lock-step waste, grouping, within-ODE batching,
# batch size and time to target): about 12 minutes on 2 cores; then `make report`.
explain: $(STAMP)
	$(BIN)/odestudy matrix --scale $(SCALE) --study explain --device cpu

# The reference study's configuration (2048 series, batch 32, 3 x 1000 steps): hours.
seed: $(STAMP)
	$(BIN)/odestudy matrix --scale seed --device auto
	$(BIN)/odestudy report --scale seed

# Only the GPU rows (run on a machine with GPUs; install with `pip install -e .[cuda]`).
gpu: $(STAMP)
	$(BIN)/odestudy matrix --scale $(SCALE) --device gpu
	$(BIN)/odestudy report --scale $(SCALE)

lab: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[dev,lab]"
	$(BIN)/jupyter lab notebooks/

clean:
	rm -rf $(VENV) results/smoke results/test .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
