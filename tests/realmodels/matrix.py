"""The practice-set conversion matrix: convert each real model for each profile, then compare the
gate's verdict with the task's verdict for every format, published or rejected.

Used by ``tests/realmodels/test_practice.py`` (once per test session) and by
``python tests/realmodels/matrix.py --write-docs`` to regenerate ``docs/accuracy.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import data as D  # noqa: E402
import tasks as T  # noqa: E402
from practice import fetch  # noqa: E402

ALL_PROFILES = ["intel-cpu", "jetson-orin", "arm-cpu", "coral-edgetpu"]


@dataclass
class Case:
    """One practice model, its data and its task check."""

    name: str
    model: str
    input: str
    make: Callable[[int, int], np.ndarray]
    task: Callable[[], Callable[[list[dict], list[dict]], T.TaskResult]]
    what: str
    profiles: list[str] = field(default_factory=lambda: list(ALL_PROFILES))
    n_calib: int = 100
    n_val: int = 40
    convert_args: dict[str, Any] = field(default_factory=dict)
    make_val: Callable[[], np.ndarray] | None = None  # the held-back set, when it must be chosen
    # A streamed model (--stream OUT:IN): samples are sequences, and the task check runs one long
    # unseen stream of ``stream_steps`` steps from ``make_stream`` through float and artifact alike,
    # each carrying its own state from zeros.
    stream: str | None = None
    make_stream: Callable[[], np.ndarray] | None = None


CASES = [
    Case("palm_detection_lite", "palm_detection_lite.tflite", "input_1", lambda n, s: D.hand_images(n, seed=s),
         lambda: T.palm_truth_task(D.hand_holdout()[1]),
         "BlazePalm detector, raw logits + box regressors; photos of real hands pasted on photos without hands, "
         "read against where the hand photo is", make_val=lambda: D.hand_holdout()[0]),
    Case("face_landmark", "face_landmark.tflite", "input_1", lambda n, s: D.face_crops(n, seed=s),
         lambda: T.face_landmark_task, "468 face landmarks + face flag logit; crops of a real photo"),
    Case("ch_PP-OCRv4_rec", "ch_PP-OCRv4_rec_infer.onnx", "x", lambda n, s: D.text_lines(n, seed=s)[0],
         lambda: T.ocr_task(T.ocr_charset(fetch("ch_PP-OCRv4_rec_infer.onnx")), D.text_lines(40, seed=2)[1]),
         "PP-OCRv4 text recogniser, per-step softmax (CTC); rendered text lines, read against their text "
         "with PaddleOCR's metric",
         convert_args={"input_shapes": ["x:1,3,48,320"]}),
    Case("openwakeword_embedding", "embedding_model.onnx", "input_1", lambda n, s: D.mel_windows(n, seed=s),
         lambda: T.embedding_task, "openWakeWord speech embedding (96-d); synthetic speech-like audio"),
    # Float TFLite sources for the TFLite and OpenVINO targets (no ONNX detour), as issue #12 asks.
    Case("iris_landmark", "iris_landmark.tflite", "input_1", lambda n, s: D.eye_crops(n, seed=s),
         lambda: T.iris_task, "MediaPipe iris + eye contour landmarks (float TFLite); crops of a real photo's eye",
         profiles=["intel-cpu", "arm-cpu", "coral-edgetpu"]),
    Case("openwakeword_embedding_tflite", "embedding_model.tflite", "input_1", lambda n, s: D.mel_windows(n, seed=s),
         lambda: T.embedding_task, "openWakeWord speech embedding as its float TFLite (signature input 'input_1')",
         profiles=["intel-cpu", "arm-cpu", "coral-edgetpu"]),
]


#: The front end of openWakeWord's pipeline (issue #18): audio -> melspectrogram -> embedding. Its
#: task is its consumer's (tasks.mel_task); the pipeline chains the int8 artifacts of both models.
MEL_CASE = Case("openwakeword_melspectrogram", "melspectrogram.onnx", "input", lambda n, s: D.audio_chunks(n, seed=s),
                lambda: T.mel_task(fetch("embedding_model.onnx")),
                "openWakeWord's log-mel front end (STFT as Conv1D, power, mel MatMul, log); speech-like audio, "
                "judged through the float embedding model",
                profiles=["intel-cpu", "jetson-orin", "arm-cpu"],
                convert_args={"input_shapes": [f"input:1,{D.MEL_SAMPLES}"]})
EMBEDDING_CASE = "openwakeword_embedding"


def _artifact_folder(out: Path, row: dict) -> Path:
    return out / row["profile"] if row["status"] in ("published", "kept") else out / ".rejected" / row["profile"]


def run_pipeline(root: Path, profiles: list[str] | None = None) -> dict[str, Any]:
    """Convert the melspectrogram model, then chain its int8 artifact into the embedding model's
    (converted by the ``openwakeword_embedding`` case under the same ``root``) for each profile and
    format, and compare with the float chain on held-back audio."""
    import warnings

    mel = run_case(MEL_CASE, root, profiles)
    emb = next(c for c in CASES if c.name == EMBEDDING_CASE)
    emb_out, mel_out = root / emb.name / "out", root / MEL_CASE.name / "out"
    emb_rows = {(r["profile"], r["format"]): r for r in json.loads((root / emb.name / "rows.json").read_text())}
    audio = np.load(root / MEL_CASE.name / "val.npz")[MEL_CASE.input]
    feeds = [{MEL_CASE.input: audio[i:i + 1]} for i in range(len(audio))]
    mel_float, emb_float = _float_runner(fetch(MEL_CASE.model)), _float_runner(fetch(emb.model))
    ref = [emb_float({emb.input: D.mel_to_window(next(iter(mel_float(f).values())))}) for f in feeds]
    rows = []
    for r in mel["rows"]:
        e = emb_rows.get((r["profile"], r["format"]))
        if r["status"] == "conversion_failed" or e is None or e["status"] == "conversion_failed":
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mels = _artifact_outputs(_artifact_folder(mel_out, r), r["format"], feeds, r["status"] == "gate_failed")
            embs = _artifact_outputs(_artifact_folder(emb_out, e), e["format"],
                                     [{emb.input: D.mel_to_window(next(iter(m.values())))} for m in mels],
                                     e["status"] == "gate_failed")
        verdict = T.embedding_task(ref, [dict(zip(ref[0], x.values())) for x in embs])
        rows.append({"profile": r["profile"], "format": r["format"], "mel": r["status"], "embedding": e["status"],
                     "published": r["status"] == "published" and e["status"] == "published",
                     "task_passed": verdict.passed, "borderline": verdict.borderline, "task": verdict.summary})
    return {"mel": mel, "rows": rows}


def _float_runner(model: Path):
    if model.suffix in (".keras", ".h5", ".hdf5"):
        from edge_sdk.converters.sources import keras_output_names, load_keras

        km = load_keras(model)
        knames = keras_output_names(km)

        def run_keras(feed):
            outs = km(*feed.values(), training=False)
            return {n: np.asarray(o) for n, o in zip(knames, outs if isinstance(outs, (list, tuple)) else [outs])}
        return run_keras
    if model.suffix == ".onnx":
        import onnxruntime as ort

        sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        return lambda feed: dict(zip(names, sess.run(None, feed)))
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(model))
    it.allocate_tensors()
    ins = {d["name"]: d["index"] for d in it.get_input_details()}

    def run(feed):
        for k, v in feed.items():
            it.set_tensor(ins[k], v)
        it.invoke()
        return {d["name"]: it.get_tensor(d["index"]).copy() for d in it.get_output_details()}
    return run


def _artifact_outputs(folder: Path, fmt: str, feeds: list[dict], unpublished: bool, stream: str | None = None) -> list[dict]:
    """The artifact's outputs on ``feeds``; with ``stream`` (``OUT:IN``) one stream through
    ``Model.stream()``, its state carried from the first feed's."""
    import edge_sdk
    from edge_sdk.converters.accuracy import gate_step
    from edge_sdk.manifest import read_manifest
    from edge_sdk.runtimes.select import manifest_profile

    m = read_manifest(folder, allow_unpublished=True)
    step = gate_step(manifest_profile(m, str(folder)), fmt)
    with edge_sdk.load(folder, backend=step.backend, device=step.accelerator, allow_unpublished=unpublished,
                       accept_failed_gate=True) as model:
        if stream:
            state = stream.split(":")[1]
            st = model.stream(initial={state: feeds[0][state]})
            return [{k: np.asarray(v) for k, v in st.step({k: v for k, v in f.items() if k != state}).items()}
                    for f in feeds]
        return [{k: np.asarray(v) for k, v in model.infer(f).outputs.items()} for f in feeds]


def run_case(case: Case, root: Path, profiles: list[str] | None = None, **extra) -> dict[str, Any]:
    """Convert ``case`` for its profiles into ``root/case.name`` and judge every format by task and gate."""
    import warnings

    import edge_sdk
    from edge_sdk.errors import ConversionError

    model = fetch(case.model)
    work = root / case.name
    work.mkdir(parents=True, exist_ok=True)
    calib = case.make(case.n_calib, 1)
    val = case.make_val() if case.make_val else case.make(case.n_val, 2)
    np.savez(work / "calib.npz", **{case.input: calib})
    np.savez(work / "val.npz", **{case.input: val})
    t0 = time.perf_counter()
    try:
        summary = edge_sdk.convert(model, profiles or case.profiles, work / "out", calib=work / "calib.npz",
                                   validation=work / "val.npz", force=True, progress=None,
                                   **({"stream": case.stream} if case.stream else {}), **{**case.convert_args, **extra})
    except ConversionError as exc:
        summary = getattr(exc, "summary", None)
        if summary is None:
            raise
    seconds = time.perf_counter() - t0
    from edge_sdk.converters.sources import read_source

    source = read_source(model)
    real_name = source.inputs[0].name  # the tensor's own name (serving_default_x:0 for TF exports)
    run = _float_runner(model)
    if case.stream:
        from edge_sdk.converters.calibration import run_sequence

        out_name, state_name = case.stream.split(":")
        spec = next(i for i in source.inputs if i.name == state_name)
        zeros = np.zeros([d if d > 0 else 1 for d in spec.shape], np.float32)
        feeds = [{real_name: x[None], state_name: zeros} for x in case.make_stream()]
        ref = [o for _, o in run_sequence(run, feeds, [(out_name, state_name)])]
    else:
        feeds = [{real_name: val[i:i + 1]} for i in range(len(val))]
        ref = [run(f) for f in feeds]
    task = case.task()
    rows = []
    for p in summary.profiles:
        for o in p.outcomes:
            row = {"model": case.name, "profile": p.profile, "format": o.format, "status": o.status,
                   "reason": o.reason, "figures": o.figures, "route": o.route, "int8_compute": o.int8_compute}
            if o.status != "conversion_failed":
                folder = Path(p.folder) if o.status in ("published", "kept") else Path(p.rejected)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    outs = _artifact_outputs(folder, o.format, feeds, unpublished=o.status == "gate_failed",
                                             stream=case.stream)
                names = list(ref[0])
                outs = [dict(zip(names, x.values())) if set(x) != set(names) else x for x in outs]
                verdict = task(ref, outs)
                floor = (o.int8_compute or {}).get("floor") or {}
                # gate_passed is the accuracy gate's verdict (what the task is compared with); an artifact
                # refused only because too little of it is int8 (int8_refused) passed it
                row.update(gate_passed=o.status == "published" or (floor.get("passed") is False and bool(floor.get("accuracy_passed"))),
                           int8_refused=floor.get("passed") is False, borderline=verdict.borderline,
                           task_passed=verdict.passed, task=verdict.summary, task_figures=verdict.figures,
                           **_costs(folder, o.format))
            rows.append(row)
    (work / "rows.json").write_text(json.dumps(rows, default=str))
    return {"case": case.name, "what": case.what, "seconds": round(seconds, 1), "rows": rows, "work": str(work),
            "kinds": summary.kinds, "profiles": [p.profile for p in summary.profiles]}


def run_all(cases: list[Case], root: Path) -> dict[str, dict[str, Any]]:
    """:func:`run_case` for each case, by name, each read from or written to the matrix cache
    (``cache.py``) as it finishes; without a cache each converts under ``root``."""
    return {case.name: run_cached(case, root) for case in cases}


def run_cached(case: Case, root: Path, profiles: list[str] | None = None) -> dict[str, Any]:
    """:func:`run_case`, from the matrix cache when nothing that decides it has changed."""
    import cache

    extra = {"profiles_asked": profiles} if profiles else None
    return cache.cached(case.name, cache.case_key(case, extra), lambda r: run_case(case, r, profiles), root)


def run_pipeline_cached(root: Path, profiles: list[str] | None = None) -> dict[str, Any]:
    """:func:`run_pipeline` through the cache: its key is both models' (the embedding case's
    conversion is the cached one, linked into the pipeline's root)."""
    import cache

    emb_case = next(c for c in CASES if c.name == EMBEDDING_CASE)
    emb = run_cached(emb_case, root, profiles)

    def run(r: Path) -> dict[str, Any]:
        link = r / EMBEDDING_CASE
        if Path(emb["work"]).resolve() != link.resolve():
            link.symlink_to(Path(emb["work"]).resolve(), target_is_directory=True)
        return run_pipeline(r, profiles)

    key = cache.key_of({"mel": cache.case_key(MEL_CASE), "embedding": cache.case_key(emb_case),
                        "profiles_asked": profiles})
    return cache.cached("pipeline", key, run, root)


def published_task_failures(rows: list[dict[str, Any]]) -> list[tuple]:
    """Published artifacts whose task check fails outright (borderline verdicts excepted)."""
    return [(r["profile"], r["format"], r["task"]) for r in rows
            if r["status"] == "published" and not r["task_passed"] and not r["borderline"]]


def _costs(folder: Path, fmt: str) -> dict[str, Any]:
    """Recipe, size, p50 and Edge TPU share of one format, from its manifest."""
    from edge_sdk.converters.recovery.candidates import reported_float_layers
    from edge_sdk.manifest import read_manifest

    m = read_manifest(folder, allow_unpublished=True)
    rec = (m.backend_options.get("recovery") or {}).get(fmt) or {}
    size = sum(a.size_bytes for a in m.artifacts if a.format == fmt and a.role in ("model", "weights"))
    out = {"recipe": (rec.get("recipe") or {}).get("name", "baseline"),
           # what the converter made float (an OpenVINO revert takes the ops sharing a quantizer too)
           "float_layers": len(set((rec.get("recipe") or {}).get("float_nodes", []))
                               | (reported_float_layers(m.backend_options) or set())),
           "compute_int8": (rec.get("compute_ops") or {}).get("int8_share"),
           "float_types": (rec.get("recipe") or {}).get("float_ops", []),
           "calibration": (rec.get("recipe") or {}).get("calibration", m.profile.spec["quantization"]["calibration_method"]),
           "recovery_s": rec.get("seconds"), "size_kb": round(size / 1024), "p50_ms": rec.get("p50_ms_after"),
           "p50_ms_before": rec.get("p50_ms_before"), "before": rec.get("before")}
    pre = m.backend_options.get("edgetpu_precheck")
    if fmt == "tflite-int8" and pre and m.profile.name.startswith("coral"):
        out["tpu_share"] = pre.get("tpu_fraction")
    return out


def host_line() -> str:
    """Where the figures come from: the gates run on this host (the CPU stands in for every device),
    and p50 and recovery times are its own."""
    from edge_sdk import hostinfo

    flags = set(hostinfo.cpu_flags())
    isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8") if f in flags]
    return (f"Measured on {hostinfo.cpu_model()} ({hostinfo.cpu_count()} cores; {', '.join(isa) or 'no AVX2'}"
            f"{'' if {'avx512_vnni', 'avx_vnni'} & flags else ': no VNNI, so x86 int8 products saturate int16 sums unless weights use half the int8 range'}). "
            "Gates run here stand in for the devices; p50 and recovery times are this host's and would differ on the "
            "device.")


def markdown(results: list[dict[str, Any]], title: str = "Accuracy on real models: the gate's verdict vs the task's verdict",
             command: str = "python tests/realmodels/matrix.py --write-docs") -> str:
    lines = [f"# {title}", "",
             f"Generated by `{command}` (the same matrix the `realmodels` tests "
             "run). Models come from registry wheels (`tests/realmodels/practice.py`, sha256-pinned); data is made by "
             "code (`tests/realmodels/data.py`). The *task* column decodes the outputs the model's own way "
             "(`tests/realmodels/tasks.py`) and compares float with int8; the *gate* column is what `edge-sdk convert` "
             "decided from the output kinds. They must agree; *borderline* marks a task figure within 3% of its own "
             "threshold, where the task check cannot tell pass from fail (one detection of 40 moves F1 by 2.5%).", "",
             host_line(), ""]
    for res in results:
        timing = f"Conversion of all profiles: {res['seconds']} s"
        if res.get("plain_seconds"):
            timing += (f" with recovery, {res['plain_seconds']} s without "
                       f"({res['seconds'] / max(res['plain_seconds'], 1e-9):.1f}x)")
        lines += [f"## {res['case']}", "", f"{res['what']}. {timing}.", "",
                  "Output kinds: " + "; ".join(f"`{k['output']}` {k['kind']} ({k['source']})" for k in res["kinds"]), "",
                  "| profile | format | gate | task | agree | recipe | size | task figures | gate figures / reason |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in res["rows"]:
            if r["status"] == "conversion_failed":
                lines.append(f"| {r['profile']} | {r['format']} | conversion failed | - | - | - | - | - | {r['reason'][:200]} |")
                continue
            agree = ("yes" if r["gate_passed"] == r["task_passed"] else "borderline" if r.get("borderline")
                     else "**NO**: gate passed a task failure" if r["gate_passed"] else "no: gate stricter")
            gate = ("pass, but not int8 (refused)" if r.get("int8_refused") and r["gate_passed"]
                    else "pass" if r["gate_passed"] else "FAIL")
            recipe = r.get("recipe", "baseline")
            if r.get("float_layers"):
                recipe += f", {r['float_layers']} layer(s) float"
            if r.get("compute_int8") is not None:
                recipe += f" (convolutions/matmuls int8: {r['compute_int8']:.0%})"
            if r.get("float_types") and not recipe.startswith("float op types"):
                recipe += f", float op types {', '.join(r['float_types'])}"
            if r.get("calibration") and r["calibration"] != "minmax":
                recipe += f", {r['calibration']} ranges"
            if r.get("recovery_s") is not None:
                recipe += f" ({r['recovery_s']} s)"
            if "tpu_share" in r:
                recipe += f"; Edge TPU share {r['tpu_share']:.0%}"
            size = f"{r.get('size_kb', '?')} KiB" + (f", p50 {r['p50_ms_before']} -> {r['p50_ms']} ms" if r.get("p50_ms") else "")
            lines.append(f"| {r['profile']} | {r['format']} | {gate} | {'pass' if r['task_passed'] else 'FAIL'} | {agree} "
                         f"| {recipe} | {size} | {r['task']} | {(r['reason'] or r['figures'])[:220]} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def pipeline_markdown(pipe: dict[str, Any]) -> str:
    lines = ["## Pipeline: audio -> melspectrogram -> embedding (int8 end to end)", "",
             "openWakeWord's two ONNX models chained as on the device: each profile's int8 melspectrogram artifact "
             "feeds its int8 embedding artifact (published or rejected alike), compared with the float chain on "
             "held-back speech-like audio. The melspectrogram's own verdicts are in its section above.", "",
             "| profile | format | melspectrogram | embedding | both published | chain task |", "|---|---|---|---|---|---|"]
    for r in pipe["rows"]:
        task = ("pass" if r["task_passed"] else "FAIL") + (" (borderline)" if r["borderline"] else "")
        lines.append(f"| {r['profile']} | {r['format']} | {r['mel']} | {r['embedding']} | "
                     f"{'yes' if r['published'] else 'no'} | {task}: {r['task']} |")
    return "\n".join(lines) + "\n"


#: Where a generated doc's hand-written part begins; ``--write-docs`` keeps everything from it on.
HAND_WRITTEN = "<!-- Hand-written from here on: `--write-docs` regenerates what is above and keeps this part. -->"


def write_doc(path: Path, generated: str) -> None:
    """Write the generated tables to ``path``, keeping the doc's hand-written part (from
    :data:`HAND_WRITTEN` on), which regenerating used to drop."""
    kept = ""
    if path.is_file():
        text = path.read_text()
        if HAND_WRITTEN in text:
            kept = "\n" + text[text.index(HAND_WRITTEN):]
    path.write_text(generated.rstrip("\n") + "\n" + kept)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=str(Path.home() / ".cache" / "edge-sdk-practice" / "matrix"))
    ap.add_argument("--case", action="append")
    ap.add_argument("--profile", action="append")
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--compare-plain", action="store_true", help="also time each case with recovery off")
    args = ap.parse_args()
    results = []
    for case in CASES:
        if args.case and case.name not in args.case:
            continue
        res = run_cached(case, Path(args.root), args.profile)
        if args.compare_plain:  # the same conversion without recovery, for the time ratio in the docs
            plain = run_case(case, Path(args.root) / "plain", args.profile, recover="off")
            res["plain_seconds"] = plain["seconds"]
        results.append(res)
        for r in res["rows"]:
            print(json.dumps({k: r.get(k) for k in ("model", "profile", "format", "status", "gate_passed", "task_passed", "task")}))
    pipe = None
    if not args.case or EMBEDDING_CASE in args.case or MEL_CASE.name in args.case:
        pipe = run_pipeline_cached(Path(args.root), args.profile)
        results.append(pipe["mel"])
        for r in pipe["rows"]:
            print(json.dumps(r))
    if args.json:
        Path(args.json).write_text(json.dumps({"cases": results, "pipeline": pipe}, indent=1, default=str))
    if args.write_docs:
        write_doc(HERE.parents[1] / "docs" / "accuracy.md", markdown(results) + "\n" + (pipeline_markdown(pipe) if pipe else ""))


if __name__ == "__main__":
    main()
