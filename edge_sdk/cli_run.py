"""``edge-sdk run``: load an artifact through the runtime facade and run one input.

Thin: the options become arguments of :func:`edge_sdk.load`; the input file becomes
``model.infer`` (``.npy`` / ``.npz``) or ``model.infer_image`` (any image Pillow reads). Prints
an output summary by the output's kind (top-k for class scores, points for landmarks, area for masks...), timings, backend and delegate, and says plainly
when the run fell back from the profile's accelerator. Exit codes are decided in
:func:`edge_sdk.cli.main`.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import click

from .cli import check_output_path, cli, emit_json, output_options, runtime_options, trust_options, write_json_out
from .errors import InputValidationError


def read_input(path: Path, input_names: list[str]):
    """``.npy`` -> one array; ``.npz`` -> {name: array}; anything else -> None (an image).

    Raises:
        InputValidationError: unreadable file, or ``.npz`` names that match no input.
    """
    import numpy as np

    suffix = path.suffix.lower()
    if suffix not in (".npy", ".npz"):
        return None
    from edge_sdk.arrayfile import load_array_file

    loaded = load_array_file(path, error=InputValidationError, what="--input file")
    if suffix == ".npy":
        return loaded
    arrays = loaded
    if len(arrays) == 1 and len(input_names) == 1 and input_names[0] not in arrays:
        return next(iter(arrays.values()))  # np.savez(file, x) names it arr_0
    return arrays


def sequence_steps(model, feed) -> list[dict] | None:
    """Cut a ``.npz`` for a streamed artifact into step feeds, or None when it is a single step.

    Each non-state input is ``[T, *shape]`` (``[T, *shape[1:]]`` at batch 1) when it changes per
    step, or its own ``shape`` when it stays the same; state inputs are left out (``Model.stream``
    carries them; a state given in the file is its initial value).

    Raises:
        InputValidationError: stepped arrays of different lengths, or an array that fits neither form.
    """
    import numpy as np

    states = {s.input for s in model.manifest.streams}
    if not states or not isinstance(feed, dict):
        return None
    specs = {t.name: t for t in model.inputs if t.name not in states}
    stepped, const = {}, {}
    for name, arr in feed.items():
        if name not in specs:
            continue
        shape = list(specs[name].shape)
        if list(arr.shape) == shape:
            const[name] = arr
        elif list(arr.shape[1:]) == shape:
            stepped[name] = arr
        elif shape and shape[0] == 1 and list(arr.shape[1:]) == shape[1:]:
            stepped[name] = arr.reshape(arr.shape[0], *shape)
        else:
            forms = [f"[T, {', '.join(map(str, shape))}]", str(shape)] + (
                [f"[T, {', '.join(map(str, shape[1:]))}]"] if shape and shape[0] == 1 else [])
            raise InputValidationError(f"Array '{name}' has shape {list(arr.shape)}; a sequence file for this stream "
                                       f"takes {' or '.join(forms)}.", "Stack the steps along a new first axis.")
    if not stepped:
        return None
    lengths = {k: v.shape[0] for k, v in stepped.items()}
    if len(set(lengths.values())) > 1:
        raise InputValidationError(f"Stepped arrays have different lengths: {lengths}.")
    steps = next(iter(lengths.values()))
    return [{**const, **{k: np.ascontiguousarray(v[t]) for k, v in stepped.items()}} for t in range(steps)]


@cli.command()
@click.argument("artifact", type=click.Path())
@click.option("--input", "input_path", required=True, type=click.Path(dir_okay=False),
              help="An image (preprocessed as recorded in the manifest), a .npy, or a .npz of named inputs; "
                   "for a streamed artifact a .npz of [T, ...] arrays runs T steps with the state carried.")
@runtime_options(what="run")
@click.option("--top-k", type=int, default=5, show_default=True, help="Classes to show for class-score outputs.")
@click.option("--raw", is_flag=True, help="Pass int8/uint8 tensors through without (de)quantizing.")
@click.option("--accept-failed-gate", is_flag=True,
              help="With --strict, still run an artifact whose accuracy gate failed (kept with --allow-accuracy-drop).")
@click.option("--no-crash-guard", is_flag=True, help="Skip the first-load trial in a child process (development only).")
@trust_options()
@output_options
def run(artifact: str, input_path: str, profile: str | None, backend: str | None, device: str | None,
        strict: bool, threads: int | None, top_k: int, raw: bool, accept_failed_gate: bool, no_crash_guard: bool,
        keys, allow_delegates, as_json: bool, json_out: str | None) -> None:
    """Run ARTIFACT once on --input and show outputs, timings, backend and delegate."""
    from .outputs import describe_lines, summarize_output
    from .runtimes.facade import load

    path = Path(input_path)
    if json_out:
        check_output_path(json_out, "--json-out")
    if not path.exists():
        raise InputValidationError(f"Input file not found: {path}", "Pass an image, a .npy or a .npz file.")
    from .arrayfile import regular_file

    regular_file(path, what="--input file", error=InputValidationError)  # a FIFO would block the reader
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load(artifact, profile=profile, backend=backend, device=device, strict=strict, num_threads=threads,
                     accept_failed_gate=accept_failed_gate, crash_guard=False if no_crash_guard else None,
                     trusted_keys=list(keys) if keys else None, allow_external_delegates=list(allow_delegates))
    with model:
        feed = read_input(path, [t.name for t in model.inputs])
        steps = sequence_steps(model, feed)
        stream_report = None
        if steps is not None:
            import numpy as np

            states = {s.input for s in model.manifest.streams}
            st = model.stream(initial={k: v for k, v in feed.items() if k in states})
            results = [st.step(step) for step in steps]
            result = results[-1]
            per_step = [r.timings["total"] for r in results]
            stream_report = {
                "steps": len(results), "state": [f"{s.output} -> {s.input}" for s in model.manifest.streams],
                "step_ms": {"p50": round(float(np.median(per_step)), 4), "max": round(float(max(per_step)), 4),
                            "first": round(per_step[0], 4)},
                "outputs_per_step": {n: [np.asarray(r.outputs[n]).ravel().round(6).tolist() for r in results]
                                     for n in result.outputs if n not in {s.output for s in model.manifest.streams}
                                     and np.asarray(result.outputs[n]).size <= 8},
            }
        else:
            result = model.infer_image(path) if feed is None else model.infer(feed, raw=raw)
        kinds = {t.name: t.kind for t in model.outputs}
        report = {
            "artifact": artifact, "input": str(path), "profile": result.profile, "backend": result.backend,
            "delegate": result.delegate, "fallback": result.fallback, "skipped": list(model.selection.skipped),
            "notes": list(model.selection.notes), "details": model.details, "model_sha256": result.model_sha256,
            "timings_ms": {k: round(v, 4) for k, v in result.timings.items()},
            "accuracy_gate": (model.manifest.accuracy or {}).get("gate", "unknown"),
            "outputs": [summarize_output(n, a, kinds.get(n), top_k) for n, a in result.outputs.items()],
        }
        if stream_report is not None:
            report["stream"] = stream_report
        from .detect import DETECTION_HEADS

        if feed is None and steps is None and model.head is not None and model.head.kind in DETECTION_HEADS:
            found = result.detections  # an image went through infer_image: the head decoded it
            report["detections"] = {"head": model.head.kind, "count": len(found),
                                    "items": [{"label": d.label, "score": round(d.score, 4),
                                               "box": [round(v, 1) for v in d.box]} for d in found]}
    if json_out:
        write_json_out(report, json_out)
    if as_json:
        emit_json(report)
        return
    for w in caught:
        click.echo(f"warning: {w.message}", err=True)
    for note in report["notes"]:
        click.echo(f"note: {note}", err=True)
    ran = f"{report['backend']} (delegate: {report['delegate']})"
    click.echo(f"profile {report['profile']} ran on {ran}" + ("  [FALLBACK]" if report["fallback"] else ""))
    if "stream" in report:
        s = report["stream"]
        click.echo(f"stream: {s['steps']} steps, state carried ({', '.join(s['state'])}); per step p50 "
                   f"{s['step_ms']['p50']:.3f} ms, max {s['step_ms']['max']:.3f} ms; outputs of the last step:")
        for name, values in s["outputs_per_step"].items():
            shown = ", ".join(f"{v[0]:.4g}" if len(v) == 1 else str(v) for v in values[:20])
            click.echo(f"  {name} per step: {shown}" + (f" ... ({len(values)} steps)" if len(values) > 20 else ""))
    for out in report["outputs"]:
        for line in describe_lines(out, indent=""):
            click.echo(("output " if not line.startswith(" ") else "") + line)
    if "detections" in report:
        d = report["detections"]
        click.echo(f"detections ({d['head']} head, in the image's pixels): {d['count']}")
        for item in d["items"][:20]:
            x1, y1, x2, y2 = item["box"]
            click.echo(f"  {item['label']:<16} {item['score']:.3f}  ({x1:.1f}, {y1:.1f}) - ({x2:.1f}, {y2:.1f})")
        if d["count"] > 20:
            click.echo(f"  ... {d['count'] - 20} more (--json lists them all)")
    click.echo("timings (ms): " + ", ".join(f"{k} {v:.3f}" for k, v in report["timings_ms"].items()))
