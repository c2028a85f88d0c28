"""Calibration data: load it, check it against the static inputs, split off the gate's hold-out.

Accepted forms (see :func:`load_calibration`):

* a folder of images, decoded and preprocessed by :func:`edge_sdk.preprocess.apply`, the same
  function the runtime uses, so the device sees exactly what calibration saw;
* a ``.npy`` file (one input) or a ``.npz`` file (one array per input name);
* a folder of ``<input name>.npy`` files;
* a folder of per-sample ``.npz`` files (one sample each, arrays without the sample axis);
* in Python, any iterable of feed dicts ``{input: array}`` (one sample each), or one dict of
  stacked arrays ``{input: [N, ...]}`` (as in an ``.npz``);
* ``"random"``: uniform noise, for a smoke test only; the artifact is marked uncalibrated.

Array shapes, whatever the model's own axes are (``static`` is the input's static shape):

* ``[N, *static]``: a new leading sample axis (a state ``[2, 1, 128]`` is stacked ``[N, 2, 1, 128]``,
  a scalar ``[]`` is ``[N]``);
* ``[N, *static[1:]]``: the first axis is the batch, samples stacked along it (``[N*B, ...]`` for a
  batch of ``B``), as before;
* streams (``streams=[(output, input)]``): each sample is a sequence. A stepped input is
  ``[N, T, *static]`` (or ``[N, T, *static[1:]]`` for batch 1); an input that stays the same for the
  whole sequence is ``[N, *static]``; a state input may be omitted (zeros) or given as its initial
  value ``[N, *static]``. In a per-sample file or a feed dict the leading ``N`` is left out.

Integer inputs (token ids, masks, a sample rate) are fed as they are: they are never quantized.
Arrays are read with ``allow_pickle=False``: a calibration file can never run code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from edge_sdk import preprocess as pp
from edge_sdk.errors import CalibrationError, EdgeSDKError
from edge_sdk.manifest import TensorSpec

from .base import Feed
from .data_checks import check_samples
from .shapes import image_layout

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm"}
#: Samples generated for ``--calib random`` when no count is given.
RANDOM_DEFAULT_COUNT = 16
#: Steps of a random sequence (``--calib random`` with a stream).
RANDOM_STEPS = 4
SPLIT_SEED = 0
#: Steps of the gate's long stream (the held-back sequences chained, state never reset), at least.
LONG_STREAM_STEPS = 1000
#: ...unless its float outputs would take more memory than this (the gate keeps them and the
#: artifact's): a video model's per-frame maps. One pass over the held-back sequences always runs.
LONG_STREAM_BYTES = 512 << 20

Sequence = list[Feed]


@dataclass
class LongStream:
    """The held-back sequences chained into one stream, its state never reset, cycled to a length.

    A recurrent model's int8 state error can grow with every step it is carried: measured on Silero
    VAD (jetson-orin, the state rounded to int8 at every step), candidates that agreed with float on
    97% of decisions over the 60-step held-back sequences agreed on 39-44% from step 300 of a
    1200-step stream on. The gate runs this stream beside the sequences as given (:func:`..accuracy.evaluate`).

    Attributes:
        feeds: Every step's feed; the state inputs of step 0 start the stream, later steps' are
            replaced by the previous step's outputs.
        reference: The float model's outputs per step, its own state carried through the stream.
        sequences: Held-back sequences chained per pass.
        passes: Passes over them.
    """

    feeds: list[Feed]
    reference: list[dict[str, np.ndarray]]
    sequences: int
    passes: int

    def describe(self) -> dict[str, Any]:
        return {"steps": len(self.feeds), "sequences": self.sequences, "passes": self.passes,
                "state": "carried through every sequence, never reset"}


@dataclass
class CalibrationSet:
    """Loaded calibration data, split into calibration and hold-out samples.

    Attributes:
        calib: Feeds used for calibration (for a stream: every step of every calibration
            sequence, the state as the float model carried it, after :meth:`carry`).
        holdout: Feeds held back for the accuracy gate (for a stream: every step, in order).
        kind: ``images``, ``npy``, ``npz``, ``npy-folder``, ``npz-folder``, ``feeds`` or ``random``.
        calibrated: False for ``random``.
        preprocess: The spec images were turned into inputs with (images only).
        info: What goes into the manifest's ``calibration`` section.
        warnings: Things the user should know.
        streams: ``(output, input)`` pairs: the output at step t is the input at step t + 1.
        calib_sequences: Calibration sequences (streams only), the state of step 0 only.
        holdout_sequences: Hold-out sequences (streams only).
        long_stream: The gate's long stream (streams only, after :meth:`carry`), or None.
        long_stream_note: Why there is none, where there is none.
    """

    calib: list[Feed]
    holdout: list[Feed]
    kind: str
    calibrated: bool
    preprocess: pp.PreprocessSpec | None = None
    info: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    streams: list[tuple[str, str]] = field(default_factory=list)
    calib_sequences: list[Sequence] = field(default_factory=list)
    holdout_sequences: list[Sequence] = field(default_factory=list)
    long_stream: LongStream | None = None
    long_stream_note: str = ""

    @property
    def holdout_lengths(self) -> list[int]:
        """Steps per hold-out sequence (``holdout`` is their concatenation); ``[]`` without streams."""
        return [len(s) for s in self.holdout_sequences]

    def carry(self, run: Callable[[Feed], dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Run every sequence through ``run`` (the float model), carrying each state from step to step.

        Fills ``calib`` and ``holdout`` with every step's feed, its state input being what the float
        model produced at the step before, so int8 ranges and the gate see real states.

        Returns:
            The float outputs of every hold-out step, in ``holdout`` order (the gate's reference).
        """
        self.calib = [f for seq in self.calib_sequences for f, _ in run_sequence(run, seq, self.streams)]
        steps = [fo for seq in self.holdout_sequences for fo in run_sequence(run, seq, self.streams)]
        self.holdout = [f for f, _ in steps]
        per_step = sum(np.asarray(v).nbytes for v in steps[0][1].values()) if steps else 0
        self.long_stream, self.long_stream_note = self._long_stream(run, per_step)
        return [o for _, o in steps]

    def _long_stream(self, run: Callable[[Feed], dict[str, np.ndarray]],
                     step_bytes: int = 0) -> tuple[LongStream | None, str]:
        """The held-back sequences chained and cycled to :data:`LONG_STREAM_STEPS` (and to twice the
        longest; fewer where ``step_bytes`` of outputs per step would pass :data:`LONG_STREAM_BYTES`,
        never less than one pass), run through the float model; or None and why. Chained only where
        every sequence starts from the same state (a reset stream: zeros, a VAD's or a wake word's);
        sequences whose initial states differ (a decoder's, from an encoder) are separate streams."""
        seqs = self.holdout_sequences
        if not seqs or not self.streams:
            return None, ""
        states = [inp for _, inp in self.streams]
        first = seqs[0][0]
        if any(not np.array_equal(s[0][i], first[i]) for s in seqs[1:] for i in states):
            return None, ("the held-back sequences start from different states, so each is a stream of its own: "
                          "not chained")
        target = max(LONG_STREAM_STEPS, 2 * max(len(s) for s in seqs))
        if step_bytes:
            target = min(target, LONG_STREAM_BYTES // step_bytes)
        chain: list[Feed] = []
        passes = 0
        while len(chain) < target:
            for s in seqs:
                chain.extend(s)
            passes += 1
        steps = run_sequence(run, chain, self.streams)
        return LongStream([f for f, _ in steps], [o for _, o in steps], len(seqs), passes), ""


def run_sequence(run: Callable[[Feed], dict[str, np.ndarray]], sequence: Sequence,
                 streams: list[tuple[str, str]]) -> list[tuple[Feed, dict[str, np.ndarray]]]:
    """Run one sequence step by step, each state input fed from the previous step's output.

    Returns:
        ``(feed actually given, outputs)`` per step.
    """
    done: list[tuple[Feed, dict[str, np.ndarray]]] = []
    prev: dict[str, np.ndarray] | None = None
    for step in sequence:
        feed = dict(step)
        if prev is not None:
            for out, inp in streams:
                feed[inp] = np.asarray(prev[out], dtype=step[inp].dtype).reshape(step[inp].shape)
        prev = run(feed)
        done.append((feed, prev))
    return done


def default_preprocess(shape: list[int]) -> pp.PreprocessSpec:
    """A spec for an image input of ``shape``: layout from where the channels are, 0..1 scaling."""
    layout = image_layout(shape)
    if layout is None:
        raise CalibrationError(f"Cannot calibrate input of shape {shape} from images: it is not an image (N,C,H,W / N,H,W,C).",
                               "Pass .npy/.npz arrays instead of an image folder.")
    channels = shape[1] if layout == "NCHW" else shape[3]
    return pp.PreprocessSpec(layout=layout, color="GRAY" if channels == 1 else "RGB")


def _image_samples(folder: Path, inputs: list[TensorSpec], shapes: dict[str, list[int]],
                   spec: pp.PreprocessSpec | None) -> tuple[list[np.ndarray], pp.PreprocessSpec, str]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise CalibrationError(f"Calibration folder {folder} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))}), "
                               "no .npy and no .npz files.", "Put representative images (or <input>.npy arrays, "
                               "or one .npz per sample) in it.")
    if spec is not None and spec.input:
        name = spec.input
    elif len(inputs) == 1:
        name = inputs[0].name
    else:
        raise CalibrationError(
            f"An image folder can feed one input, but the model has {len(inputs)}: {[s.name for s in inputs]}.",
            "Pass a .npz with one array per input name, a folder of <input>.npy files or of per-sample .npz files.")
    if name not in shapes:
        raise CalibrationError(f"Preprocessing names input '{name}', which the model does not have.",
                               f"Inputs: {', '.join(shapes)}")
    try:
        spec = (spec or default_preprocess(shapes[name])).with_size_from_shape(shapes[name])
        spec = pp.PreprocessSpec(**{**spec.to_dict(), "input": name})
        spec = _pixels_for_uint8(spec, next((i.dtype for i in inputs if i.name == name), "float32"))
        arrays = [pp.apply(f, spec) for f in files]
    except CalibrationError:
        raise
    except EdgeSDKError as exc:
        raise CalibrationError(f"Calibration images in {folder}: {exc.message}", exc.hint) from None
    return arrays, spec, name


def _pixels_for_uint8(spec: pp.PreprocessSpec, dtype: str) -> pp.PreprocessSpec:
    """A model whose image input is uint8 (a float model that casts its pixels inside, as
    EfficientDet-Lite exports do) takes the pixels as they are: the spec made uint8 with scale 1.

    Raises:
        CalibrationError: the spec normalises with a mean or std, which a uint8 input cannot hold.
    """
    if dtype != "uint8" or spec.dtype == "uint8":
        return spec
    if any(m != 0 for m in spec.mean) or any(v != 1 for v in spec.std):
        raise CalibrationError(f"Input '{spec.input}' is uint8 (pixels 0..255), but the preprocessing subtracts a mean "
                               f"{spec.mean} and divides by a std {spec.std}.",
                               "Drop mean/std from --preprocess: the model normalises its pixels itself.")
    return pp.PreprocessSpec(**{**spec.to_dict(), "dtype": "uint8", "scale": 1.0})


def _load_array_file(path: Path) -> dict[str, np.ndarray] | np.ndarray:
    """One calibration array file, its headers checked before numpy allocates (:mod:`edge_sdk.arrayfile`)."""
    from edge_sdk.arrayfile import load_array_file

    return load_array_file(path, error=CalibrationError, what="calibration file")


def short_name(name: str) -> str:
    """The name a user knows a TF-exported tensor by: ``serving_default_image:0`` -> ``image``."""
    import re

    return re.sub(r"^serving_default_", "", re.sub(r":\d+$", "", name))


def _apply_short_names(arrays: dict[str, np.ndarray], names: list[str]) -> None:
    """Rename (in place) arrays given under an input's short name to the input's tensor name."""
    shorts = {}
    for n in names:
        shorts.setdefault(short_name(n), []).append(n)
    for key in [k for k in arrays if k not in names]:
        match = shorts.get(key, [])
        if len(match) == 1 and match[0] not in arrays:
            arrays[match[0]] = arrays.pop(key)


def _dims(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _accepted(want: list[int], stepped: bool, state: bool, per_sample: bool, batched: bool) -> list[str]:
    """The shapes an array for an input of static shape ``want`` may have (for error messages)."""
    n = [] if per_sample else ["N"]
    forms = []
    if stepped:
        forms.append(_dims(n + ["T", *want]))
        if want and want[0] == 1:
            forms.append(_dims(n + ["T", *want[1:]]))
    forms.append(_dims(n + list(want)) + (" (initial state)" if state else " (the same at every step)" if stepped else ""))
    if not stepped and not per_sample and want and (want[0] == 1 or batched):
        forms.append(_dims(["N" if want[0] == 1 else f"N*{want[0]}", *want[1:]]) + " (samples along the batch axis)")
    elif not stepped and per_sample and want and want[0] == 1:
        forms.append(_dims(want[1:]))
    return forms


def _normalize(arr: np.ndarray, spec: TensorSpec, want: list[int], where: str, stream: bool, state: bool,
               per_sample: bool) -> tuple[np.ndarray, str]:
    """``arr`` as ``[N, *want]`` (form ``sample``/``batch``) or ``[N, T, *want]`` (form ``steps``).

    ``per_sample``: ``arr`` has no leading sample axis (a per-sample file or a feed dict).
    Samples stacked along the first axis (form ``batch``) are taken for a batch of 1, or when the
    source's first dim is dynamic (a real batch axis); a static first dim such as the 2 layers of
    a state ``[2, batch, 128]`` is never taken for a batch.
    """
    batched = bool(spec.shape) and spec.shape[0] < 0
    if not isinstance(arr, np.ndarray):
        arr = np.asarray(arr, dtype=np.dtype(spec.dtype))  # a Python number or list in a feed dict
    if arr.dtype != np.dtype(spec.dtype):
        raise CalibrationError(f"{where}: array '{spec.name}' has dtype {arr.dtype}, the input wants {spec.dtype}.",
                               f"Cast it first, e.g. x.astype(numpy.{spec.dtype}).")
    a = arr[None] if per_sample else arr
    shape, w = list(a.shape), list(want)
    if shape[1:] == w:
        return a, "sample"
    if stream and not state:
        if a.ndim == len(w) + 2 and shape[2:] == w:
            return a, "steps"
        if w and w[0] == 1 and a.ndim == len(w) + 1 and shape[2:] == w[1:]:
            return a.reshape(shape[0], shape[1], *w), "steps"
    elif not stream and w and (w[0] == 1 or batched) and a.ndim == len(w) and shape[1:] == w[1:]:
        if per_sample and w[0] == 1:
            return a.reshape(1, *w), "sample"
        if not per_sample:
            return a, "batch"
    accepted = " or ".join(_accepted(w, stream and not state, state, per_sample, batched))
    hint = ("Add a leading sample axis before the input's own shape (numpy.stack of the samples); "
            "scalars become [N]." if not per_sample else "Give one sample per file/dict, without the sample axis.")
    raise CalibrationError(f"{where}: array '{spec.name}' has shape {_dims(arr.shape)}; expected {accepted} "
                           f"(the input's static shape is {_dims(w)}).", hint)


def _samples(arrays: dict[str, Any], inputs: list[TensorSpec], shapes: dict[str, list[int]], where: str,
             streams: list[tuple[str, str]], per_sample: bool = False) -> tuple[list, int]:
    """Check ``arrays`` against the inputs and cut them into samples.

    Returns:
        (samples, unit): a feed per sample, or a list of step feeds per sample with streams;
        ``unit`` is how many user samples one feed holds (the batch, when samples were stacked
        along the batch axis).
    """
    names = [s.name for s in inputs]
    _apply_short_names(arrays, names)
    states = {inp for _, inp in streams}
    missing, extra = sorted(set(names) - set(arrays) - states), sorted(set(arrays) - set(names))
    if missing or extra:
        raise CalibrationError(f"{where}: arrays {sorted(arrays)} do not match the model inputs {names}"
                               + (f" (missing {missing})" if missing else "") + (f" (unexpected {extra})" if extra else "") + ".",
                               "Name one array per model input, e.g. numpy.savez('calib.npz', **{'input': x}).")
    norm: dict[str, tuple[np.ndarray, str]] = {}
    for spec in inputs:
        if spec.name not in arrays:
            continue
        a, form = _normalize(arrays[spec.name], spec, shapes[spec.name], where, bool(streams), spec.name in states,
                             per_sample)
        check_finite(a, spec.name, where)
        norm[spec.name] = (a, form)
    unit = 1
    for name, (a, form) in list(norm.items()):  # samples stacked along the batch axis -> [N, *want]
        if form == "batch":
            b = shapes[name][0]
            n = a.shape[0] // b
            norm[name] = (a[:n * b].reshape(n, *shapes[name]), "sample")
            unit = max(unit, b)
    counts = {name: a.shape[0] for name, (a, _) in norm.items()}
    if len(set(counts.values())) > 1:
        raise CalibrationError(f"{where}: arrays have different sample counts ({counts}).",
                               "Give every input the same number of samples (the leading axis).")
    count = next(iter(counts.values()), 0)
    if not streams:
        feeds = [{name: _own(a[i]) for name, (a, _) in norm.items()} for i in range(count)]
        return feeds, unit
    stepped = {name: a for name, (a, form) in norm.items() if form == "steps"}
    if not stepped:
        raise CalibrationError(f"{where}: with a stream every sample is a sequence, but no array has a time axis.",
                               "Stack the stepped input as [N, T, *shape] (T steps per sequence).")
    lengths = {name: a.shape[1] for name, a in stepped.items()}
    if len(set(lengths.values())) > 1:
        raise CalibrationError(f"{where}: stepped arrays have different sequence lengths ({lengths}).")
    steps = next(iter(lengths.values()))
    seqs = []
    for i in range(count):
        seq = []
        for t in range(steps):
            feed = {}
            for spec in inputs:
                if spec.name in norm:
                    a, form = norm[spec.name]
                    feed[spec.name] = _own(a[i, t] if form == "steps" else a[i])
                else:  # a state nobody gave: zeros at the first step
                    feed[spec.name] = np.zeros(shapes[spec.name], np.dtype(spec.dtype))
            seq.append(feed)
        seqs.append(seq)
    return seqs, 1


def _own(x) -> np.ndarray:
    """A contiguous array of ``x``'s own shape (``numpy.ascontiguousarray`` turns a scalar into ``[1]``)."""
    return np.array(x, order="C", copy=True)


def check_finite(arr: np.ndarray, name: str, where: str) -> None:
    """Refuse NaN/Inf in calibration or validation data, before any quantizer sees it.

    One +Inf makes the MLIR quantizer of the TFLite route segfault, and NaN turns every range
    into NaN; the error names the file, the array, the first bad index and how many there are.

    Raises:
        CalibrationError: the array holds a non-finite value.
    """
    if arr.dtype.kind not in "fc":
        return
    finite = np.isfinite(arr)
    if finite.all():
        return
    bad = np.argwhere(~finite)
    first = tuple(int(i) for i in bad[0])
    raise CalibrationError(
        f"{where}: array '{name}' holds {len(bad)} non-finite value(s) ({arr[first]} at index {list(first)}, "
        f"sample {first[0]}).", "Fix or drop those samples: int8 calibration needs finite data.")


def _random(inputs, shapes, n: int, streams) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SPLIT_SEED)
    states = {inp for _, inp in streams}
    arrays = {}
    for s in inputs:
        if s.name in states:
            continue
        lead = [n, RANDOM_STEPS] if streams else [n]
        shape = lead + list(shapes[s.name])
        arrays[s.name] = (rng.uniform(0, 1, shape).astype(s.dtype) if np.dtype(s.dtype).kind == "f"
                          else np.zeros(shape, s.dtype))
    if streams and not arrays:
        raise CalibrationError("--calib random with a stream needs an input that is not a state.")
    return arrays


def _read(calib, inputs, shapes, preprocess, count, streams):
    """Read calibration data of any accepted form into samples (feeds, or sequences with streams)."""
    warnings: list[str] = []
    spec_used = None
    if isinstance(calib, str) and calib == "random":
        n = count or RANDOM_DEFAULT_COUNT
        samples, unit = _samples(_random(inputs, shapes, n, streams), inputs, shapes, "random", streams)
        warnings.append("calibrated on random data (--calib random): the int8 ranges and the accuracy numbers are not meaningful")
        return samples, "random", unit, spec_used, warnings
    if isinstance(calib, dict):  # {input: stacked array}, as in an .npz
        samples, unit = _samples(dict(calib), inputs, shapes, "calibration arrays", streams)
        return samples, "arrays", unit, spec_used, warnings
    if not isinstance(calib, (str, Path)):
        return _from_iterable(calib, inputs, shapes, streams) + (spec_used, warnings)
    path = Path(calib)
    if not path.exists():
        raise CalibrationError(f"Calibration data not found: {path}",
                               "Pass a folder of images, a .npy/.npz file, a folder of per-sample .npz files, "
                               "or --calib random for a smoke test.")
    if path.is_dir() and any(path.glob("*.npz")):
        samples: list = []
        for f in sorted(path.glob("*.npz")):
            arrays = _load_array_file(f)
            samples += _samples(arrays, inputs, shapes, str(f), streams, per_sample=True)[0]  # type: ignore[arg-type]
        return samples, "npz-folder", 1, spec_used, warnings
    if path.is_dir() and not any(path.glob("*.npy")):
        if streams:
            raise CalibrationError(f"{path}: an image folder cannot feed a stream.",
                                   "Pass a .npz with [N, T, ...] arrays or a folder of per-sequence .npz files.")
        images, spec_used, name = _image_samples(path, inputs, shapes, preprocess)
        if len(inputs) != 1:
            raise CalibrationError("Image calibration feeds one input; the model has several.")
        arrays, kind = {name: np.concatenate(images)}, "images"
    elif path.is_dir():
        arrays = {p.stem: _load_array_file(p) for p in sorted(path.glob("*.npy"))}
        for stem, arr in arrays.items():  # name the very file a bad value is in
            if isinstance(arr, np.ndarray):
                check_finite(arr, stem, str(path / f"{stem}.npy"))
        kind = "npy-folder"
    elif path.suffix.lower() == ".npz":
        arrays, kind = _load_array_file(path), "npz"
    elif path.suffix.lower() == ".npy":
        # A stream's state inputs start at zeros: a .npy can feed the one input that is left.
        fed = [s for s in inputs if s.name not in {inp for _, inp in streams}]
        if len(fed) != 1:
            raise CalibrationError(f"A single .npy file can feed one input; the model has {[s.name for s in fed]}"
                                   + (" besides its stream state" if len(fed) < len(inputs) else "") + ".",
                                   "Use a .npz with one array per input name.")
        arrays, kind = {fed[0].name: _load_array_file(path)}, "npy"
    else:
        raise CalibrationError(f"Unsupported calibration data {path}.",
                               "Pass a folder of images, a .npy or a .npz file, or a folder of per-sample .npz files.")
    samples, unit = _samples(arrays, inputs, shapes, str(path), streams)
    return samples, kind, unit, spec_used, warnings


def input_ranges(feeds: list[Feed], inputs: list[TensorSpec], skip: set[str]) -> dict[str, list[float]]:
    """``{input: [min, max]}`` of every float input over the calibration feeds (state inputs skipped)."""
    out: dict[str, list[float]] = {}
    for spec in inputs:
        if spec.name in skip or np.dtype(spec.dtype).kind != "f":
            continue
        arrays = [np.asarray(f[spec.name]) for f in feeds if spec.name in f]
        arrays = [a for a in arrays if a.size and a.dtype.kind == "f"]
        if arrays:
            lo, hi = min(float(np.nanmin(a)) for a in arrays), max(float(np.nanmax(a)) for a in arrays)
            if np.isfinite(lo) and np.isfinite(hi):
                out[spec.name] = [lo, hi]
    return out


def _from_iterable(items: Iterable, inputs, shapes, streams) -> tuple[list, str, int]:
    """Samples from a Python iterable of feed dicts (one sample each; for a stream, ``[T, ...]`` arrays)."""
    try:
        it = iter(items)
    except TypeError:
        raise CalibrationError(f"Calibration data of type {type(items).__name__} is not understood.",
                               "Pass a path, 'random', or an iterable of {input name: array} dicts.") from None
    samples: list = []
    for i, item in enumerate(it):
        if not isinstance(item, dict):
            raise CalibrationError(f"Calibration sample {i} is a {type(item).__name__}, not a dict of input arrays.",
                                   "Yield {input name: array} per sample.")
        samples += _samples(dict(item), inputs, shapes, f"calibration sample {i}", streams, per_sample=True)[0]
    return samples, "feeds", 1


def _describe(data) -> str:
    if isinstance(data, (str, Path)):
        return str(data)
    return "<dict of arrays>" if isinstance(data, dict) else f"<{type(data).__name__} of feed dicts>"


def load_calibration(calib, inputs: list[TensorSpec], shapes: dict[str, list[int]], *, holdout_fraction: float,
                     count: int | None = None, preprocess: pp.PreprocessSpec | None = None,
                     min_samples: int = 100, validation=None, streams=()) -> CalibrationSet:
    """Load calibration data and split it into calibration and hold-out samples.

    Args:
        calib: Path (image folder, ``.npy``, ``.npz``, folder of ``<input>.npy``, folder of
            per-sample ``.npz``), ``"random"``, an iterable of ``{input: array}`` dicts (one
            sample each), or a dict of stacked arrays ``{input: [N, ...]}``.
        inputs: The model's inputs (names, dtypes).
        shapes: Static shape per input.
        holdout_fraction: Part of the samples held back for the accuracy gate.
        count: Cap on the number of samples (sequences, with streams) used (``--calib-count``).
        preprocess: Preprocessing for images (default: from the input shape, scale 1/255).
        min_samples: Below this many calibration samples a warning says int8 may suffer.
        validation: Separate data for the accuracy gate (same forms as ``calib``, not ``random``).
            When given, nothing is held back from ``calib``: all of it calibrates.
        streams: ``(output, input)`` state pairs: each sample is a sequence (see the module doc);
            the split is by sequence, and :meth:`CalibrationSet.carry` fills in the states.

    Returns:
        The split :class:`CalibrationSet`.

    Raises:
        CalibrationError: missing, empty, corrupt, or mismatched data, naming the input, the
            shape given and the shapes accepted.
    """
    streams = [(str(o), str(i)) for o, i in streams]
    if count is not None and count < 2:
        raise CalibrationError(f"--calib-count {count} is too small: at least 2 samples are needed "
                               "(one to calibrate, one for the accuracy gate).")
    samples, kind, unit, spec_used, warnings = _read(calib, inputs, shapes, preprocess, count, streams)
    if spec_used is None and preprocess is not None:
        # Arrays were preprocessed by the user: record the spec they name so the runtime repeats it.
        spec_used = preprocess
    total = len(samples)
    if count is not None and count < total:
        warnings.append(f"using {count * unit} of {total * unit} calibration samples (--calib-count {count})")
        samples = samples[:count]
    if len(samples) < 2:
        raise CalibrationError(f"Calibration data has {len(samples)} usable sample(s); at least 2 are needed "
                               "(one to calibrate, one for the accuracy gate).", "Provide more samples (100+ is advised for int8).")
    if validation is not None:
        if isinstance(validation, str) and validation == "random":
            raise CalibrationError("Validation data cannot be 'random': the accuracy gate needs real samples.")
        hold, _, _, _, _ = _read(validation, inputs, shapes, spec_used or preprocess, None, streams)
        if not hold:
            raise CalibrationError(f"Validation data {_describe(validation)} has no usable sample.")
        cal, n_hold = samples, 0
    else:
        n_hold = min(len(samples) - 1, max(1, round(len(samples) * holdout_fraction)))
        order = np.random.default_rng(SPLIT_SEED).permutation(len(samples))
        hold_idx = set(order[:n_hold].tolist())
        cal = [f for i, f in enumerate(samples) if i not in hold_idx]
        hold = [f for i, f in enumerate(samples) if i in hold_idx]
    if kind != "random":  # data that cannot represent the model is refused (see data_checks)
        warnings += check_samples(samples, inputs, _describe(calib), streams=streams)
        if validation is not None:
            warnings += check_samples(hold, inputs, _describe(validation), streams=streams, what="validation")
    if kind != "random" and len(cal) < min_samples and not streams:
        held = f" (after holding back {n_hold} for the accuracy gate)" if n_hold else ""
        warnings.append(f"only {len(cal)} calibration sample(s){held}; "
                        f"{min_samples}+ representative samples are advised for int8")
    info: dict[str, Any] = {
        "source": "random" if kind == "random" else _describe(calib),
        "kind": kind,
        "calibrated": kind != "random",
        "samples_available": int(total * unit),
        "samples_used": int(len(samples) * unit),
        "calibration_samples": len(cal) * unit,
        "holdout_samples": len(hold) * unit,
        "holdout_fraction": holdout_fraction if validation is None else None,
        "holdout_source": "calibration split" if validation is None else _describe(validation),
        "split_seed": SPLIT_SEED,
        "calib_count": count,
    }
    if kind != "random":  # the device warns about (strict: refuses) inputs far outside these (RangeGuard)
        steps = [f for s in cal for f in s] if streams else cal
        info["input_ranges"] = input_ranges(steps, inputs, {inp for _, inp in streams})
    if streams:
        info["sequences"] = {"calibration_steps": sum(len(s) for s in cal), "holdout_steps": sum(len(s) for s in hold),
                             "state": "carried from the float model's previous step"}
        if sum(len(s) for s in cal) < min_samples:
            warnings.append(f"only {sum(len(s) for s in cal)} calibration step(s) in {len(cal)} sequence(s); "
                            f"{min_samples}+ representative steps are advised for int8")
        return CalibrationSet([f for s in cal for f in s], [f for s in hold for f in s], kind, kind != "random",
                              spec_used, info, warnings, streams, cal, hold)
    return CalibrationSet(cal, hold, kind, kind != "random", spec_used, info, warnings)
