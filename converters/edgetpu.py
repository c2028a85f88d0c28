"""Coral Edge TPU: a compatibility pre-check of an int8 TFLite model, and the compiler step.

The pre-check reads the TFLite flatbuffer itself (the ``tflite`` schema bundled with
``ai_edge_litert``), so it needs no interpreter and sees every subgraph. It checks the model
against the profile's ``[operators]`` table: supported builtin ops, the largest tensor rank,
the allowed tensor dtypes, a single subgraph, and static shapes. ``edgetpu_compiler`` maps ops
to the TPU in execution order up to the first op it cannot map; everything after that runs on
the host CPU, which is what :attr:`PrecheckReport.tpu_fraction` estimates.

When ``edgetpu_compiler`` is on PATH, :func:`compile_model` runs it and keeps its per-op log and
version; otherwise the artifact is recorded as *Edge TPU-ready but not compiled* together with
the exact command to run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from edge_sdk.errors import ConversionError
from edge_sdk.profiles import OperatorSpec

#: Reasons that stop the compiler from taking the model at all (not just one op).
BLOCKING = ("dynamic shape", "float tensor", "more than one subgraph")
COMPILER_TIMEOUT_S = 600


@dataclass
class OpIssue:
    """One op the Edge TPU cannot run, and why."""

    index: int
    op: str
    subgraph: int
    reasons: list[str]


@dataclass
class PrecheckReport:
    """Result of :func:`precheck`.

    Attributes:
        total_ops: Ops in the main subgraph.
        tpu_ops: Ops before the first offending op (what the compiler would map).
        tpu_fraction: ``tpu_ops / total_ops``.
        issues: Each offending op with its reasons.
        model_issues: Problems of the whole model (subgraph count).
        op_counts: Builtin op name -> count in the main subgraph.
    """

    total_ops: int
    tpu_ops: int
    tpu_fraction: float
    issues: list[OpIssue] = field(default_factory=list)
    model_issues: list[str] = field(default_factory=list)
    op_counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.issues and not self.model_issues

    @property
    def blocking(self) -> list[str]:
        """Issues that the compiler (or the profile's integer I/O) cannot live with."""
        out = [m for m in self.model_issues if any(b in m for b in BLOCKING)]
        for issue in self.issues:
            for reason in issue.reasons:
                if any(b in reason for b in BLOCKING):
                    out.append(f"op #{issue.index} {issue.op}: {reason}")
        return out

    def lines(self) -> list[str]:
        """Human-readable lines: one per offending op, then the mapping estimate."""
        out = list(self.model_issues)
        for issue in self.issues:
            out.append(f"op #{issue.index} {issue.op} (subgraph {issue.subgraph}): {'; '.join(issue.reasons)}")
        out.append(
            f"about {self.tpu_fraction:.0%} of the graph would map to the Edge TPU "
            f"({self.tpu_ops} of {self.total_ops} ops; ops from the first unsupported one on run on the CPU)"
        )
        return out

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ok"] = self.ok
        return d


def _enum_names(enum_cls) -> dict[int, str]:
    return {v: k for k, v in vars(enum_cls).items() if not k.startswith("_") and isinstance(v, int)}


def _schema():
    from edge_sdk._deps import require

    return require("ai_edge_litert.schema_py_generated", "reading TFLite models")


def precheck(model: bytes, ops: OperatorSpec) -> PrecheckReport:
    """Check an int8 TFLite model against the Edge TPU's constraints.

    Args:
        model: The TFLite flatbuffer.
        ops: The profile's operator constraints (supported ops, max rank, dtypes, subgraphs).

    Returns:
        The report (never raises for an incompatible model; the caller decides).

    Raises:
        ConversionError: the bytes are not a TFLite model.
    """
    schema = _schema()
    try:
        m = schema.Model.GetRootAs(model, 0)
        n_sub = m.SubgraphsLength()
    except Exception as exc:  # noqa: BLE001 - flatbuffers raises assorted errors on garbage
        raise ConversionError(f"Not a TFLite model: {exc}") from None
    op_names = _enum_names(schema.BuiltinOperator)
    dtype_names = {k: v.lower() for k, v in _enum_names(schema.TensorType).items()}
    codes = []
    for i in range(m.OperatorCodesLength()):
        oc = m.OperatorCodes(i)
        # Newer schemas keep codes > 127 in BuiltinCode and a clamped value in DeprecatedBuiltinCode.
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
        name = op_names.get(code, f"BUILTIN_{code}")
        if name == "CUSTOM":
            name = f"CUSTOM:{(oc.CustomCode() or b'').decode(errors='replace')}"
        codes.append(name)
    supported = {s.upper() for s in ops.supported}
    unsupported = {s.upper() for s in ops.unsupported}
    allowed = set(ops.allowed_dtypes)
    report = PrecheckReport(total_ops=0, tpu_ops=0, tpu_fraction=0.0)
    if ops.single_subgraph and n_sub > 1:
        report.model_issues.append(f"more than one subgraph ({n_sub}): the Edge TPU compiler takes one")
    for s in range(n_sub):
        sg = m.Subgraphs(s)
        first_bad = None
        for i in range(sg.OperatorsLength()):
            op = sg.Operators(i)
            name = codes[op.OpcodeIndex()]
            reasons = []
            if (supported and name not in supported) or name in unsupported:
                reasons.append("op not in the Edge TPU's supported set")
            tensors = [op.Inputs(j) for j in range(op.InputsLength())] + [op.Outputs(j) for j in range(op.OutputsLength())]
            for t_idx in tensors:
                if t_idx < 0:
                    continue  # optional input left out
                t = sg.Tensors(t_idx)
                tname = (t.Name() or b"").decode(errors="replace")
                dtype = dtype_names.get(t.Type(), str(t.Type()))
                shape = [t.Shape(k) for k in range(t.ShapeLength())]
                sig = [t.ShapeSignature(k) for k in range(t.ShapeSignatureLength())]
                if allowed and dtype not in allowed:
                    kind = "float tensor" if dtype.startswith("float") else "tensor"
                    reasons.append(f"{kind} '{tname}' has dtype {dtype} (allowed: {', '.join(sorted(allowed))})")
                if ops.max_rank and len(shape) > ops.max_rank:
                    reasons.append(f"tensor '{tname}' has rank {len(shape)} > {ops.max_rank}")
                if any(d < 0 for d in sig):
                    reasons.append(f"dynamic shape on tensor '{tname}' {sig}")
            if s == 0:
                report.total_ops += 1
                report.op_counts[name] = report.op_counts.get(name, 0) + 1
                if reasons and first_bad is None:
                    first_bad = i
            if reasons:
                report.issues.append(OpIssue(index=i, op=name, subgraph=s, reasons=sorted(set(reasons))))
        if s == 0:
            report.tpu_ops = report.total_ops if first_bad is None else first_bad
    report.tpu_fraction = report.tpu_ops / report.total_ops if report.total_ops else 0.0
    return report


@dataclass
class CompileResult:
    """What the compiler step did (recorded under ``backend_options["edgetpu"]``)."""

    compiled: bool
    status: str
    command: str
    compiled_model: str = ""
    log_file: str = ""
    compiler_version: str = ""
    ops_on_tpu: int | None = None
    ops_on_cpu: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _compiler_version(exe: str) -> str:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    text = (out.stdout + out.stderr).strip()
    found = re.search(r"(\d+(?:\.\d+)+)", text)
    return found.group(1) if found else (text.splitlines()[0] if text else "unknown")


def _count(pattern: str, text: str) -> int | None:
    found = re.search(pattern, text, flags=re.IGNORECASE)
    return int(found.group(1)) if found else None


def compile_model(model_path: Path, out_dir: Path, compiler: str = "edgetpu_compiler") -> CompileResult:
    """Run ``edgetpu_compiler`` on ``model_path`` when it is on PATH.

    Args:
        model_path: The int8 TFLite model (inside ``out_dir``).
        out_dir: Where the compiled ``*_edgetpu.tflite`` and its log go.
        compiler: Executable name (from the profile's ``operators.compiler``).

    Returns:
        ``compiled=False`` with the command to run when the compiler is absent.

    Raises:
        ConversionError: the compiler ran and failed, or wrote no compiled model.
    """
    command = f"{compiler} -s -o . {model_path.name}"
    exe = shutil.which(compiler)
    if exe is None:
        return CompileResult(
            compiled=False,
            status=f"Edge TPU-ready but not compiled: '{compiler}' is not on PATH here; the model runs on "
            "the CPU until compiled",
            command=f"cd <artifact folder> && {command}",
        )
    version = _compiler_version(exe)
    try:
        proc = subprocess.run([exe, "-s", "-o", str(out_dir), str(model_path)], capture_output=True, text=True,
                              timeout=COMPILER_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise ConversionError(f"{compiler} did not finish within {COMPILER_TIMEOUT_S} s.",
                              f"Run it by hand to see why: {command}") from None
    stem = model_path.stem
    compiled = out_dir / f"{stem}_edgetpu.tflite"
    log = out_dir / f"{stem}_edgetpu.log"
    console = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0 or not compiled.is_file():
        tail = " | ".join(console.splitlines()[-3:]) or f"exit code {proc.returncode}"
        raise ConversionError(f"{compiler} failed on {model_path.name}: {tail}",
                              "Check the pre-check report above; ops it lists may need replacing.")
    if not log.is_file():
        # Some compiler versions print the per-op table only to stdout: keep that as the log.
        log.write_text(console + "\n", encoding="utf-8")
    text = log.read_text(encoding="utf-8", errors="replace") + "\n" + console
    return CompileResult(
        compiled=True,
        status=f"compiled by {compiler} {version}",
        command=command,
        compiled_model=compiled.name,
        log_file=log.name,
        compiler_version=version,
        ops_on_tpu=_count(r"operations that will run on Edge TPU:\s*(\d+)", text),
        ops_on_cpu=_count(r"operations that will run on CPU:\s*(\d+)", text),
    )
