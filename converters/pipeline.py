"""``edge_sdk.convert``: one source model -> one artifact folder per device profile.

Order of work, so that bad input fails before anything expensive or anything written:
resolve profiles, refuse existing output folders (unless ``force``), take the output folder's
lock (a second convert into it refuses), clear staging folders a killed run left, read the
source, fix static shapes for every profile, load and split the calibration data, run the
float reference once and decide what each output means (its *kind*, :mod:`.accuracy.kinds`).
Then every profile is attempted (:mod:`.build`): each format is converted, judged by the gate
and published on its own; one profile's or one format's failure never stops the others. The
run ends with a profile x format table and raises if anything asked for was not published
(``ConversionError``, exit 6, when something could not be converted; ``AccuracyGateError``,
exit 7, when everything converted but a gate failed). The summary rides on the error.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from edge_sdk import preprocess as pp
from edge_sdk.errors import AccuracyGateError, CalibrationError, ConversionBugError, ConversionError, InputValidationError
from edge_sdk.fsutil import clean_stale, output_lock
from edge_sdk.offline import no_telemetry
from edge_sdk.outputs import OutputKind, parse_declaration
from edge_sdk.profiles import Profile, resolve_profile

from . import accuracy as acc
from .base import FORMATS, SourceModel
from .build import BuildContext, build_profile
from .calibration import CalibrationSet, load_calibration
from .data_checks import reference_warning, thin_data_warning
from .openvino_bake import BakeRequest, parse_bake
from .openvino_bake import check_profiles as check_bake_profiles
from .heads import postprocess as postprocess_for
from .recovery import RecoveryConfig
from .shapes import StaticShapes, fix_shapes, parse_input_shape
from .sources import READERS, read_source, to_static_onnx, with_static_outputs
from .summary import ConvertSummary, ProfileSummary

__all__ = ["ConvertSummary", "ProfileSummary", "convert"]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _normalize_shapes(input_shapes) -> dict[str, list[int]]:
    if not input_shapes:
        return {}
    if isinstance(input_shapes, dict):
        return {str(k): [int(d) for d in v] for k, v in input_shapes.items()}
    return dict(parse_input_shape(s) for s in input_shapes)


def _normalize_preprocess(spec) -> pp.PreprocessSpec | None:
    if spec is None or isinstance(spec, pp.PreprocessSpec):
        return spec
    if isinstance(spec, dict):
        return pp.from_dict(spec)
    return pp.parse(str(spec))


def _normalize_outputs(outputs) -> dict[str, OutputKind]:
    """``{name: OutputKind | "KIND[:opts]"}`` or ``["NAME:KIND[:opts]", ...]`` -> kinds by name."""
    if not outputs:
        return {}
    if isinstance(outputs, dict):
        items = [(str(n), k if isinstance(k, OutputKind) else parse_declaration(f"{n}:{k}")[1]) for n, k in outputs.items()]
    else:
        items = [parse_declaration(str(text)) for text in outputs]
    out: dict[str, OutputKind] = {}
    for name, kind in items:
        if name in out:
            raise InputValidationError(f"--output declares '{name}' twice.")
        kind.source = "declared"
        out[name] = kind
    return out


def parse_streams(stream) -> list[tuple[str, str]]:
    """``"OUT:IN[,OUT:IN]"``, a list of them, ``{out: in}`` or ``[(out, in)]`` -> ``[(out, in)]``.

    Raises:
        InputValidationError: a pair is not ``OUT:IN``, or an input is fed twice.
    """
    if not stream:
        return []
    if isinstance(stream, dict):
        pairs = [(str(o), str(i)) for o, i in stream.items()]
    else:
        items = [stream] if isinstance(stream, str) else list(stream)
        pairs = []
        for item in items:
            if isinstance(item, (tuple, list)) and len(item) == 2:
                pairs.append((str(item[0]), str(item[1])))
                continue
            for part in str(item).split(","):
                out, sep, inp = part.strip().rpartition(":")
                if not sep or not out or not inp:
                    raise InputValidationError(f"--stream '{part.strip()}' is not OUTPUT:INPUT.",
                                               "Name the state output and the input it feeds, e.g. --stream stateN:state.")
                pairs.append((out, inp))
    inputs = [i for _, i in pairs]
    if len(set(inputs)) != len(inputs):
        raise InputValidationError(f"--stream feeds an input twice: {inputs}.")
    return pairs


def _check_streams(pairs: list[tuple[str, str]], source: SourceModel) -> None:
    """The stream's outputs and inputs exist in the source, with the same dtype and compatible shapes."""
    ins = {t.name: t for t in source.inputs}
    outs = {t.name: t for t in source.outputs}
    for out, inp in pairs:
        if out not in outs:
            raise InputValidationError(f"--stream {out}:{inp}: the model has no output '{out}'.",
                                       f"Outputs: {', '.join(outs)}")
        if inp not in ins:
            raise InputValidationError(f"--stream {out}:{inp}: the model has no input '{inp}'.",
                                       f"Inputs: {', '.join(ins)}")
        o, i = outs[out], ins[inp]
        if o.dtype != i.dtype:
            raise InputValidationError(f"--stream {out}:{inp}: output '{out}' is {o.dtype} but input '{inp}' is {i.dtype}.",
                                       "A stream feeds an output back unchanged: pick an output of the input's type.")
        if len(o.shape) != len(i.shape) or any(a > 0 and b > 0 and a != b for a, b in zip(o.shape, i.shape)):
            raise InputValidationError(f"--stream {out}:{inp}: output '{out}' has shape {o.shape}, input '{inp}' {i.shape}.",
                                       "A stream feeds an output back unchanged: their shapes must agree.")


def _normalize_metric(metric) -> Callable | None:
    if metric is None or callable(metric):
        return metric
    from .accuracy.task import load_metric

    return load_metric(str(metric))


def _resolve_profiles(profiles, log) -> list[Profile]:
    items = [profiles] if isinstance(profiles, (str, Path, Profile)) else list(profiles or [])
    if not items:
        raise InputValidationError("No profile given.", "Pass --profile NAME (see `edge-sdk profiles list`).")
    out: dict[str, Profile] = {}
    for item in items:
        notes: list[str] = []
        prof = resolve_profile(item, notes=notes)
        for note in notes:
            log(f"note: {note}")
        out.setdefault(prof.name, prof)
    for prof in out.values():
        for fmt in prof.artifact.formats:
            if fmt not in FORMATS:
                raise ConversionError(f"Profile '{prof.name}' asks for artifact format '{fmt}', which convert cannot make.",
                                      f"Formats convert makes: {', '.join(FORMATS.names())}")
        if prof.quantization.precision != "int8":
            raise ConversionError(f"Profile '{prof.name}' asks for {prof.quantization.precision}; this converter makes int8 artifacts.",
                                  "Use an int8 profile.")
    return list(out.values())


@dataclass
class Prepared:
    """Per (shapes, hold-out fraction): calibration split, float reference, output kinds, static ONNX."""

    shapes: StaticShapes
    calib: CalibrationSet
    reference: list[dict]
    reference_runtime: str
    kinds: dict[str, OutputKind]
    onnx: Callable[[], Path]
    tflite: Callable[[], Path] | None = None
    shared: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ConvertConfig:
    """Every option of one :func:`convert` run, parsed once (``convert()`` and the CLI build it).

    Attributes:
        calib: Calibration data as given (a path, ``"random"``, a dict, or the list an iterable was read into).
        calib_count: At most this many samples.
        input_shapes: ``{name: [d0, ...]}`` fixing dynamic dims (normalised).
        preprocess: The image preprocessing spec, or None.
        outputs: Declared output kinds by name.
        metric: The task metric beside the gate, or None.
        validation: Separate gate data as given, or None (held back from ``calib``).
        validation_fn: NNCF accuracy-control validation function (OpenVINO), or None.
        recovery: What to do when a gate fails (:class:`~.recovery.RecoveryConfig`).
        streams: Recurrent state pairs ``(output, input)``.
        head: How the device decodes the outputs, and its labels (``(head, labels)`` as given).
        bake: Preprocessing compiled into the OpenVINO IR, or None.
        allow_accuracy_drop: Publish even when the gate fails.
        force: Replace existing artifact folders.
    """

    calib: Any
    calib_count: int | None = None
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    preprocess: Any = None
    outputs: dict[str, OutputKind] = field(default_factory=dict)
    metric: Any = None
    validation: Any = None
    validation_fn: Callable | None = None
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)
    streams: list[tuple[str, str]] = field(default_factory=list)
    head: tuple[Any, Any] = (None, None)
    bake: BakeRequest | None = None
    allow_accuracy_drop: bool = False
    force: bool = False
    min_int8_share: float | None = None


def convert(model, profiles, out, *, calib=None, calib_count: int | None = None, input_shapes=None, preprocess=None,
            allow_accuracy_drop: bool = False, force: bool = False, validation_fn: Callable | None = None,
            validation=None, outputs=None, metric=None, recover: str = "mixed", recover_budget: float | None = None,
            float_nodes=None, calib_method: str | None = None, stream=None, head=None, labels=None,
            bake_preprocess=None, min_int8_share: float | None = None,
            progress: Callable[[str], None] | None = _stderr) -> ConvertSummary:
    """Convert ``model`` for each profile into ``out/<profile>/``.

    Args:
        model: Source model path (ONNX, SavedModel folder, ``.keras``/``.h5``/``.hdf5``, float ``.tflite``).
        profiles: Profile name/alias/path, or a list of them.
        out: Output folder; each profile's artifact lands in ``out/<profile-name>/``.
        calib: Calibration data: image folder, ``.npy``, ``.npz``, folder of ``<input>.npy``, folder of
            per-sample ``.npz``, ``"random"``, a dict of stacked arrays ``{input: [N, ...]}`` or any
            iterable of feed dicts ``{input: array}`` (one sample each; see :mod:`.calibration`).
        calib_count: Use at most this many samples.
        input_shapes: ``{name: [d0, ...]}`` or ``["name:d0,d1", ...]`` fixing dynamic dims.
        preprocess: Image preprocessing: a :class:`~edge_sdk.preprocess.PreprocessSpec`, dict or spec string.
        allow_accuracy_drop: Publish even when the accuracy gate fails (the manifest says so and
            ``load`` warns).
        force: Replace existing artifact folders.
        validation_fn: NNCF validation function (OpenVINO formats: accuracy-controlled quantization).
        validation: Separate data for the accuracy gate (same forms as ``calib``); by default the
            profile's ``holdout_fraction`` of ``calib`` is held back instead.
        outputs: What outputs mean, where inference from the graph and values should not decide:
            ``{"output0": "packed:axis=1,boxes=0-4,scores=4-84"}`` or ``["output0:packed:..."]``
            (see :mod:`edge_sdk.outputs`).
        metric: A task metric run beside the gate on each format (a callable, or
            ``"path.py:function"`` / ``"module:function"``; contract in :mod:`.accuracy.task`).
        recover: When a format fails its gate: ``off``, ``calibration`` (try the toolchain's
            calibration alternatives) or ``mixed`` (then keep the most sensitive layers float).
        recover_budget: Seconds the recovery of one format may take (default: twice the time of
            its first candidate, at least 20 s).
        float_nodes: Layers to keep float from the start: node names or op types, shell patterns
            (``"*/head/*"``, ``"Softmax"``), matched against each format's own names.
        calib_method: ``minmax``, ``percentile`` or ``entropy`` instead of the profile's.
        stream: Recurrent state, ``"OUT:IN[,OUT:IN]"`` (e.g. ``"stateN:state"``), a list of them,
            ``{out: in}`` or ``[(out, in)]``: calibration and the gate run each sample as a sequence
            with the state carried from step to step; recorded in the manifest (``Model.stream()``).
        head: How the device decodes the outputs (``yolov8``, ``yolov5``, ``ssd-anchors:<spec>``,
            ``boxes-scores``, ``classifier``, ``segmentation``; docs/heads.md): recorded in the manifest, so
            ``load(...).infer_image(frame).detections`` (or ``.mask``) works without arguments; a
            yolov8, yolov5 or boxes-scores head also declares its outputs' kinds for the gate (boxes, class
            scores, objectness). A TFLite source ending in ``TFLite_Detection_PostProcess`` is converted
            without the op (its box decoding in builtin ops) and gets ``boxes-scores`` with the op's thresholds.
        labels: Class names (a list or a text file, one per line), recorded in the manifest; their
            count must match the head's classes.
        bake_preprocess: OpenVINO IR only: compile the preprocessing into the IR for camera frames,
            ``"480x640,bgr"`` (frame ``HxW``, colour ``bgr``/``rgb``/``gray``, ``resize=auto|linear|pillow``),
            a dict of those or a :class:`~.openvino_bake.BakeRequest`; done after the gate and checked
            against the host path (:mod:`.openvino_bake`), recorded as ``preprocessing.baked``.
        min_int8_share: The share of compute (multiply-accumulates) an int8 artifact must run in
            int8 to be published as int8, 0 to 1, instead of each profile's
            ``quantization.min_int8_share``; one with none in int8 never is (:mod:`.int8_compute`).
        progress: Called with one line per profile and stage (default: stderr; None: silent).

    Returns:
        A :class:`ConvertSummary` (every format of every profile published).

    Raises:
        ProfileError, ModelLoadError, InputValidationError, CalibrationError: bad input (nothing written).
        ConversionError: some profile or format could not be converted (the others were
            published; ``exc.report`` holds the summary).
        AccuracyGateError: everything converted but some format failed its gate (``exc.report``).
    """
    # Tools print progress bars (NNCF) and notes to stdout; stdout belongs to the caller (--json).
    out_created = not Path(out).exists()
    try:
        with contextlib.redirect_stdout(sys.stderr), no_telemetry():
            patterns = (float_nodes,) if isinstance(float_nodes, str) else tuple(float_nodes or ())
            recovery = RecoveryConfig(mode=recover, budget_s=recover_budget, float_patterns=patterns,  # type: ignore[arg-type]
                                      calib_method=calib_method)
            if calib is None:
                raise CalibrationError("int8 conversion needs calibration data; none was given.",
                                       "Pass --calib DIR_OF_IMAGES (or .npy/.npz), or --calib random for an "
                                       "uncalibrated smoke test.")
            cfg = ConvertConfig(
                # A Python iterable of feeds is read once: every profile (and --val) must see the same samples.
                calib=_materialize(calib), calib_count=calib_count, input_shapes=_normalize_shapes(input_shapes),
                preprocess=_normalize_preprocess(preprocess), outputs=_normalize_outputs(outputs),
                metric=_normalize_metric(metric), validation=_materialize(validation), validation_fn=validation_fn,
                recovery=recovery, streams=parse_streams(stream) or [], head=(head, labels),
                bake=parse_bake(bake_preprocess), allow_accuracy_drop=allow_accuracy_drop, force=force,
                min_int8_share=_check_share(min_int8_share))
            return _convert(model, profiles, Path(out), cfg, progress or (lambda _line: None))
    finally:
        # Leave no trace of a run that published nothing: remove the output folder we created.
        if out_created and Path(out).is_dir() and not any(p for p in Path(out).iterdir() if not p.name.startswith(".edge-sdk")):
            with contextlib.suppress(OSError):
                Path(out).rmdir()


@contextlib.contextmanager
def _locked(out: Path, log):
    from .build import storage_fault

    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(output_lock(out))
        except BlockingIOError as exc:
            raise InputValidationError(f"Another edge-sdk convert ({exc}) is writing into {out}.",
                                       "Wait for it to finish, or choose another --out.") from None
        except OSError as exc:  # read-only, no permission, no space: before any work
            raise InputValidationError(f"Cannot write into the output folder {out}: {storage_fault(exc)}.",
                                       "Choose an --out you can write to, with free space.") from None
        removed = clean_stale(out)
        if removed:
            log(f"removed {len(removed)} folder(s) an interrupted run left in {out}: {', '.join(removed)}")
        yield


def _check_share(share) -> float | None:
    if share is None:
        return None
    try:
        value = float(share)
    except (TypeError, ValueError):
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise InputValidationError(f"--min-int8-share must be a share between 0 and 1, got {share!r}.",
                                   "e.g. 0.5: half of the compute (multiply-accumulates) must run in int8.")
    return value


def _convert(model, profiles, out: Path, cfg: ConvertConfig, log) -> ConvertSummary:
    profs = _resolve_profiles(profiles, log)
    if cfg.min_int8_share is not None:  # the caller's floor instead of each profile's
        profs = [replace(p, quantization=replace(p.quantization, min_int8_share=cfg.min_int8_share)) for p in profs]
    check_bake_profiles(cfg.bake, [list(p.artifact.formats) for p in profs])
    existing = [p.name for p in profs if (out / p.name).exists()]
    if existing and not cfg.force:
        raise InputValidationError(f"Artifact folder(s) already exist: {', '.join(str(out / n) for n in existing)}.",
                                   "Pass --force (force=True) to replace them, or choose another --out.")
    log(f"reading {model}")
    source = read_source(model)
    log(f"source: {source.format}, inputs {[(s.name, s.shape) for s in source.inputs]}, "
        f"outputs {[(s.name, s.shape) for s in source.outputs]}")
    _check_streams(cfg.streams, source)
    static = {p.name: fix_shapes(source.inputs, p.artifact.batch_size, cfg.input_shapes, source.batch_axes,
                                 source.image_size) for p in profs}
    summaries: list[ProfileSummary] = []
    kinds_report: list[dict] = []
    with _locked(out, log), tempfile.TemporaryDirectory(prefix="edge-sdk-convert-") as tmp:
        root = Path(tmp)
        source, head, found = _without_detection_postprocess(source, cfg.head, root, log)
        # the head is checked against the outputs at the static input shape (an Ultralytics export
        # with dynamic height/width has [-1, 4 + C, -1] until the input is fixed)
        post = postprocess_for(*head, with_static_outputs(source, static[profs[0].name].shapes) if head[0] else source,
                               cfg.outputs, found)
        options: dict[str, Any] = {"validation_fn": cfg.validation_fn} if cfg.validation_fn is not None else {}
        if cfg.bake is not None:
            options["bake"] = cfg.bake
        if post:
            options["postprocess"] = post
        prepared: dict[str, Prepared] = {}
        for prof in profs:
            key = json.dumps([static[prof.name].shapes, prof.accuracy.holdout_fraction], sort_keys=True)
            if key not in prepared:
                prepared[key] = _prepare(source, static[prof.name], prof, cfg.calib, cfg.calib_count, cfg.preprocess,
                                         cfg.validation, cfg.outputs, root / f"prep{len(prepared)}", log, cfg.streams)
                kinds_report = acc.kinds_table(prepared[key].kinds)
            ctx = BuildContext(source=source, profile=prof, prep=prepared[key], out=out, scratch=root / prof.name,
                               force=cfg.force, allow_drop=cfg.allow_accuracy_drop, options=options, task=cfg.metric,
                               log=log, recovery=cfg.recovery)
            summaries.append(build_profile(ctx))
    summary = ConvertSummary(str(model), source.format, str(out), summaries, kinds_report)
    log("")
    for line in summary.table():
        log(line)
    _raise_if_failed(summary)
    return summary


def _materialize(data):
    """A path, ``"random"``, ``None`` or a dict as it is; any other iterable (a generator of feeds) as a list."""
    if data is None or isinstance(data, (str, Path, dict)):
        return data
    try:
        return list(data)
    except TypeError:
        raise CalibrationError(f"Calibration data of type {type(data).__name__} is not understood.",
                               "Pass a path, 'random', a dict of stacked arrays, or an iterable of {input: array} dicts.") from None


def _raise_if_failed(summary: ConvertSummary) -> None:
    failed_conv = [p for p in summary.profiles
                   if p.conversion_failed or any(o.status == "conversion_failed" for o in p.outcomes)]
    failed_gate = [p for p in summary.profiles if any(o.status == "gate_failed" for o in p.outcomes)]
    bugs = [(p.profile, p.error) for p in summary.profiles if p.bug] + \
        [(f"{p.profile} {o.format}", o.reason) for p in summary.profiles for o in p.outcomes if o.bug]
    if not failed_conv and not failed_gate:
        return
    published = [p.profile for p in summary.profiles if p.published]
    done = f" Published: {', '.join(published)}." if published else " Nothing was published."

    def what(p: ProfileSummary) -> str:
        bad = [o for o in p.outcomes if o.status in ("conversion_failed", "gate_failed")]
        return f"{p.profile}: " + ("; ".join(f"{o.format} {o.status.replace('_', ' ')}: "
                                             + (o.reason if o.status == "conversion_failed" else _first(o.reason))
                                             for o in bad) if bad else p.error)

    if bugs:
        exc: ConversionError = ConversionBugError(
            "edge-sdk failed in its own code for " + " | ".join(f"{w}: {why}" for w, why in bugs) + "." + done,
            "This is a bug in edge-sdk, not in your model or data: please report it with the line above. The other "
            "profiles and formats were still converted; the table above has their verdicts.")
    elif failed_conv:
        exc = ConversionError(
            "Conversion failed for " + " | ".join(what(p) for p in failed_conv + [q for q in failed_gate if q not in failed_conv])
            + "." + done, "Each failure names the step and op; other profiles and formats were still converted.")
    else:
        general = ("calibrate with more representative data, declare what outputs mean (--output NAME:KIND), or pass "
                   "--allow-accuracy-drop to keep the artifact (its manifest then records the failure). Rejected "
                   "candidates are kept under OUT/.rejected/ for inspection.")
        advice = " ".join(f"{p.profile} {o.format}: {o.advice}." for p in failed_gate for o in p.outcomes if o.advice)
        exc = AccuracyGateError("Accuracy gate failed for " + " | ".join(what(p) for p in failed_gate) + "." + done,
                                f"{advice} Otherwise: {general}" if advice else general[0].upper() + general[1:])
    exc.report = summary.to_dict()  # type: ignore[attr-defined]
    exc.summary = summary  # type: ignore[attr-defined]
    raise exc


def _without_detection_postprocess(source: SourceModel, head: tuple, root: Path, log) -> tuple[SourceModel, tuple, dict | None]:
    """A TFLite source ending in ``TFLite_Detection_PostProcess`` as the same model with the op's
    box decoding in builtin ops and its NMS left to a ``boxes-scores`` head with the op's
    thresholds (:func:`~.tflite_native.decode_detection_postprocess`); anything else unchanged.

    Returns:
        (the source to convert, the ``(head, labels)`` to record, the op's thresholds or None).

    Raises:
        InputValidationError: ``--head`` names another head for such a model.
    """
    if source.format != "tflite":
        return source, head, None
    from .tflite_native import DETECTION_POSTPROCESS, decode_detection_postprocess, fold_constants, used_ops

    data = Path(source.path).read_bytes()
    if f"CUSTOM:{DETECTION_POSTPROCESS}" not in used_ops(data):
        return source, head, None
    done = decode_detection_postprocess(fold_constants(data)[0])  # fp16/sparse anchors read as the runtime does
    if done is None:
        return source, head, None
    model, params = done
    given, labels = head
    if given is not None and str(given).partition(":")[0].strip().lower() != "boxes-scores":
        raise InputValidationError(
            f"--head {str(given)[:40]}: {source.path.name} ends in {DETECTION_POSTPROCESS}, whose outputs convert "
            "replaces by decoded boxes and class scores (the boxes-scores head).",
            "Leave --head out (or pass --head boxes-scores); --labels still names the classes.")
    path = root / f"{source.path.stem}.decoded.tflite"
    path.write_bytes(model)
    log(f"{DETECTION_POSTPROCESS} (anchors {params['anchors']}, classes {params['classes']}, "
        f"{'fast class-agnostic' if params['agnostic'] else 'per-class'} NMS, score >= {params['conf']:.3g}, "
        f"IoU {params['iou']:.3g}, at most {params['max_det']}) replaced: the artifacts output decoded_boxes "
        "[1, N, 4] (x1, y1, x2, y2 in input pixels) and class_scores [1, N, C], and the boxes-scores head "
        "recorded in the manifest does the op's NMS (infer_image().detections)")
    ins, outs = READERS.get("tflite")(path)
    cut = replace(source, path=path, outputs=outs, inputs=ins, origin=source.origin or source.path)
    thresholds = {k: params[k] for k in ("conf", "iou", "max_det", "agnostic")}
    return cut, ("boxes-scores", labels), thresholds


def _first(reason: str, n: int = 2) -> str:
    parts = [p for p in reason.split("; ") if p]
    return "; ".join(parts[:n]) + (f" (+{len(parts) - n} more)" if len(parts) > n else "")


def _prepare(source: SourceModel, shapes: StaticShapes, prof: Profile, calib, calib_count, spec, validation,
             declared: dict[str, OutputKind], folder: Path, log, streams: list[tuple[str, str]] = ()) -> Prepared:
    folder.mkdir(parents=True)
    log(f"static shapes: {shapes.shapes}" + (f" ({'; '.join(shapes.notes)})" if shapes.notes else ""))
    cs = load_calibration(calib, source.inputs, shapes.shapes, holdout_fraction=prof.accuracy.holdout_fraction,
                          count=calib_count, preprocess=spec, min_samples=prof.quantization.min_calibration_samples,
                          validation=validation, streams=streams)
    if streams:
        seq = cs.info["sequences"]
        log(f"calibration: {cs.kind}, {cs.info['calibration_samples']} sequences ({seq['calibration_steps']} steps) for "
            f"calibration, {cs.info['holdout_samples']} ({seq['holdout_steps']} steps) for the accuracy gate "
            f"({cs.info['holdout_source']})")
    else:
        log(f"calibration: {cs.kind}, {cs.info['calibration_samples']} samples for calibration, "
            f"{cs.info['holdout_samples']} for the accuracy gate ({cs.info['holdout_source']})")
    for w in cs.warnings:
        log(f"warning: {w}")
    tflite = _memo(lambda: _fold_tflite(source, folder / "float_folded.tflite", log)) if source.format == "tflite" else None
    onnx = _memo(lambda: _static_onnx(source, shapes, folder / "float_static.onnx", tflite, log))
    if source.format != "tflite":  # the float reference of ONNX/TF sources and the kinds read it
        onnx()
    if streams:
        log(f"running the float model over {len(cs.calib_sequences) + len(cs.holdout_sequences)} sequence(s), "
            f"state carried ({', '.join(f'{o} -> {i}' for o, i in streams)})")
        ref, runtime = acc.carried_float_outputs(source, onnx() if source.format == "onnx" else Path(), cs)
    else:
        log("running the float reference on the held-back samples")
        ref, runtime = acc.float_outputs(source, onnx() if source.format == "onnx" else Path(), cs.holdout)
    kinds = acc.infer_kinds(source.outputs, ref, _graph(source, onnx), declared, streams)
    for row in acc.kinds_table(kinds):
        log(f"output {row['output']}: {row['kind']} ({row['source']}: {row['reason']})")
    if cs.calibrated:  # what the held-back samples can show (data_checks)
        for w in (reference_warning(ref, cs.info["holdout_source"]), thin_data_warning(kinds, ref, prof.accuracy, cs.info)):
            if w:
                cs.warnings.append(w)
                log(f"warning: {w}")
    return Prepared(shapes, cs, ref, runtime, kinds, onnx, tflite)


def _memo(make: Callable[[], Path]) -> Callable[[], Path]:
    """Run ``make`` once, on first use; its result (or its ConversionError) is remembered."""
    state: dict[str, Any] = {}

    def get() -> Path:
        if "error" in state:
            raise state["error"]
        if "path" not in state:
            try:
                state["path"] = make()
            except ConversionError as exc:
                state["error"] = exc
                raise
        return state["path"]

    return get


def _fold_tflite(source: SourceModel, path: Path, log) -> Path:
    """The float TFLite every route reads: sparse/fp16 weights folded to dense constants, and
    MediaPipe's custom transposed convolution written as builtins (the source itself where neither
    applies)."""
    from .tflite_native import builtin_transpose_conv, fold_constants

    folded, counts = fold_constants(Path(source.path).read_bytes())
    folded, rewritten = builtin_transpose_conv(folded)
    if not counts and not rewritten:
        return Path(source.path)
    if counts:
        log("folded constant weights of the TFLite source: " + ", ".join(f"{n} x{c}" for n, c in counts.items()))
    if rewritten:
        log(f"rewrote MediaPipe's custom op Convolution2DTransposeBias x{rewritten} as TRANSPOSE_CONV + ADD "
            "(the same arithmetic, in ops OpenVINO, tf2onnx and the int8 quantizer read)")
    path = path.with_name(f"{Path(source.path).stem}.folded.tflite")
    path.write_bytes(folded)
    return path


def _static_onnx(source: SourceModel, shapes: StaticShapes, path: Path, tflite, log) -> Path:
    log("exporting the static float model (ONNX)")
    return to_static_onnx(source, shapes.shapes, path, tflite_path=_for_tf2onnx(tflite(), log) if tflite is not None else None)


def _for_tf2onnx(tflite_path: Path, log) -> Path:
    """The float TFLite tf2onnx reads: RELU_0_TO_1, which tf2onnx has no handler for (onnx2tf writes
    it for a hard sigmoid's clamp), as ``relu6(6x) / 6``, exact in float; the file itself otherwise."""
    from .tflite_native import relu_0_to_1_as_relu6

    model, n = relu_0_to_1_as_relu6(tflite_path.read_bytes())
    if not n:
        return tflite_path
    log(f"RELU_0_TO_1 x{n} as relu6(6x) / 6 for tf2onnx (which reads no RELU_0_TO_1)")
    out = tflite_path.with_name(f"{tflite_path.stem}.tf2onnx.tflite")
    out.write_bytes(model)
    return out


def _graph(source: SourceModel, onnx: Callable[[], Path]):
    from .graph import from_onnx_file, from_tflite

    try:
        if source.format == "tflite":
            return from_tflite(Path(source.path).read_bytes())
        return from_onnx_file(onnx())
    except Exception:  # noqa: BLE001 - the graph only refines the kinds; values still decide without it
        return None
