"""tflite-runtime (wheels stop at 2.14, built against numpy 1) under numpy 2: a clear
MissingDependencyError naming the fix, not a bare SystemError from inside the interpreter."""

import sys
import types

import pytest

from edge_sdk.errors import MissingDependencyError
from edge_sdk.runtimes import litert


@pytest.mark.parametrize("tfl, np_version, bad", [("2.14.0", "2.0.0", True), ("2.14.0", "2.4.6", True),
                                                  ("2.13.1", "2.1", True), ("2.14.0", "1.26.4", False),
                                                  ("2.15.0", "2.0.0", False), ("2.16.1", "2.4.6", False)])
def test_numpy_abi_problem(tfl, np_version, bad):
    problem = litert.numpy_abi_problem(tfl, np_version)
    assert (problem is not None) == bad
    if bad:
        assert tfl in problem and np_version in problem


def test_interpreter_module_refuses_tflite_runtime_2_14_under_numpy_2(monkeypatch):
    """Only tflite_runtime importable (a stand-in module: the wheel is not installed here), its
    distribution 2.14.0, numpy 2: the runner's module lookup names the problem and the fix."""
    fake = types.ModuleType("tflite_runtime.interpreter")
    fake.Interpreter, fake.load_delegate = object, object
    monkeypatch.setitem(sys.modules, "tflite_runtime", types.ModuleType("tflite_runtime"))
    monkeypatch.setitem(sys.modules, "tflite_runtime.interpreter", fake)
    monkeypatch.setattr(litert, "INTERPRETER_MODULES", ("tflite_runtime.interpreter",))
    monkeypatch.setattr(litert.np, "__version__", "2.4.6")
    import edge_sdk._deps as deps

    monkeypatch.setattr(deps, "version_of", lambda dist: "2.14.0" if dist == "tflite-runtime" else None)
    with pytest.raises(MissingDependencyError) as err:
        litert.interpreter_module()
    assert "numpy 1" in err.value.message and 'numpy<2' in err.value.hint and err.value.exit_code == 8
    monkeypatch.setattr(litert.np, "__version__", "1.26.4")
    assert litert.interpreter_module() is fake
