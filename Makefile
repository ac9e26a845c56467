# PEARL developer entry points. Quickstart: `make demo`, `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.pearl-installed
# Conformance examples per Hypothesis test in `make test` (thousands in all).
EXAMPLES ?= 500

PLUGIN_SOURCES := $(wildcard pyproject.toml plugins/*/pyproject.toml plugins/pearl_cpu/CMakeLists.txt plugins/pearl_cpu/csrc/*)

.PHONY: demo test setup bench clean

demo: $(STAMP)
	$(PY) examples/dqn_cartpole.py

test: $(STAMP)
	PEARL_CONFORMANCE_EXAMPLES=$(EXAMPLES) $(PY) -m pytest -q --durations=25

bench: $(STAMP)
	$(PY) benchmarks/replay_ops.py --out benchmarks/results/replay_ops.md

setup: $(STAMP)

$(PY):
	@$(PYTHON) -c 'import sys; v = sys.version_info; sys.exit(0 if v >= (3, 11) else f"PEARL needs Python >= 3.11, found {v.major}.{v.minor}. Fix: make PYTHON=python3.11 ...")'
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# torch first, as the CPU build 2.13.0 (on local disk in dev/CI; other builds are multi-GB
# downloads). The packages themselves declare a torch range, not this pin.
$(STAMP): $(PY) $(PLUGIN_SOURCES)
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e '.[rl,test,envs,pixels,ray,export]' ./plugins/pearl_cpu ./plugins/pearl_cuda './plugins/pearl_fpga[emulator]'
	$(PY) -m pearl_core.cli plugins
	touch $(STAMP)

clean:
	rm -rf $(VENV) build plugins/*/build *.egg-info plugins/*/*.egg-info .pytest_cache .hypothesis
