# The two commands of the README quick start. Both set up the virtual environment first
# (once; re-done when pyproject.toml changes).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: quickstart test test-arm64 test-device bench clean

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

## 2. Set up, then run the whole test suite (what .ci/run calls).
test: $(VENV)/.installed
	$(BIN)/pytest

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
