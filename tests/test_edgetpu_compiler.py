"""The edgetpu_compiler step, with a stand-in compiler on PATH (the real one is absent here).

The stand-in behaves like ``edgetpu_compiler -s -o DIR model.tflite``: it prints a version, writes
``model_edgetpu.tflite`` and ``model_edgetpu.log`` with the per-op mapping table. The tests check
our handling of it: the extra files, the recorded version and op counts, and failures.
"""

from __future__ import annotations

import os
import stat
import textwrap

import pytest

import test_tflite_models as tm
from edge_sdk.converters.edgetpu import compile_model
from edge_sdk.errors import ConversionError

FAKE_OK = r"""#!/bin/sh
if [ "$1" = "--version" ]; then echo "Edge TPU Compiler version 16.0.384591198"; exit 0; fi
out="$3"; model="$4"; stem=$(basename "$model" .tflite)
cp "$model" "$out/${stem}_edgetpu.tflite"
cat > "$out/${stem}_edgetpu.log" <<EOF
Edge TPU Compiler version 16.0.384591198
Input: $model
Operator                       Count      Status
CONV_2D                        2          Mapped to Edge TPU
SOFTMAX                        1          Mapped to Edge TPU
EOF
echo "Model compiled successfully in 12 ms."
echo "Number of Edge TPU subgraphs: 1"
echo "Total number of operations: 7"
echo "Number of operations that will run on Edge TPU: 6"
echo "Number of operations that will run on CPU: 1"
"""

FAKE_FAIL = r"""#!/bin/sh
if [ "$1" = "--version" ]; then echo "Edge TPU Compiler version 16.0.384591198"; exit 0; fi
echo "Internal compiler error. Aborting!" >&2
exit 1
"""


def _install(tmp_path, monkeypatch, script: str):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "edgetpu_compiler"
    exe.write_text(textwrap.dedent(script))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")


def test_compile_records_outputs_version_and_mapping(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch, FAKE_OK)
    art = tmp_path / "art"
    art.mkdir()
    (art / "model.tflite").write_bytes(b"TFL3 stand-in")
    res = compile_model(art / "model.tflite", art)
    assert res.compiled and res.compiler_version == "16.0.384591198"
    assert (art / res.compiled_model).is_file() and res.compiled_model == "model_edgetpu.tflite"
    assert "Mapped to Edge TPU" in (art / res.log_file).read_text()
    assert (res.ops_on_tpu, res.ops_on_cpu) == (6, 1)


def test_compiler_failure_is_one_error(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch, FAKE_FAIL)
    (tmp_path / "model.tflite").write_bytes(b"TFL3 stand-in")
    with pytest.raises(ConversionError, match="Internal compiler error") as err:
        compile_model(tmp_path / "model.tflite", tmp_path)
    assert err.value.hint


def test_absent_compiler_says_ready_but_not_compiled(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    res = compile_model(tmp_path / "model.tflite", tmp_path)
    assert not res.compiled and "Edge TPU-ready but not compiled" in res.status
    assert "edgetpu_compiler -s -o . model.tflite" in res.command


@pytest.mark.slow
def test_converter_publishes_compiled_model_and_log(tmp_path, monkeypatch):
    """Through convert(): the compiled model and its log become extra files of the artifact."""
    from edge_sdk.converters.tflite_int8 import convert

    _install(tmp_path, monkeypatch, FAKE_OK)
    model = tm.keras_cnn(tmp_path / "cnn.keras")
    job = tm.keras_job(model, "coral-edgetpu", tmp_path / "job")
    res = convert(job)
    assert ("model_edgetpu.tflite", "engine") in res.extra_files
    assert ("model_edgetpu.log", "log") in res.extra_files
    assert res.tools["edgetpu_compiler"] == "16.0.384591198"
    tpu = res.backend_options["edgetpu"]
    assert tpu["compiled"] and tpu["ops_on_tpu"] == 6
    for rel, _role in res.extra_files:
        assert (job.workdir / rel).is_file()
    assert not any("not compiled" in w for w in res.warnings)
