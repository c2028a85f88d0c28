"""ONNX -> TensorFlow SavedModel with onnx2tf, offline and quiet, in a child process.

Why a child process:

* onnx2tf calls ``sys.exit(1)`` on many errors and prints hundreds of coloured lines; in a child
  both are contained: we keep the whole console output in a log file in scratch and turn a
  failure into ONE :class:`~edge_sdk.errors.ConversionError` naming the failing ONNX op.
* ``onnx2tf.convert()`` fetches a sample-image ``.npy`` from GitHub for models whose inputs are
  all 4-D with 3 channels (it reads ``calibration_image_sample_data_20x128x128x3_float32.npy``
  from the *current directory* first; see ``onnx2tf.utils.common_functions.
  download_test_image_data``). The child runs with its cwd in scratch where we put that file,
  made from *our* calibration feeds, so onnx2tf never needs the network. As a second guard the
  child replaces ``socket.getaddrinfo`` and ``socket.socket.connect`` with functions that record
  the attempt and refuse it, so any other download also fails loudly instead of leaking out.
* TensorFlow/onnx2tf global state (log levels, Keras sessions) and onnx2tf's own dependency
  pins stay out of the caller's process.

Layouts: onnx2tf moves channels last. By default (``keep_layout``) NCHW image inputs stay NCHW
(onnx2tf puts a TRANSPOSE inside the model); otherwise they become NHWC and
:func:`onnx_to_savedmodel` reports the permutation per input. Channel-last outputs are found by
:func:`output_perms` and put back by the caller.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_sdk.errors import ConversionError

#: onnx2tf reads this file from its cwd instead of downloading it (name fixed by onnx2tf).
SAMPLE_FILE = "calibration_image_sample_data_20x128x128x3_float32.npy"
LOG_NAME = "onnx2tf.log"
NETWORK_LOG = "network_attempts.txt"
_NHWC_PERM = [0, 2, 3, 1]

ALTERNATIVES = (
    "Try: a static input shape (--input-shape NAME:1,3,H,W) if the model has dynamic dims; "
    "the 'onnx-qdq' format (profile arm-cpu produces it too, run by ONNX Runtime); or an Intel "
    "profile (intel-cpu, OpenVINO). The full onnx2tf log is kept at {log}."
)


@dataclass
class Onnx2TfResult:
    """What onnx2tf produced.

    Attributes:
        saved_model: Folder of the SavedModel (signature ``serving_default``).
        input_perms: Source input name -> axis permutation applied by onnx2tf (e.g. NCHW->NHWC
            is ``[0, 2, 3, 1]``); absent when the input kept its layout.
        log: Path of onnx2tf's console output.
        version: onnx2tf version.
    """

    saved_model: Path
    input_perms: dict[str, list[int]] = field(default_factory=dict)
    log: Path | None = None
    version: str = ""


def _same(tf_shape: list[int], shape: list[int]) -> bool:
    """Shapes agree, reading -1 in ``tf_shape`` as 'any'."""
    return len(tf_shape) == len(shape) and all(t in (-1, s) for t, s in zip(tf_shape, shape))


def _is_image_nchw(shape: list[int]) -> bool:
    return len(shape) == 4 and shape[1] == 3 and shape[2] > 3 and shape[3] > 3


def _is_image_nhwc(shape: list[int]) -> bool:
    return len(shape) == 4 and shape[3] in (1, 3, 4) and shape[1] > 4 and shape[2] > 4


def _variants(name: str) -> list[str]:
    """The name as given and as onnx2tf rewrites it (':' -> '__', leading '/' -> 'wa/')."""
    fixed = name.replace(":", "__")
    return sorted({name, fixed, re.sub("^/", "wa/", fixed)})


def _layout_args(input_shapes: dict[str, list[int]], keep_layout: bool) -> dict[str, list[str]]:
    """onnx2tf's keep-layout options per input.

    onnx2tf assumes channel-first ONNX and moves channels last. An input that is already
    channel-last (a model exported from TF) must be declared NHWC or onnx2tf treats its width as
    channels; an NCHW image input is kept NCHW when ``keep_layout`` (a TRANSPOSE goes inside the
    model); any other rank-3..5 input keeps its shape as given.
    """
    ncw, nwc, absolute = [], [], []
    for name, shape in input_shapes.items():
        if _is_image_nchw(shape):
            if keep_layout:
                ncw += _variants(name)
        elif _is_image_nhwc(shape):
            nwc += _variants(name)
        elif len(shape) in (3, 4, 5):
            absolute += _variants(name)
    return {"keep_ncw_or_nchw_or_ncdhw_input_names": ncw, "keep_nwc_or_nhwc_or_ndhwc_input_names": nwc,
            "keep_shape_absolutely_input_names": absolute}


def _static_copy(onnx_path: Path, input_shapes: dict[str, list[int]], work: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the model with every input dim fixed (onnx2tf's own shape override goes through
    onnxsim's ``name:dims`` syntax, which breaks on names containing ':'), and the input and
    output names renamed in it (:func:`_safe_io_names`)."""
    import onnx

    model = onnx.load(str(onnx_path))
    for inp in model.graph.input:
        if inp.name in input_shapes:
            dims = inp.type.tensor_type.shape.dim
            for dim, value in zip(dims, input_shapes[inp.name]):
                dim.Clear()
                dim.dim_value = int(value)
    _sanitize_node_names(model)
    renamed = _safe_io_names(model)
    from .sources import self_contained_branches

    self_contained_branches(model)  # onnx2tf loses the outer weights an If branch reads
    path = work / "static_input.onnx"
    onnx.save(model, str(path))
    return path, renamed


def _safe_io_names(model) -> dict[str, str]:
    """Graph inputs and outputs renamed where TensorFlow refuses the name as a scope even after
    onnx2tf's own ':' -> '__' (openWakeWord's timer model names its output with its labels as
    JSON: ``{"1": "1_minute_timer", ...}``; an input named ``input image[0]`` left onnx2tf without a
    SavedModel and without an error). onnx2tf makes a Keras layer of each. The new name is
    :func:`tflite_tf_route.sanitize`'s, which is how the SavedModel's inputs and outputs are found
    again by name. Returns old -> new."""
    from .tflite_tf_route import sanitize

    graph = model.graph
    taken = {o.name for o in graph.output} | {i.name for i in graph.input}
    renamed: dict[str, str] = {}
    for vi in [*graph.input, *graph.output]:
        if vi.name in renamed or _SCOPE.fullmatch(vi.name.replace(":", "__")):
            continue
        new = sanitize(vi.name)
        while new in taken:
            new += "_"
        taken.add(new)
        renamed[vi.name] = new
    if not renamed:
        return renamed
    for node in graph.node:
        node.output[:] = [renamed.get(t, t) for t in node.output]
        node.input[:] = [renamed.get(t, t) for t in node.input]
    for vi in [*graph.value_info, *graph.input, *graph.output]:
        vi.name = renamed.get(vi.name, vi.name)
    return renamed


#: The characters TensorFlow takes in a scope name (what onnx2tf makes of node and output names),
#: and a whole name it takes (starting with a letter or digit).
_SCOPE_CHARS = r"A-Za-z0-9_.\\/>-"
_SCOPE = re.compile(rf"[A-Za-z0-9][{_SCOPE_CHARS}]*")


def _sanitize_node_names(model) -> int:
    """Node names onnx2tf can use as TensorFlow scope names (``^[A-Za-z0-9_.\\/>-]*$``), unique.

    Exporters write names such as ``Softmax@0`` (paddle2onnx) that TensorFlow refuses as a scope:
    onnx2tf then fails on an op that has nothing wrong with it. Tensor names are left alone
    (inputs and outputs keep theirs)."""
    seen: set[str] = set()
    changed = 0
    for i, node in enumerate(model.graph.node):
        name = re.sub(rf"[^{_SCOPE_CHARS}]", "_", node.name) if node.name else f"{node.op_type}_{i}"
        if not name or not name[0].isalnum():
            name = f"n{name}"
        base, k = name, 1
        while name in seen:
            name, k = f"{base}_{k}", k + 1
        seen.add(name)
        if name != node.name:
            node.name = name
            changed += 1
    return changed


def _write_sample_file(workdir: Path, input_shapes: dict[str, list[int]], calib: list[dict]) -> None:
    """Write onnx2tf's sample-image file from our calibration feeds (NHWC, float32, >= 20 rows)."""
    images = []
    for feed in calib:
        for name, shape in input_shapes.items():
            if _is_image_nchw(shape) and name in feed:
                arr = np.asarray(feed[name], dtype=np.float32)
                images.extend(np.transpose(arr, _NHWC_PERM))
                break
    if not images:
        # No image-like calibration data: a neutral grey image keeps onnx2tf off the network.
        images = [np.full((128, 128, 3), 0.5, dtype=np.float32)]
    while len(images) < 20:
        images = images + images
    np.save(workdir / SAMPLE_FILE, np.stack(images[:20]).astype(np.float32))


def _failing_op(log_text: str, onnx_path: Path) -> tuple[str, str]:
    """Return (op name, op type) of the node onnx2tf failed on, from its log; ('', '') if unknown."""
    not_impl = re.search(r"(\w+) OP is not yet implemented", log_text)
    names = re.findall(r"onnx_op_name:\s*(\S+)", log_text)
    name = names[-1] if names else ""
    op_type = not_impl.group(1) if not_impl else ""
    if bool(name) != bool(op_type):
        # Fill in the missing half from the graph: the type of the named node, or the name
        # of the first node of the unimplemented type.
        try:
            import onnx

            for node in onnx.load(str(onnx_path), load_external_data=False).graph.node:
                if (name and node.name == name) or (not name and node.op_type == op_type):
                    name, op_type = node.name, node.op_type
                    break
        except Exception:  # noqa: BLE001 - this only refines the message
            pass
    return name, op_type


def _last_error_line(log_text: str) -> str:
    """The last line that looks like a Python exception (``SomeError: message``)."""
    found = re.findall(r"^\s*(\w+(?:Error|Exception)\b:.*)$", log_text, flags=re.MULTILINE)
    return found[-1].strip()[:300] if found else ""


def _version() -> str:
    from edge_sdk._deps import version_of

    return version_of("onnx2tf") or ""


def _keep_log(log: Path) -> Path:
    """Copy the log out of scratch (which the pipeline deletes on failure) into the temp dir."""
    import tempfile

    fd, kept = tempfile.mkstemp(prefix="edge-sdk-onnx2tf-", suffix=".log")
    with os.fdopen(fd, "wb") as fh:
        fh.write(log.read_bytes() if log.exists() else b"")
    return Path(kept)


def _failure(log: Path, onnx_path: Path, rc: int) -> ConversionError:
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # strip onnx2tf's ANSI colours before parsing
    hint = ALTERNATIVES.format(log=_keep_log(log))
    if (log.parent / NETWORK_LOG).exists():
        return ConversionError(
            "onnx2tf tried to reach the network during conversion, which edge-sdk forbids: "
            + (log.parent / NETWORK_LOG).read_text().strip().splitlines()[0],
            f"edge-sdk supplies onnx2tf's sample data so this should not happen: please report it with the "
            f"log at {_keep_log(log)}. Meanwhile use the onnx-qdq format or an Intel profile.",
        )
    name, op_type = _failing_op(text, onnx_path)
    if op_type and re.search(rf"{re.escape(op_type)} OP is not yet implemented", text):
        detail = f"onnx2tf {_version()} has no converter for ONNX op type {op_type}"
    else:
        detail = _last_error_line(text)
    if name or op_type:
        what = f"op '{name}'" if name else "an op"
        what += f" ({op_type})" if op_type else ""
        msg = f"onnx2tf cannot convert {what} of {onnx_path.name}"
    elif rc == 0:  # it returned normally and wrote nothing: say that, not "failed (exit code 0)"
        msg = f"onnx2tf finished on {onnx_path.name} without writing a SavedModel"
    else:
        msg = f"onnx2tf failed on {onnx_path.name} (exit code {rc})"
    if detail:
        msg += f": {detail}"
    return ConversionError(msg + ".", hint)


def onnx_to_savedmodel(
    onnx_path: Path,
    input_shapes: dict[str, list[int]],
    calib: list[dict],
    scratch: Path,
    timeout_s: int = 1800,
    keep_layout: bool = True,
) -> Onnx2TfResult:
    """Convert an ONNX model to a SavedModel with onnx2tf in a child process, offline.

    Args:
        onnx_path: The ONNX model.
        input_shapes: Static shape of every input (overrides dynamic dims via onnx2tf's
            ``overwrite_input_shape``).
        calib: Calibration feeds (source layout); used for onnx2tf's sample data so it never
            downloads its own.
        scratch: Private folder for the SavedModel, the log and onnx2tf's files.
        timeout_s: Give up after this long.
        keep_layout: Keep NCHW image inputs NCHW (onnx2tf puts a TRANSPOSE inside the model,
            which quantizes to int8 and runs on the Edge TPU) so that the artifact takes what the
            source took; False lets onnx2tf expose NHWC inputs (reported in ``input_perms``).

    Returns:
        Where the SavedModel is and how the inputs were transposed.

    Raises:
        ConversionError: onnx2tf failed (naming the op it failed on), timed out, tried to reach
            the network, or produced no SavedModel.
    """
    from edge_sdk._deps import available, version_of
    from edge_sdk.errors import MissingDependencyError

    if not available("onnx2tf"):  # find_spec only: importing it here would load TensorFlow twice
        raise MissingDependencyError("onnx2tf", "convert", "ONNX -> TFLite conversion")
    work = Path(scratch) / "onnx2tf"
    work.mkdir(parents=True, exist_ok=True)
    out = work / "saved_model"
    log = work / LOG_NAME
    _write_sample_file(work, input_shapes, calib)
    static, renamed = _static_copy(Path(onnx_path), input_shapes, work)
    args = {
        "input_onnx_file_path": str(static),
        "output_folder_path": str(out),
        **_layout_args({renamed.get(n, n): s for n, s in input_shapes.items()}, keep_layout),
    }
    (work / "args.json").write_text(json.dumps(args), encoding="utf-8")
    # onnx2tf runs `onnxsim` as a command: without our environment's bin on PATH (a venv used
    # without activating it) it silently skips simplification, and real models then fail to
    # convert (PP-OCRv4's recogniser: a LayerNorm reshape onnx2tf gets wrong unsimplified).
    bindir = str(Path(sys.executable).parent)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="-1", PYTHONUNBUFFERED="1",
               PATH=os.pathsep.join([bindir, os.environ.get("PATH", "")]))
    try:
        with open(log, "w", encoding="utf-8") as fh:
            proc = subprocess.run(
                [sys.executable, "-m", "edge_sdk.converters.onnx2tf_route", str(work / "args.json")],
                cwd=work, stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=timeout_s, check=False,
            )
    except subprocess.TimeoutExpired:
        raise ConversionError(
            f"onnx2tf did not finish converting {Path(onnx_path).name} within {timeout_s} s.",
            ALTERNATIVES.format(log=log),
        ) from None
    if proc.returncode != 0 or (work / NETWORK_LOG).exists() or not (out / "saved_model.pb").exists():
        raise _failure(log, Path(onnx_path), proc.returncode)
    result_meta = json.loads((work / "result.json").read_text(encoding="utf-8"))
    perms: dict[str, list[int]] = {}
    tf_shapes = result_meta["input_shapes"]
    for (name, shape), tf_shape in zip(input_shapes.items(), tf_shapes):
        # onnx2tf's Keras inputs keep a free batch dim (-1); we fix it again when tracing.
        if not _same(tf_shape, shape) and len(shape) == 4:
            if _same(tf_shape, [shape[i] for i in _NHWC_PERM]):
                perms[name] = list(_NHWC_PERM)
            else:
                raise ConversionError(
                    f"onnx2tf changed input '{name}' from {shape} to {tf_shape}, which is not a layout "
                    "transposition edge-sdk can map.",
                    ALTERNATIVES.format(log=log),
                )
    return Onnx2TfResult(saved_model=out, input_perms=perms, log=log, version=version_of("onnx2tf") or "")


def output_perms(onnx_path: Path, feed: dict[str, np.ndarray], tf_outputs: list[np.ndarray],
                 names: list[str]) -> dict[int, list[int]]:
    """Which outputs onnx2tf moved to channel-last, and the permutation that moves them back.

    Shapes alone are ambiguous (``[1, 8, 8, 8]``), so the TF outputs for ``feed`` are compared
    with ONNX Runtime's outputs of the source, as they are and channel-first again.

    Args:
        onnx_path: The source ONNX model.
        feed: One input sample in the source layout.
        tf_outputs: The SavedModel's outputs for that sample, in source output order.
        names: Source output names, in order.

    Returns:
        Output position -> permutation, for the outputs that need one.

    Raises:
        ConversionError: an output matches the source in neither layout.
    """
    import onnxruntime as ort

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))
    out: dict[int, list[int]] = {}
    for i, (name, y) in enumerate(zip(names, tf_outputs)):
        r = ref.get(name, list(ref.values())[i])
        rank = y.ndim
        candidates = [list(range(rank))] + ([[0, rank - 1, *range(1, rank - 1)]] if rank >= 3 else [])
        if rank <= 4 and y.shape != r.shape:  # e.g. a recurrent state [layers, batch, H] made [batch, layers, H]
            candidates += [list(p) for p in itertools.permutations(range(rank)) if list(p) not in candidates]
        best = None
        for perm in candidates:
            t = np.transpose(y, perm)
            if t.shape == r.shape:
                err = float(np.abs(t - r).max() / (np.abs(r).max() + 1e-6))
                if best is None or err < best[0]:
                    best = (err, perm)
        if best is None:
            raise ConversionError(
                f"onnx2tf changed the shape of output '{name}' from {list(r.shape)} to {list(y.shape)}, which no "
                "transposition maps back.",
                "Use the onnx-qdq format (ONNX Runtime) or an Intel profile for this model.")
        if best[0] > 1e-2:  # the shape maps back, the values do not: onnx2tf computes it differently
            raise ConversionError(
                f"onnx2tf's float model computes output '{name}' (shape {list(r.shape)}) differently from the source: "
                f"relative error {best[0]:.3g} in its closest layout, where a layout change leaves under 0.01; an op "
                "on this output's path was converted wrongly by onnx2tf, before any quantization.",
                "Use the onnx-qdq format (ONNX Runtime) or an Intel profile for this model.")
        if best[1] != list(range(rank)):
            out[i] = best[1]
    return out


def _block_network(record: Path) -> None:
    """Refuse every outgoing connection in this process, and write down who tried."""
    import socket

    def refuse(self, address, *args, **kwargs):  # noqa: ANN001 - socket signature
        with open(record, "a", encoding="utf-8") as fh:
            fh.write(f"connection to {address!r} refused\n")
        raise OSError(f"edge-sdk: network access is disabled during conversion (tried {address!r})")

    def refuse_lookup(host, *args, **kwargs):  # noqa: ANN001 - getaddrinfo signature
        return refuse(None, (host, *args[:1]))

    # Name lookup first: without it a blocked download fails as a DNS error we cannot attribute.
    socket.getaddrinfo = refuse_lookup  # type: ignore[assignment]
    socket.socket.connect = refuse  # type: ignore[method-assign]
    socket.socket.connect_ex = refuse  # type: ignore[method-assign]


def _child_main(args_path: str) -> int:
    """Entry point of the child process: run onnx2tf.convert with our arguments."""
    work = Path(args_path).parent
    _block_network(work / NETWORK_LOG)
    args = json.loads(Path(args_path).read_text(encoding="utf-8"))
    import onnx2tf

    model = onnx2tf.convert(
        **args,
        output_signaturedefs=True,  # a serving_default signature TFLiteConverter can load
        non_verbose=False,
        verbosity="error",
    )
    shapes = [[int(d) if d is not None else -1 for d in t.shape] for t in model.inputs]
    (work / "result.json").write_text(json.dumps({"input_shapes": shapes}), encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through onnx_to_savedmodel
    sys.exit(_child_main(sys.argv[1]))
