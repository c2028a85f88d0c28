"""What a conversion did, per profile and per format, and the table that says so.

Every requested profile is attempted; each of its formats ends in one of four states:

* ``published``: converted, the accuracy gate passed (or was not meaningful), in ``out/<profile>/``;
* ``kept``: converted, the gate failed, published anyway because of ``--allow-accuracy-drop``
  (the manifest says so and ``load`` warns);
* ``gate_failed``: converted, the gate failed; the candidate is kept under ``out/.rejected/<profile>/``
  with its report, never loadable as a published profile;
* ``conversion_failed``: the converter could not make it (the reason names the step and the op);
  with ``bug`` set, edge-sdk's own code failed there (the reason says where; the run exits 70).

Nothing in one format or profile ends the run: an exception there, however unexpected, becomes
that format's or profile's row, and the table and the ``--json`` summary are always printed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from edge_sdk import typed

from .int8_compute import label

FormatStatus = Literal["published", "kept", "gate_failed", "conversion_failed"]


@dataclass
class FormatOutcome:
    """One format of one profile.

    Attributes:
        format: The artifact format.
        status: See the module docstring.
        reason: Why it failed (empty when published).
        figures: The gate's one-line figures (when a gate ran).
        route: How the artifact was made.
        advice: When the gate failed after recovery: what to try next, from what the search did.
        int8_compute: Of the artifact's compute ops (convolutions, matmuls), how many run in int8,
            read from the file: ``compute_ops``, ``int8_ops``, ``share``, ``macs``, ``int8_macs``,
            ``mac_share``, ``float_ops`` (:mod:`~.int8_compute`); empty where not known.
        bug: The format failed in edge-sdk's own code, not because of the model or the data.
    """

    format: str
    status: FormatStatus
    reason: str = ""
    figures: str = ""
    route: str = ""
    advice: str = ""
    int8_compute: dict[str, Any] = field(default_factory=dict)
    bug: bool = False


@dataclass
class ProfileSummary:
    """What happened for one profile.

    Attributes:
        profile: Profile name.
        folder: The artifact folder (exists only when ``published``).
        published: Whether the folder was written.
        formats: Artifact formats published.
        files: Files of the artifact (relative to ``folder``).
        gate: ``passed``, ``failed``, ``not_meaningful`` or ``not_run`` (conversion failed).
        accuracy: The manifest's accuracy section (also for a rejected candidate).
        warnings: Things the user should know.
        outcomes: Per requested format, what happened.
        rejected: Where the rejected candidate was kept for inspection ('' if none).
        error: Why the profile produced nothing, when it did not.
        bug: The profile failed in edge-sdk's own code (``error`` says where).
    """

    profile: str
    folder: str
    published: bool
    formats: list[str]
    files: list[str]
    gate: str
    accuracy: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    outcomes: list[FormatOutcome] = field(default_factory=list)
    rejected: str = ""
    error: str = ""
    bug: bool = False

    @property
    def conversion_failed(self) -> bool:
        return not self.published and not self.rejected


@dataclass
class ConvertSummary:
    """The result of :func:`edge_sdk.convert` (``--json`` prints :meth:`to_dict`)."""

    source: str
    source_format: str
    out: str
    profiles: list[ProfileSummary]
    kinds: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every requested profile and every format of it was published with a passing gate."""
        return all(p.published and all(o.status == "published" for o in p.outcomes) for p in self.profiles)

    def to_dict(self) -> dict[str, Any]:
        return {**typed.to_dict(self), "ok": self.ok}

    def table(self) -> list[str]:
        """The final profile x format table (plain text lines)."""
        rows = [("profile", "format", "result", "int8 compute", "why / figures")]
        labels = {"published": "published", "kept": "KEPT (gate failed)", "gate_failed": "gate FAILED",
                  "conversion_failed": "conversion FAILED"}
        for p in self.profiles:
            if not p.outcomes:
                rows.append((p.profile, "-", "FAILED (edge-sdk bug)" if p.bug else "conversion FAILED", "-", p.error))
            for o in p.outcomes:
                rows.append((p.profile, o.format, "FAILED (edge-sdk bug)" if o.bug else labels[o.status],
                             label(o.int8_compute), o.reason or o.figures))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = [("  ".join(f"{r[i]:<{widths[i]}}" for i in range(4)) + f"  {r[4]}").rstrip() for r in rows]
        for p in self.profiles:
            for o in p.outcomes:
                if o.advice:
                    lines.append(f"{p.profile} {o.format}: {o.advice}")
            if p.rejected:
                lines.append(f"{p.profile}: rejected candidate kept for inspection in {p.rejected}")
        return lines
