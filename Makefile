# The two commands of the README quick start. Both set up the virtual environment first
# (once; re-done when pyproject.toml changes).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# test-fast's pytest-xdist workers: one per core (the host CI runs on has two).
FAST_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: quickstart test test-fast test-arm64 test-device bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[all,test]"
	$(BIN)/pip check
	touch $@

## 1. Set up, then run the main job on the bundled example model.
quickstart: $(VENV)/.installed
	$(BIN)/edge-sdk doctor
	$(BIN)/python examples/quickstart.py --out quickstart-out

## 2. Set up, then run the whole test suite (what .ci/run calls). The 25 slowest tests close every run.
test: $(VENV)/.installed
	$(BIN)/pytest --durations=25

## The contributor's loop: every test but the two real-model matrices (tests/realmodels/test_practice.py,
## test_wider.py; `pytest tests/realmodels -k MODEL` runs one model's), on two workers. The emulated aarch64
## check and the device venvs are their own targets below. CONTRIBUTING.md has the times.
test-fast: $(VENV)/.installed
	$(BIN)/pytest -n $(FAST_WORKERS) --dist loadfile --durations=25 \
	    --ignore=tests/realmodels/test_practice.py --ignore=tests/realmodels/test_wider.py

## The device side on aarch64, emulated (qemu-user in a cached Debian arm64 root; needs root and the
## package registries): every runtime extra in its own venv, parity with x86 -> docs/arm64.md.
## Includes a self-test that a tampered artifact fails. Cache: ~/.cache/edge-sdk-arm64 (EDGE_SDK_ARM64_CACHE).
test-arm64: $(VENV)/.installed
	$(BIN)/python tests/arm64/run.py

## The runtime tests in device venvs (no conversion stack, edge-sdk from a wheel): the runtime extras at
## their highest versions with numpy 2 + opencv-python-headless (installed from an `edge-sdk freeze` lock),
## at their lowest with the lowest numpy, and at their lowest with numpy 2.0. Needs the package index.
## Cache: ~/.cache/edge-sdk-device-venv (EDGE_SDK_DEVICE_VENV_CACHE); warm runs take about 20 s.
test-device: $(VENV)/.installed
	$(BIN)/python tests/device_venv/run.py

## The performance suite; writes docs/benchmarks.md.
bench: $(VENV)/.installed
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) build dist *.egg-info quickstart-out
