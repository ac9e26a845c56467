# PEARL developer entry points. Quickstart: `make demo`, `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# Two install levels: `make demo` needs only the light set, `make test` (and bench) everything.
DEMO_STAMP := $(VENV)/.pearl-demo-installed
STAMP      := $(VENV)/.pearl-installed
# The light set: what examples/dqn_cartpole.py needs (torch, gymnasium, matplotlib for the curve) and the
# CPU plugin. The full set adds the test tools, Box2D/MuJoCo, Atari/MinAtar/EnvPool, Ray, ONNX export,
# TensorBoard, SB3 and SBX (the device benchmark's dry run), and the CUDA and FPGA plugins with the FPGA emulator
# runtime (~1.7 GB, and ~0.5 GB for SB3 and SBX with JAX).
DEMO_PKGS := -e '.[rl]' ./plugins/pearl_cpu
FULL_PKGS := -e '.[rl,tensorboard,test,envs,pixels,ray,export,video,devbench]' ./plugins/pearl_cpu ./plugins/pearl_cuda './plugins/pearl_fpga[emulator]'
# Conformance examples per Hypothesis test in `make test`: Hypothesis's own default (the kits' is 150; 500, the
# old setting, found nothing 150 did not, at 1.6x the time); `make test-fast` runs 25.
EXAMPLES ?= 100
# pytest-xdist workers: the suite's tests are independent (leak checks count their own pids' segments).
JOBS ?= 2

PLUGIN_SOURCES := $(wildcard pyproject.toml plugins/*/pyproject.toml plugins/pearl_cpu/CMakeLists.txt plugins/pearl_cpu/csrc/*)

.PHONY: demo test test-fast lint setup bench clean

demo: $(DEMO_STAMP)
	$(PY) examples/dqn_cartpole.py

# The gate (.ci/run): lint and types, then every test, slow ones included.
test: lint
	PEARL_CONFORMANCE_EXAMPLES=$(EXAMPLES) $(PY) -m pytest -q -n $(JOBS) --dist worksteal --durations=25

# The edit loop: no slow tests, fewer Hypothesis examples, stop at the first failure.
test-fast: $(STAMP)
	PEARL_CONFORMANCE_EXAMPLES=25 $(PY) -m pytest -q -n $(JOBS) --dist worksteal -m 'not slow' -x

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

bench: $(STAMP)
	$(PY) benchmarks/replay_ops.py --out benchmarks/results/replay_ops.md

setup: $(STAMP)

$(PY):
	@$(PYTHON) -c 'import sys; v = sys.version_info; sys.exit(0 if v >= (3, 11) else f"PEARL needs Python >= 3.11, found {v.major}.{v.minor}. Fix: make PYTHON=python3.11 ...")'
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# torch first, as the CPU build 2.13.0 (on local disk in dev/CI; other builds are multi-GB
# downloads). The packages themselves declare a torch range, not this pin.
# The full set holds the light one: a current full install (older venvs have only its stamp) counts.
$(DEMO_STAMP): $(PY) $(PLUGIN_SOURCES)
	@if [ -f $(STAMP) ] && [ -z "$$(find $(PLUGIN_SOURCES) -newer $(STAMP))" ]; then \
	  echo "$(STAMP) is current: it holds the demo's packages"; \
	else \
	  set -x && $(PIP) install --quiet torch==2.13.0 && $(PIP) install --quiet $(DEMO_PKGS) && \
	  $(PY) -m pearl_core.cli plugins; \
	fi
	touch $(DEMO_STAMP)

# Marks both installed, so `make demo` after `make test` installs nothing.
$(STAMP): $(PY) $(PLUGIN_SOURCES)
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet $(FULL_PKGS)
	$(PY) -m pearl_core.cli plugins
	touch $(STAMP) $(DEMO_STAMP)

clean:
	rm -rf $(VENV) build plugins/*/build *.egg-info plugins/*/*.egg-info .pytest_cache .hypothesis
