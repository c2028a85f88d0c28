"""Publishing a profile's artifact: only what passed, atomically; rejected candidates kept aside.

A profile is built in a staging folder beside ``out/<profile>`` (marked unpublished, so a copy
taken mid-way or a folder left by a kill never loads). After the gate:

* the formats that passed stay, the manifest is rewritten to list only them, and the folder is
  renamed into place;
* a candidate with a failing format is first copied to ``out/.rejected/<profile>/`` with its
  full gate report (and, later, the sensitivity report), marked unpublished: ``load`` and
  ``verify`` refuse it unless asked to inspect it (``allow_unpublished``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from edge_sdk.fsutil import mark_unpublished, staging_dir
from edge_sdk.manifest import Manifest, write_manifest

REJECTED_DIR = ".rejected"


def rejected_folder(out: Path, profile: str) -> Path:
    return Path(out) / REJECTED_DIR / profile


def keep_rejected(stage: Path, out: Path, profile: str, manifest: Manifest, reason: str) -> Path:
    """Copy the staged candidate (all formats, the manifest with every gate report) aside.

    Returns:
        The folder (replaced if an earlier run left one).
    """
    dest = rejected_folder(out, profile)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with staging_dir(dest, force=True) as tmp:
        for item in stage.iterdir():
            if item.name.startswith(".edge-sdk-"):
                continue
            (shutil.copytree if item.is_dir() else shutil.copy2)(item, tmp / item.name)
        write_manifest(tmp, manifest)
        keep = tmp / "REJECTED.txt"
        keep.write_text(f"Rejected by the accuracy gate; kept for inspection, never for deployment.\n{reason}\n",
                        encoding="utf-8")
    mark_unpublished(dest, f"rejected candidate: {reason}")
    return dest


def drop_formats(stage: Path, manifest: Manifest, formats: set[str]) -> None:
    """Delete the files of ``formats`` from the staging folder (the manifest is rebuilt by the caller)."""
    for art in manifest.artifacts:
        if art.format in formats:
            path = stage / art.path
            if path.is_file():
                path.unlink()
