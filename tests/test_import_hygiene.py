"""`import edge_sdk`, the runtime package and the CLI never import TensorFlow (checked in a fresh process)."""

import subprocess
import sys

import pytest

CHECK = r"""
import sys
{body}
bad = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'tf_keras', 'onnx2tf', 'nncf', 'torch'))
assert not bad, bad
print('clean')
"""


@pytest.mark.parametrize("body", [
    "import edge_sdk",
    "import edge_sdk.runtimes, edge_sdk.runtimes.probe",
    "import edge_sdk.cli\ntry:\n    edge_sdk.cli.cli.main(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass",
    "from edge_sdk.cli import main\nmain(['doctor', '--json'])",
    "from edge_sdk.cli import main\nmain(['profiles', 'list'])",
])
def test_no_tensorflow_in_sys_modules(body):
    r = subprocess.run([sys.executable, "-c", CHECK.format(body=body)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "clean" in r.stdout
