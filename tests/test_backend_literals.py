"""A backend is named in few places (#16): each built-in backend's name appears as a string literal in at
most three package source files (its descriptor in edge_sdk/backends.py, its runner, and one converter-side
file), not counting imports of the Python package of the same name (require/available/version_of ...),
lists of module names, and tool-version records. The count was 8-10 files per backend before."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = [REPO / "edge_sdk", REPO / "runtimes", REPO / "converters"]
MODULE_CALLS = {"require", "available", "import_module", "version_of", "find_spec"}


def _is_module_use(node: ast.AST, parents: dict) -> bool:
    p = parents.get(node)
    if isinstance(p, ast.Call) and p.args and p.args[0] is node:
        f = p.func
        if (f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")) in MODULE_CALLS:
            return True
    q = node
    while q in parents:
        q = parents[q]
        if isinstance(q, ast.Assign) and any(isinstance(t, ast.Name) and (t.id.endswith("MODULES") or t.id == "PHONES_HOME")
                                             for t in q.targets):
            return True  # a list of Python module names
        if isinstance(q, ast.keyword) and q.arg == "tools":
            return True  # versions of the Python packages a converter used
        if isinstance(q, ast.Subscript) and isinstance(q.value, ast.Attribute) and q.value.attr == "tools":
            return True
    return False


def files_naming(name: str) -> set[str]:
    out = set()
    for root in SOURCES:
        for path in root.rglob("*.py"):
            tree = ast.parse(path.read_text())
            parents = {ch: node for node in ast.walk(tree) for ch in ast.iter_child_nodes(node)}
            if any(isinstance(n, ast.Constant) and n.value == name and not _is_module_use(n, parents)
                   for n in ast.walk(tree)):
                out.add(str(path.relative_to(REPO)))
    return out


@pytest.mark.parametrize("name", ["litert", "onnxruntime", "openvino", "tensorrt"])
def test_backend_named_in_at_most_three_files(name):
    files = files_naming(name)
    assert "edge_sdk/backends.py" in files and f"runtimes/{name}.py" in files
    assert len(files) <= 3, sorted(files)


def test_the_check_sees_a_backend_name():
    # the rule is not vacuous: a plain comparison with a backend name is counted
    tree = ast.parse('if step.backend == "openvino": pass')
    parents = {ch: node for node in ast.walk(tree) for ch in ast.iter_child_nodes(node)}
    const = next(n for n in ast.walk(tree) if isinstance(n, ast.Constant))
    assert not _is_module_use(const, parents)
