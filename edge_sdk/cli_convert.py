"""``edge-sdk convert``: a thin command over :func:`edge_sdk.convert`.

Progress goes to stderr (one line per profile and stage); ``--json`` prints the summary on
stdout. Errors propagate to :func:`edge_sdk.cli.main`, which maps them to exit codes; a failed
accuracy gate with ``--json`` still prints the summary (with the numbers) before exiting.
"""

from __future__ import annotations

import click

from .cli import cli, emit_json
from .errors import ConversionError


@cli.command()
@click.argument("model", type=click.Path())
@click.option("--profile", "profiles", multiple=True, required=True, help="Device profile (name, alias or .toml); repeatable.")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Output folder; one subfolder per profile.")
@click.option("--calib", default=None, help="Calibration data: image folder, .npy, .npz, folder of <input>.npy, or 'random'.")
@click.option("--val", "validation", default=None,
              help="Separate data for the accuracy gate (same forms as --calib); default: 20% of --calib held back.")
@click.option("--calib-count", type=click.IntRange(min=1), default=None, help="Use at most N calibration samples.")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME:d0,d1,...",
              help="Fix an input's dynamic dims; repeatable.")
@click.option("--preprocess", default=None, help="Image preprocessing: key=value,... / JSON / .json file.")
@click.option("--output", "outputs", multiple=True, metavar="NAME:KIND[:OPTS]",
              help="What an output means, for the accuracy gate (scores, logits, boxes, landmarks, regression, heatmap, "
                   "mask, embedding, sequence, packed, detections, tensor); e.g. output0:packed:axis=1,boxes=0-4,scores=4-84 "
                   "or pose:landmarks:dims=5,coords=2 (values per point, those that place it) or Identity:landmarks:given=Identity_1 "
                   "(judged where that presence flag says yes). Repeatable.")
@click.option("--metric", default=None, metavar="FILE.py:FUNC|MODULE:FUNC",
              help="A task metric run beside the gate: f(float_outputs, int8_outputs, inputs) -> {'passed': bool, ...}.")
@click.option("--recover", type=click.Choice(["off", "calibration", "mixed"]), default="mixed", show_default=True,
              help="When a format fails its gate: try calibration alternatives, then keep the most sensitive layers float.")
@click.option("--recover-budget", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Wall time one format's recovery may take (default: twice its first candidate's work, "
                   "counted in CPU seconds, at least 45).")
@click.option("--float-nodes", "float_nodes", multiple=True, metavar="PATTERN",
              help="Keep these layers float: node names or op types, shell patterns. Repeatable.")
@click.option("--calib-method", type=click.Choice(["minmax", "percentile", "entropy"]), default=None,
              help="Activation range method instead of the profile's.")
@click.option("--stream", "streams", multiple=True, metavar="OUT:IN[,OUT:IN]",
              help="Recurrent state: output OUT is fed back as input IN at the next step (e.g. stateN:state); "
                   "calibration and the gate run each sample as a sequence. Repeatable.")
@click.option("--head", default=None, metavar="yolov8|yolov5|yolox[:SPEC]|ssd-anchors:SPEC|boxes-scores|end2end|classifier|segmentation",
              help="How the device decodes the outputs (recorded in the manifest: infer_image(...).detections or "
                   ".mask). SPEC: key=value;... or a JSON file (docs/heads.md). A TFLite model ending in "
                   "TFLite_Detection_PostProcess gets boxes-scores with the op's thresholds.")
@click.option("--labels", type=click.Path(dir_okay=False), default=None,
              help="Class names, one per line (recorded in the manifest; one per class of the head).")
@click.option("--bake-preprocess", default=None, metavar="HxW[,COLOR][,resize=auto|linear|pillow]",
              help="OpenVINO IR only: compile the preprocessing into the IR for camera frames of this size and "
                   "colour (bgr, rgb, gray, nv12, yuv420; default bgr), e.g. 480x640,bgr. Recorded in the manifest.")
@click.option("--min-int8-share", "min_int8_share", type=click.FloatRange(0, 1), default=None, metavar="SHARE",
              help="The share of compute (multiply-accumulates) an int8 artifact must run in int8 to be published "
                   "as int8, 0 to 1 (default: the profile's quantization.min_int8_share). None at all never is.")
@click.option("--allow-accuracy-drop", is_flag=True, help="Write the artifact even if the accuracy gate fails.")
@click.option("--force", is_flag=True, help="Replace existing artifact folders.")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary on stdout.")
@click.option("--fleet", "fleet_address", metavar="ADDRESS",
              help="Convert on the fleet's devices tagged `convert` instead of here (docs/fleet.md).")
@click.option("--tls", "tls_dir", type=click.Path(file_okay=False), help="With --fleet: the `edge-sdk fleet certs` folder.")
@click.option("--insecure", is_flag=True, help="With --fleet: allow plain TCP to a non-loopback scheduler.")
def convert(model, profiles, out, calib, validation, calib_count, input_shapes, preprocess, outputs, metric, recover,
            recover_budget, float_nodes, calib_method, streams, head, labels, bake_preprocess, min_int8_share,
            allow_accuracy_drop, force, as_json, fleet_address, tls_dir, insecure):
    """Convert MODEL (ONNX, SavedModel, .keras/.h5/.hdf5, float .tflite) into one artifact per --profile.

    Every profile is attempted; each format is judged by the accuracy gate and published on its
    own. The run ends with a profile x format table; it exits 6 if something could not be
    converted, 7 if a gate failed (the other profiles and formats are still published).
    """
    if fleet_address and (streams or head or labels or bake_preprocess or min_int8_share is not None):
        from .errors import InputValidationError

        given = [f for f, v in (("--stream", streams), ("--head", head), ("--labels", labels),
                                ("--bake-preprocess", bake_preprocess), ("--min-int8-share", min_int8_share is not None))
                 if v]
        raise InputValidationError(f"{' and '.join(given)} {'is' if len(given) == 1 else 'are'} not sent over the "
                                   "fleet yet.", "Convert such a model here, without --fleet.")
    if fleet_address:
        _fleet_convert(model, profiles, out, calib, validation, calib_count, input_shapes, preprocess, outputs, metric,
                       recover, recover_budget, float_nodes, calib_method, allow_accuracy_drop, force, as_json,
                       fleet_address, tls_dir, insecure)
        return
    if tls_dir or insecure:
        from .errors import InputValidationError

        raise InputValidationError("--tls and --insecure only apply with --fleet ADDRESS.")
    from .converters.pipeline import convert as run_convert

    try:
        summary = run_convert(model, list(profiles), out, calib=calib, validation=validation, calib_count=calib_count,
                              input_shapes=list(input_shapes), preprocess=preprocess, outputs=list(outputs),
                              metric=metric, recover=recover, recover_budget=recover_budget,
                              float_nodes=list(float_nodes), calib_method=calib_method, stream=list(streams),
                              head=head, labels=labels, bake_preprocess=bake_preprocess, min_int8_share=min_int8_share,
                              allow_accuracy_drop=allow_accuracy_drop, force=force)
    except Exception as exc:
        report = getattr(exc, "report", None)
        if as_json:  # the summary is printed whatever ended the run: a refusal at read time has no profiles
            emit_json(json_summary(report or {"source": str(model), "source_format": "", "out": str(out),
                                              "profiles": [], "kinds": [], "ok": False}, exc))
        elif report and isinstance(exc, ConversionError):
            _print_summary(getattr(exc, "summary"))
        raise
    if as_json:
        emit_json(json_summary(summary.to_dict(), None))
        return
    _print_summary(summary)


def json_summary(report: dict, exc: BaseException | None) -> dict:
    """``convert --json``'s summary with how the run ended: ``exit_code`` (0 when every format was
    published) and ``error`` (``type``, ``message``, ``hint``; null on success), the same fields
    for a refusal before any profile ran, a gate or conversion failure, and a bug in edge-sdk."""
    from .errors import EdgeSDKError, describe_bug, exit_code_for

    if exc is None:
        return {**report, "exit_code": 0, "error": None}
    if isinstance(exc, EdgeSDKError):
        error = {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint}
    else:
        error = {"type": "InternalError", "message": describe_bug(exc, "converting"),
                 "hint": "This is a bug in edge-sdk: please report it with this message (--debug prints the trace)."}
    return {**report, "exit_code": exit_code_for(exc), "error": error}


def _print_summary(summary) -> None:
    for p in summary.profiles:
        if p.published:
            click.echo(f"{p.profile}: {p.folder} (gate {p.gate}; {', '.join(p.files)})")
        else:
            click.echo(f"{p.profile}: not written" + (f" ({p.error})" if p.error else ""))


def _fleet_convert(model, profiles, out, calib, validation, calib_count, input_shapes, preprocess, outputs, metric,
                   recover, recover_budget, float_nodes, calib_method, allow_accuracy_drop, force, as_json,
                   address, tls_dir, insecure) -> None:
    """``convert --fleet``: the same options, run on the fleet's `convert` devices (edge_sdk.fleet.convert)."""
    from .errors import InputValidationError
    from .fleet.conversion import convert as fleet_convert, raise_if_failed

    if metric:
        raise InputValidationError("--metric is not supported with --fleet (it would send code to the devices).",
                                   "Run the conversion with --metric locally.")
    summary, failed = fleet_convert(model, list(profiles), out, address, tls=tls_dir, insecure=insecure, calib=calib,
                                    validation=validation, calib_count=calib_count, input_shapes=list(input_shapes),
                                    preprocess=preprocess, outputs=list(outputs), recover=recover,
                                    recover_budget=recover_budget, float_nodes=list(float_nodes),
                                    calib_method=calib_method, allow_accuracy_drop=allow_accuracy_drop, force=force,
                                    progress=lambda line: click.echo(line, err=True))
    if as_json:
        emit_json({**summary.to_dict(), "fleet_failed": failed})
    else:
        for line in summary.table():
            click.echo(line, err=True)
        _print_summary(summary)
    raise_if_failed(summary, failed)
