"""``edge-sdk explain``: which layers int8 hurts, for an artifact or a model.

* An artifact folder (published, or a rejected candidate under ``out/.rejected/``) or a convert
  output folder: prints the sensitivity report ``convert`` wrote beside it.
* A model file with ``--profile`` and ``--calib``: converts each format of the profile once
  (no recovery), ranks its layers by the error their int8 step adds, measures the gain of
  keeping each of the top ones float, and writes the report into ``--out``.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from .cli import cli, emit_json
from .errors import InputValidationError

REPORT_GLOB = "sensitivity.*.json"


def _reports(folder: Path) -> list[Path]:
    found = sorted(folder.glob(REPORT_GLOB))
    if not found:  # a convert output folder: its profiles (and rejected candidates)
        found = sorted(folder.glob(f"*/{REPORT_GLOB}")) + sorted(folder.glob(f".rejected/*/{REPORT_GLOB}"))
    return found


def _print(data: dict, top: int) -> None:
    verdict = "passes" if data["passed"] else "FAILS"
    click.echo(f"{data['profile']} / {data['format']}: {verdict} its gate with recipe '{data['chosen']}'"
               + (f" (float: {', '.join(data['float_nodes'])})" if data["float_nodes"] else ""))
    if not data["layers"]:
        click.echo("  no layer ranking (the format was not analysed)")
    for i, e in enumerate(data["layers"][:top], 1):
        gain = f"  gain alone float {e['gain']:+.3f}" if "gain" in e else ""
        click.echo(f"  {i:2d}. {e['name'][:70]:70s} {e['op']:18s} noise {e['added']:.4f}  output error {e['error']:.4f}{gain}")


@cli.command()
@click.argument("target", type=click.Path())
@click.option("--profile", "profiles", multiple=True, help="Profile to analyse a model file for; repeatable.")
@click.option("--calib", default=None, help="Calibration data (as for convert), needed for a model file.")
@click.option("--val", "validation", default=None, help="Separate data for the comparison (as for convert).")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME:d0,d1,...", help="Fix dynamic dims.")
@click.option("--preprocess", default=None, help="Image preprocessing (as for convert).")
@click.option("--output", "outputs", multiple=True, metavar="NAME:KIND[:OPTS]", help="What an output means (as for convert).")
@click.option("--stream", "streams", multiple=True, metavar="OUT:IN",
              help="Recurrent state fed back from step to step (as for convert); the data are then sequences.")
@click.option("--calib-method", type=click.Choice(["minmax", "percentile", "entropy"]), default=None,
              help="Activation range method to rank the layers on (as for convert).")
@click.option("--out", default=None, type=click.Path(file_okay=False),
              help="Where a model file's candidates and reports go (required for a model file).")
@click.option("--top", type=click.IntRange(min=1), default=15, show_default=True, help="Layers to print.")
@click.option("--json", "as_json", is_flag=True, help="Print the reports as JSON.")
def explain(target, profiles, calib, validation, input_shapes, preprocess, outputs, streams, calib_method, out, top,
            as_json):
    """Rank the layers int8 hurts most in TARGET (an artifact folder or a model file)."""
    path = Path(target)
    if path.is_dir() and not (path / "saved_model.pb").exists():
        reports = _reports(path)
        if not reports:
            raise InputValidationError(
                f"No sensitivity report in {path}: its formats passed their gate without recovery.",
                "Rank its layers anyway with: edge-sdk explain MODEL --profile P --calib DATA --out DIR")
    else:
        if not profiles or calib is None or out is None:
            raise InputValidationError("Explaining a model file needs --profile, --calib and --out.",
                                       "e.g. edge-sdk explain model.onnx --profile jetson --calib images/ --out explain/")
        from .converters.pipeline import convert as run_convert
        from .errors import ConversionError

        try:
            run_convert(target, list(profiles), out, calib=calib, validation=validation, input_shapes=list(input_shapes),
                        preprocess=preprocess, outputs=list(outputs), recover="explain", allow_accuracy_drop=True,
                        force=True, stream=list(streams) or None, calib_method=calib_method)
        except ConversionError as exc:
            if getattr(exc, "summary", None) is None:
                raise
        reports = _reports(Path(out))
    data = [json.loads(p.read_text(encoding="utf-8")) for p in reports]
    if as_json:
        emit_json(data)
        return
    for d, p in zip(data, reports):
        _print(d, top)
        click.echo(f"  full report: {p.with_suffix('.md')}")
