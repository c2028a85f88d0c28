"""Conversion time per profile for the bundled digits model (each profile converted on its own)."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from _common import DIGITS, print_table, write_result

PROFILES = ["jetson-orin", "intel-cpu", "intel-npu", "arm-cpu", "coral-edgetpu"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="conversion.json")
    args = ap.parse_args()
    import edge_sdk
    from edge_sdk.preprocess import from_dict

    spec = from_dict(json.loads((DIGITS / "preprocess.json").read_text()))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for prof in PROFILES:
            t0 = time.perf_counter()
            edge_sdk.convert(str(DIGITS / "digits_cnn.onnx"), [prof], str(Path(tmp) / prof), calib=str(DIGITS / "calib"), validation=str(DIGITS / "val"),
                             preprocess=spec)
            dt = time.perf_counter() - t0
            man = edge_sdk.read_manifest(Path(tmp) / prof / prof)
            rows.append([prof, ", ".join(man.formats), f"{dt:.1f}"])
    data = write_result(args.json, "Conversion time per profile (digits CNN, 200 calibration images, this host)",
                        ["profile", "formats", "seconds"], rows,
                        ["each run includes reading the source, calibration, quantization and the accuracy gate"])
    print_table(data)


if __name__ == "__main__":
    main()
