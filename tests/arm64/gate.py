"""The accuracy gate on arm64 outputs: the project's own gate code, not a copy of it.

    PYTHONPATH=UNPACKED_WHEEL .venv/bin/python gate.py --jobs jobs.json --out verdicts.json

Each job names an artifact folder and two ``.npz`` files of stacked outputs (``[N, ...]`` per
output, as ``device_check.py`` and ``artifacts.py`` write them): the reference (the float model,
or the x86 twin) and the test (the arm64 run). The verdict is
``edge_sdk.converters.accuracy.compare`` — what ``edge-sdk convert`` applies to an int8 artifact
on the workstation — with the output kinds recorded in the artifact's manifest and the accuracy
thresholds of the profile embedded in it. Run with the wheel under test first on PYTHONPATH,
so the gate is the one shipped with the code the devices run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np



def verdicts(reference: dict[str, np.ndarray], test: dict[str, np.ndarray], kinds: dict[str, Any],
             spec: Any) -> dict[str, dict[str, Any]]:
    """The gate's per-output figures and ``failures`` of ``test`` against ``reference``.

    Args:
        reference / test: ``{output: [N, ...] stacked per-sample outputs}`` (same names).
        kinds: ``{output: OutputKind}`` (missing: inferred as the gate does, ``tensor``).
        spec: The profile's ``AccuracySpec``.
    """
    from edge_sdk.converters import accuracy as acc

    names = sorted(reference)
    n = len(reference[names[0]])
    ref = [{k: np.asarray(reference[k][i]) for k in names} for i in range(n)]
    tst = [{k: np.asarray(test[k][i]) for k in names} for i in range(n)]
    out = acc.compare(ref, tst, kinds, spec)
    for name, m in out.items():
        m.pop("_mask", None)
        m["line"] = acc.one_line(name, m)
    return out


def artifact_gate(folder: Path) -> tuple[dict[str, Any], Any]:
    """(kinds by output name, AccuracySpec) as recorded in the artifact's manifest."""
    import edge_sdk
    from edge_sdk.runtimes.select import manifest_profile

    manifest = edge_sdk.read_manifest(folder)
    profile = manifest_profile(manifest, str(folder))
    return {o.name: o.kind for o in manifest.outputs if o.kind is not None}, profile.accuracy


def _load(path: str, prefix: str) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k[len(prefix):]: z[k] for k in z.files if k != "images" and k.startswith(prefix)}


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and x != x:
        return "nan"
    if isinstance(x, float) and x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    return x


def drop_editable_finders() -> None:
    """The wheel under test comes first on PYTHONPATH; a developer's editable install of the checkout
    must not fill in what the wheel lacks (that would hide a packaging bug), so its finders go."""
    sys.meta_path[:] = [f for f in sys.meta_path if not str(getattr(f, "__module__", "")).startswith("__editable__")]
    sys.path_hooks[:] = [h for h in sys.path_hooks if not str(getattr(h, "__module__", "")).startswith("__editable__")]


def main() -> int:
    drop_editable_finders()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    import edge_sdk

    results: dict[str, Any] = {"edge_sdk": str(Path(edge_sdk.__file__).resolve().parent)}
    for job in json.loads(args.jobs.read_text()):
        try:
            kinds, spec = artifact_gate(Path(job["folder"]))
            ref = _load(job["reference"], job.get("reference_prefix", ""))
            test = _load(job["test"], job.get("test_prefix", ""))
            missing = sorted(set(ref) ^ set(test))
            if missing:
                raise ValueError(f"outputs {missing} are not in both runs")
            results[job["id"]] = {"outputs": verdicts(ref, test, kinds, spec)}
        except Exception as exc:  # noqa: BLE001 - one line, judged as a failure by the host
            results[job["id"]] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    args.out.write_text(json.dumps(_jsonable(results), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
