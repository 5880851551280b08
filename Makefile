# odestudy: `make all` reruns the study, `make test` checks it. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The study needs the package; the checks (pytest, ruff) and JupyterLab come on top.
DEV_STAMP := $(VENV)/.installed-dev
SCALE ?= quick

.PHONY: predict-rows steps versions rising-cost own-loop own-predict own-again own-rows neighbours all full map crossover map-levers map-vectors map-fused nodes setup test test-long lint style types matrix matrix-full explain report seed gpu gpu-wheels gpu-offline lab clean

# The report is written even when a scenario failed (the failure is a row of it);
# the exit status is then the matrix's.
all: $(STAMP)
	@$(BIN)/odestudy matrix --scale $(SCALE) --device auto; status=$$?; \
		$(MAKE) --no-print-directory report && exit $$status

# Every measured multi-device row's prediction from its 1-device row and this machine's
# `cpu` profile (`predict --rows --profile cpu`, resumable), then the report, which checks
# them (figures/tables/prediction.md). A prediction made before the rows it is checked
# against (a later session's `make all`) is held out. Kept out of `make all`, which it
# would push over its 15-minute budget here (each row compiles and times its own sweep).
predict-rows: $(STAMP)
	$(BIN)/odestudy predict --rows --profile cpu --scale $(SCALE)
	$(MAKE) --no-print-directory report

# The whole matrix: 1/2/4/8 CPU devices (rows with more devices than physical cores
# measure overhead, not speedup), then the report.
full: $(STAMP)
	@$(BIN)/odestudy matrix --scale $(SCALE) --device auto --full; status=$$?; \
		$(MAKE) --no-print-directory report && exit $$status

# What a device pays for its neighbours (benchmarks/neighbours.py): the 1-device step
# alone, as N programs dispatched at once (predict's term), as N copies inside one pmap
# program, and each mode's real step, on the trained oscillator and latent ODE, 2 devices.
neighbours: $(STAMP)
	$(BIN)/python benchmarks/neighbours.py --devices 2 --batches 4,16,64
	$(BIN)/python benchmarks/neighbours.py --devices 2 --batches 4,16,64 --step recommended
	$(BIN)/python benchmarks/neighbours.py --devices 2 --batches 8,16,32 --step recommended --problem latent_ode

# The workload map: the oscillator at field widths 16, 64 and 256, a bank of 8
# oscillators (state 16), a latent ODE and a controlled ODE, 1 and 2 CPU devices in every
# mode, both controllers, the default and the recommended step, 3 interleaved runs
# (records under results/map/); then each workload's prediction of the recommended step
# (`odestudy predict --map`) from its trained 1-device row, with the 2 devices probed and
# from the `cpu` profile without them (on the batch axis's workloads, along its
# per-device batches: made before `make crossover` measures them), and the report
# (figures/tables/workloads.md). Resumable.
map: $(STAMP)
	$(BIN)/odestudy matrix --scale quick --study map --device cpu
	$(BIN)/odestudy predict --map --devices 2
	$(BIN)/odestudy predict --map --devices 2 --profile cpu
	$(MAKE) --no-print-directory report

# When splitting the batch pays: the map's per-device batch axis (`odestudy/builtin/crossover.py`:
# 4 to 128 series per device on its lightest and heaviest workload, the recommended step
# on 1 device and on 2 in every mode, both controllers, 3 interleaved runs; records beside
# the map's), then the report (figures/tables/crossover.md). Resumable.
crossover: $(STAMP)
	$(BIN)/odestudy matrix --scale quick --study crossover --device cpu
	$(MAKE) --no-print-directory report

# Tsit5 without its stage loop (`StraightTsit5`, `stages=unrolled`) as a lever along the
# map: per workload and controller, the default and the recommended step run by
# diffrax's loop, each without and with it, trained and timed in interleaved blocks (`benchmarks/levers.py --map`;
# records under results/map/<machine>/levers/, one kept where it stands for the run:
# the same variants, machine, versions and protocol); then the report (its section of
# figures/tables/workloads.md).
MAP_LEVERS = default,stages=unrolled,recommended-unrolled,recommended-diffrax
map-levers: $(STAMP)
	$(BIN)/python benchmarks/levers.py --map --variants $(MAP_LEVERS) --blocks 6 --steps-per-block 10
	$(MAKE) --no-print-directory report

# 512-bit vectors (`measure/vectors.py`, a compile option of the step) along the map: per
# workload and controller, the default and the recommended step, each compiled with
# XLA's default width and with 512 bits, trained and timed in interleaved blocks
# (records under results/map/<machine>/vectors/); then the report (its section of
# figures/tables/workloads.md).
MAP_VECTORS = default,vw512,recommended-vw0,recommended-vw512
map-vectors: $(STAMP)
	$(BIN)/python benchmarks/levers.py --map --map-folder vectors --variants $(MAP_VECTORS) \
		--blocks 6 --steps-per-block 10
	$(MAKE) --no-print-directory report

# The fused solve (`measure/fused.py`) along the map: per workload and controller, the
# default step and the recommended step run by diffrax's loop and by the fused solve,
# trained and timed in interleaved blocks (records under results/map/<machine>/fused/,
# each with its compute floor); then the report (figures/tables/workloads.md).
MAP_FUSED = default,recommended-diffrax,recommended-fused
map-fused: $(STAMP)
	$(BIN)/python benchmarks/levers.py --map --map-folder fused --variants $(MAP_FUSED) \
		--blocks 6 --steps-per-block 10
	$(MAKE) --no-print-directory report

# The row over two hosts: 2 nodes x 1 device `shard_map`, PID, 3 runs, one JAX process
# per node, through the SLURM executor on a two-node cluster of network namespaces on
# this machine, started in a temporary folder (root; benchmarks/nodes.py); records
# under results/ as the matrix's.
NODES_ARGS ?= --scale $(SCALE) --runs 3
nodes: $(STAMP)
	@cluster=$$(mktemp -d); \
		$(BIN)/python -m tests.slurm_cluster --nodes 2 $$cluster \
			--run "$(BIN)/python benchmarks/nodes.py $(NODES_ARGS)"; status=$$?; \
		rm -rf $$cluster; exit $$status

# The core rows under each JAX release of versions/ (one environment each, .venvs/),
# round by round across releases; then figures/tables/versions.md.
versions: $(STAMP)
	$(BIN)/odestudy versions

# One timed quantity: `odestudy run`'s trained step against `odestudy tune`'s default step
# on a problem whose step costs more as it trains (tests/problems.Spiral), in 6
# interleaved pairs, each command in its own process (benchmarks/rising_cost.py; records
# under results/<machine>/rising_cost/).
rising-cost: $(STAMP)
	$(BIN)/python benchmarks/rising_cost.py --pairs 6

# A tuned step in a researcher's own loop: `odestudy tune` on examples/own_problem.py,
# then a plain loss (no problem class) trained with that step and with diffrax called
# directly, same data, field and batches, and their steps timed in interleaved blocks
# (benchmarks/own_loop.py; records under results/<machine>/own_loop/).
own-loop: $(STAMP)
	cd examples && ../$(BIN)/odestudy tune --problem own_problem:PROBLEM --scale quick \
		--results ../results
	$(BIN)/python benchmarks/own_loop.py

# `predict` checked on a problem written outside the package, named from this folder as
# a user names theirs (examples.own_problem:PROBLEM), records under results/own/: its
# tune, its trained 1-device rows (PID, the default step and the tuned one, the tune's
# step file) and the predictions made from them (`own-predict`); commit those, then
# measure the 2-device rows in every mode with the 1-device rows again, in the same
# rounds, so that each speedup's two rows share one window of this VM's drift
# (`own-rows`), and read the check (figures/tables/prediction.md).
OWN = --problem examples.own_problem:PROBLEM --scale quick --results results/own
OWN_ROWS = --select controller=pid,scaling=strong,processes=1,device=cpu,stages=loop
OWN_STEP = $(shell $(BIN)/python -c 'from odestudy import Scenario; 	from odestudy.study.steps import step_path; 	print(step_path(Scenario(problem="examples.own_problem:PROBLEM", scale="quick"), "results/own"))')
own-predict: $(STAMP)
	$(BIN)/odestudy tune $(OWN) --controller pid --devices 2
	$(BIN)/odestudy matrix $(OWN) $(OWN_ROWS),devices_per_process=1
	$(BIN)/odestudy matrix $(OWN) $(OWN_ROWS),devices_per_process=1 --step $(OWN_STEP)
	$(BIN)/odestudy predict $(OWN) --devices 2 --record --step $(OWN_STEP)
	$(BIN)/odestudy predict $(OWN) --devices 2 --record --default-step
# A later session of the same check: the 1-device rows measured again and the
# predictions made anew from them (`--again`; the ones they replace stay under
# `earlier/`, checked against the rows measured after them); commit, then `own-rows`.
own-again: $(STAMP)
	$(BIN)/odestudy matrix $(OWN) $(OWN_ROWS),devices_per_process=1 --force
	$(BIN)/odestudy matrix $(OWN) $(OWN_ROWS),devices_per_process=1 --step $(OWN_STEP) --force
	$(BIN)/odestudy predict $(OWN) --devices 2 --record --again --step $(OWN_STEP)
	$(BIN)/odestudy predict $(OWN) --devices 2 --record --again --default-step
own-rows: $(STAMP)
	$(BIN)/odestudy matrix $(OWN) $(OWN_ROWS) --force
	$(BIN)/odestudy matrix $(OWN) $(OWN_ROWS) --step $(OWN_STEP) --force
	$(MAKE) --no-print-directory report

# The study's step per shipped problem (data/measured_steps.json), derived from the
# committed `odestudy tune` records (odestudy/measured_steps.py says the rule); tune the
# shipped problems first (`odestudy tune --problem P --controller C --devices 2`).
steps: $(STAMP)
	$(BIN)/odestudy steps

# The installed modules' bytecode is compiled on every core (`compileall -j 0`) rather
# than by pip one file at a time (`--no-compile`): about half of pip's time here. It is
# compiled up front because a process that may not write it (PYTHONDONTWRITEBYTECODE)
# would otherwise compile JAX again at every import; a file that does not compile only
# loses its bytecode.
COMPILE := $(BIN)/python -m compileall -q -j 0 $(VENV)/lib >/dev/null || true
VENV_NEW := test -x $(BIN)/python || { $(PYTHON) -m venv $(VENV) \
	&& $(BIN)/python -m pip install --quiet --upgrade pip; }
$(STAMP): pyproject.toml
	$(VENV_NEW)
	$(BIN)/python -m pip install --quiet --no-compile -e .
	$(COMPILE)
	touch $(STAMP)

# The checks' environment in one install and one compile (the package's included), not
# the package's and then the checks' on top: about 25 s less on a fresh clone here.
$(DEV_STAMP): pyproject.toml
	$(VENV_NEW)
	$(BIN)/python -m pip install --quiet --no-compile -e ".[dev]"
	$(COMPILE)
	touch $(STAMP) $(DEV_STAMP)

setup: $(STAMP)

# Two test workers (pytest-xdist), each group of modules on one worker (tests/conftest.py:
# a module, or modules sharing trained smoke scenarios or compiled steps), the heaviest
# groups first.
# The long tests (`long`: SLURM clusters, several JAX processes, the built wheel, any
# test over 10 s here) are left to `test-long`.
# make test compiles without LLVM's optimisations (`jax_disable_most_optimizations`,
# inherited by every process the tests start), which spares much of each compile: the HLO
# passes, so the loops and collectives the audits count, are the same, and its tests
# agree within their tolerances. The long tests compile as measured runs do (one of them,
# comparing two orderings of float32 work, exceeded its tolerance under the flag; why,
# not looked into). A record made under the flag says so (`timing.MEASUREMENT_ENV`), so that
# no measured run reuses it.
# Types (mypy, about 45 s cold here, 1 s warm) are checked by `make lint` and `make
# test-long` (which CI runs after this), so that a fresh clone's `make test`, the venv's
# build included, stays within 5 minutes.
test: style
	JAX_DISABLE_MOST_OPTIMIZATIONS=1 $(BIN)/python -m pytest -q -n 2 --dist loadgroup \
		--no-loadscope-reorder -m "not long"

# The long tests, over 30 minutes here: the SLURM executor on a one-node cluster on
# localhost and a two-node cluster in network namespaces with the 2-node row through it
# (tests/slurm_cluster.py; root), the study over two JAX processes against two devices,
# the package run from a built wheel, the GPU machine's script at tiny sizes, the smoke
# matrix's notebook run, and every other test that takes over 10 s here (marked where it
# is defined), so that make test stays within 5 minutes.
test-long: types
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder -m long

# Lint: style (ruff, notebooks included, and its formatting) and types (mypy over the
# package).
lint: style types

style: $(DEV_STAMP)
	$(BIN)/ruff check odestudy tests notebooks benchmarks
	$(BIN)/ruff format --check odestudy tests notebooks benchmarks

types: $(DEV_STAMP)
	$(BIN)/mypy

# The quick matrix sized to this machine: CPU devices up to its physical cores, GPUs
# up to those present (and the machine's weak-scaling ceiling); resumable. Its plan
# without running anything: `odestudy matrix --dry-run`.
matrix: $(STAMP)
	$(BIN)/odestudy matrix --scale $(SCALE) --device auto

matrix-full: $(STAMP)
	$(BIN)/odestudy matrix --scale $(SCALE) --device auto --full

report: $(STAMP)
	$(BIN)/odestudy report --scale $(SCALE) $(if $(filter quick,$(SCALE)),--readme README.md --docs docs)

# The studies that explain the scaling (lock-step waste on heterogeneous data that
# trains, grouping, within-ODE batching, batch size and time to target), 3 runs each;
# then `make report`.
explain: $(STAMP)
	$(BIN)/odestudy matrix --scale $(SCALE) --study explain --device cpu

# The reference study's configuration (2048 series, batch 32, 3 x 1000 steps): its CPU
# rows (1 device; 8 devices pmap, shard, shard_map) and 2 devices in every mode, both
# controllers, one run each; resumable (2147 s on the 2-core machine of the committed
# records); then the time to target of the default and the recommended step (PID, batch
# 32, 1 device and 2 devices `shard_map`): the seed study (`odestudy/builtin/seed.py`). Tables and
# figures go to figures/seed/.
seed: $(STAMP)
	$(BIN)/odestudy matrix --scale seed --study seed --device auto
	$(BIN)/odestudy report --scale seed --figures figures/seed --docs docs

# Only the GPU rows, on a machine with GPUs and the registry: first
# `.venv/bin/pip install -e ".[cuda13]"` (or ".[cuda12]", matching the driver).
# The quick GPU matrix: 1 GPU, and 2, 4 and 8 GPUs in every multi-device mode, strong and
# weak scaling, both controllers, sized to the GPUs present (4 GPUs: the rows on 1, 2
# and 4); resumable; then the report. The plan first, or for N GPUs elsewhere (a SLURM
# partition): `odestudy matrix --device gpu --device-count N --dry-run`.
gpu: $(STAMP)
	$(BIN)/odestudy matrix --scale $(SCALE) --device gpu
	$(BIN)/odestudy report --scale $(SCALE)

# The GPU rows on a machine with no network whose Python already has JAX for CUDA
# (and diffrax, equinox, optax): `make gpu-wheels` here gathers what it lacks, for its
# Python (GPU_PY) and manylinux x86-64, into $(GPU_WHEELS); copy the checkout there, then
# `make gpu-offline GPU_PYTHON=python3` installs them with --no-index on top of that
# Python's JAX and runs the GPU rows and the report.
GPU_WHEELS ?= .whl/gpu
GPU_PY ?= 3.12
GPU_PYTHON ?= python3
GPU_PACKAGES := "papermill>=2.6,<3" "ipykernel>=6.29,<8" "nbformat>=5.10,<6" \
	"nbconvert>=7.16,<8" "tqdm>=4.66,<5" "tabulate>=0.9,<1" "submitit>=1.5,<2" \
	"filelock>=3.13,<4"
PLATFORMS := $(foreach p,manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64 \
	manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64 any,--platform $(p))

gpu-wheels:
	$(PYTHON) -m pip download --quiet --only-binary=:all: --python-version $(GPU_PY) \
		--implementation cp $(PLATFORMS) -d $(GPU_WHEELS) $(GPU_PACKAGES)
	@echo "wheels for Python $(GPU_PY) in $(GPU_WHEELS): $$(ls $(GPU_WHEELS) | wc -l) files"

gpu-offline:
	$(GPU_PYTHON) -m pip install --quiet --no-index --find-links $(GPU_WHEELS) \
		--no-build-isolation -e .
	$(GPU_PYTHON) -m odestudy.cli matrix --scale $(SCALE) --device gpu
	$(GPU_PYTHON) -m odestudy.cli report --scale $(SCALE)

# JupyterLab on the study's environment, serving notebooks/ (explore.ipynb to start);
# LAB_ARGS passes options, e.g. LAB_ARGS="--no-browser --port 8899".
LAB_ARGS ?=
lab: $(DEV_STAMP)
	$(BIN)/jupyter lab --ServerApp.root_dir=notebooks \
		$(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

clean:
	rm -rf $(VENV) results/smoke results/test .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
