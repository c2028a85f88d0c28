"""Convert your own ONNX model and benchmark the result on this machine, in one go.

    python examples/convert_and_bench.py model.onnx --calib images/ [--val val_images/] \\
        [--profile intel-cpu --profile jetson ...] [--input-shape images:1,3,640,640] \\
        [--preprocess "size=640x640,layout=NCHW,scale=1/255"] [--out out/] [--runs 200]

It calls the same library the CLI does: ``edge_sdk.convert`` (static shapes, calibration, int8,
accuracy gate), then ``edge_sdk.benchmark`` on every profile folder this host runs natively (the
others are listed as skipped, with the reason), and prints the accuracy numbers and the latency
table. Errors are edge-sdk's own one-line messages; the exit code is the CLI's.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import edge_sdk  # noqa: E402
from edge_sdk.bench.report import to_markdown  # noqa: E402
from edge_sdk.errors import EdgeSDKError, exit_code_for  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Convert an ONNX model for device profiles and benchmark it here.")
    ap.add_argument("model")
    ap.add_argument("--profile", action="append", default=None, help="repeatable (default: intel-cpu)")
    ap.add_argument("--calib", required=True, help="image folder, .npy/.npz, or 'random'")
    ap.add_argument("--val", default=None, help="separate validation data for the accuracy gate")
    ap.add_argument("--input-shape", action="append", default=[], metavar="NAME:d0,d1,...")
    ap.add_argument("--preprocess", default=None)
    ap.add_argument("--out", default="out")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    try:
        summary = edge_sdk.convert(args.model, args.profile or ["intel-cpu"], args.out, calib=args.calib,
                                   validation=args.val, input_shapes=args.input_shape, preprocess=args.preprocess,
                                   force=args.force)
        for p in summary.profiles:
            print(f"{p.profile}: gate {p.gate} -> {p.folder}")
        report = edge_sdk.benchmark(args.out, runs=args.runs, warmup=20)
    except EdgeSDKError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {exc.hint}", file=sys.stderr)
        return exit_code_for(exc)
    print()
    print(to_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
