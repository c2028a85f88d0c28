"""A device app that embeds the edge-sdk runtime: load once, loop over inputs, strict mode.

    python examples/device_app.py ARTIFACT INPUT [INPUT ...] [--strict] [--allow-fallback] [--top-k 3]

Inputs are images (preprocessed exactly as the manifest records), ``.npy`` arrays, or ``-`` to
read one path per line from stdin (a camera pipeline would hand frames over instead).

How a device app should treat each error class:

* ``ManifestError`` / ``ModelLoadError`` at start-up: the artifact is incomplete, tampered or
  corrupt. Never run it; exit non-zero so the supervisor (systemd, a fleet agent) re-deploys.
* ``DelegateUnavailableError`` at start-up: the accelerator is missing (driver, permissions on
  ``/dev/apex_0``, the wrong ONNX Runtime build). In strict mode this is fatal: a silent CPU
  fallback would miss the latency budget. ``--allow-fallback`` retries once without strict and
  logs the truth (``model.backend``) instead.
* ``MissingDependencyError``: the runtime wheel is not installed: fatal, with the pip extra.
* ``InputValidationError`` per input: that frame is bad (wrong size, NaN, unreadable image).
  Log it and skip it; the model stays loaded and the loop goes on.
* Anything else from the runtime is a bug: log the traceback, and keep serving the next
  input unless errors keep coming.
"""

from __future__ import annotations

import argparse
import logging
import sys
import traceback
import warnings
from pathlib import Path

import numpy as np

import edge_sdk
from edge_sdk.errors import (DelegateUnavailableError, EdgeSDKError, InputValidationError, MissingDependencyError,
                             ModelLoadError)

log = logging.getLogger("device_app")
MAX_CONSECUTIVE_FAILURES = 5


def open_model(artifact: str, strict: bool, allow_fallback: bool):
    """Load the artifact once; returns the model or exits with a meaningful code."""
    try:
        return edge_sdk.load(artifact, strict=strict)
    except DelegateUnavailableError as exc:
        log.error("accelerator unavailable: %s (fix: %s)", exc.message, exc.hint)
        if not allow_fallback:
            sys.exit(exc.exit_code)
        log.warning("--allow-fallback: running without the accelerator; latency budgets may be missed")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = edge_sdk.load(artifact, strict=False)
        for w in caught:
            log.warning("%s", w.message)
        return model
    except (ModelLoadError, MissingDependencyError) as exc:  # ManifestError is a ModelLoadError
        log.error("cannot load %s: %s (%s)", artifact, exc.message, exc.hint or "")
        sys.exit(exc.exit_code)


def inputs_from(args: list[str]):
    for a in args:
        if a == "-":
            yield from (line.strip() for line in sys.stdin if line.strip())
        else:
            yield a


def run_one(model, item: str, top_k: int) -> str:
    """Infer one input and return a one-line summary."""
    path = Path(item)
    if path.suffix.lower() == ".npy":
        result = model.infer(np.load(path, allow_pickle=False))
    else:
        result = model.infer_image(path)
    name, out = next(iter(result.outputs.items()))
    scores = np.asarray(out).reshape(-1)
    best = np.argsort(-scores)[:top_k]
    classes = ", ".join(f"{int(i)}:{scores[i]:.3f}" for i in best)
    return f"{path.name}: {name} top-{top_k} [{classes}]  {result.timings['total']:.2f} ms on {result.delegate}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("artifact")
    ap.add_argument("inputs", nargs="+", help="images or .npy files; '-' reads paths from stdin")
    ap.add_argument("--strict", action="store_true", help="refuse to run without the profile's accelerator")
    ap.add_argument("--allow-fallback", action="store_true", help="in strict mode, fall back once and log it")
    ap.add_argument("--top-k", type=int, default=3)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")

    model = open_model(args.artifact, args.strict, args.allow_fallback)
    with model:
        log.info("loaded %s: profile %s on %s%s", args.artifact, model.profile, model.backend,
                 " (FALLBACK: " + "; ".join(model.selection.skipped) + ")" if model.fallback else "")
        done = skipped = failures = 0
        for item in inputs_from(args.inputs):
            try:
                print(run_one(model, item, args.top_k), flush=True)
                done += 1
                failures = 0
            except KeyboardInterrupt:
                log.info("interrupted after %d input(s)", done)
                return 130
            except InputValidationError as exc:
                log.warning("skipping %s: %s", item, exc.message)
                skipped += 1
            except EdgeSDKError as exc:
                log.error("%s: %s", item, exc)
                failures += 1
            except Exception:  # noqa: BLE001 - a bug must not take the device loop down at once
                log.error("unexpected error on %s:\n%s", item, traceback.format_exc())
                failures += 1
            if failures >= MAX_CONSECUTIVE_FAILURES:
                log.error("%d failures in a row; stopping", failures)
                return 70
    log.info("done: %d ok, %d skipped", done, skipped)
    return 0 if done or not skipped else 3


if __name__ == "__main__":
    sys.exit(main())
