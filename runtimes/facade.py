"""The runtime facade: ``edge_sdk.load(path) -> Model``; ``model.infer(x) -> InferenceResult``.

The facade checks and converts; the backend runner (:mod:`edge_sdk.runtimes.base`) runs.

* Loading reads and hash-checks the manifest (:func:`edge_sdk.manifest.read_manifest`), parses
  the embedded profile, walks its runtime chain (:mod:`edge_sdk.runtimes.select`), validates the
  model file's container before native code sees it, and checks that the runtime's own view of
  the inputs/outputs agrees with the manifest (a mismatch is a ``ModelLoadError``: we never
  reshape or transpose silently).
* ``infer`` enforces the manifest's input contract (names, shapes, dtypes, finite values),
  quantizes float input of an int8 model with the manifest's scale/zero point and
  dequantizes int8 outputs unless ``raw=True``.

Thread safety: a :class:`Model` may be shared by threads. ONNX Runtime sessions and OpenVINO
compiled models (one infer request per thread) run concurrently; a LiteRT interpreter or a
TensorRT context runs one call at a time (the facade holds a per-model lock). Outputs are
fresh arrays owned by the caller. ``close()`` while another thread is inferring is not allowed.
"""

from __future__ import annotations

import dataclasses

import logging
import threading
import time
import warnings
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from edge_sdk.errors import DelegateUnavailableError, InputValidationError, ModelLoadError
from edge_sdk.manifest import Manifest, TensorSpec, format_io
from edge_sdk.profiles import RuntimeStep

from .base import Runner, RunnerConfig
from .select import BACKENDS, Selection, open_runner, resolve_folder
from .baked import baked_frames
from .tensors import InputPlan, OutputPlan, RangeGuard, plan_inputs, plan_outputs
from .watchdog import Watchdog

if TYPE_CHECKING:
    from edge_sdk.detect import Detection, Head, TopK
    from edge_sdk.preprocess import ImageTransform

    from .pipelining import FramePipeline

_perf = time.perf_counter
log = logging.getLogger("edge_sdk.runtime")


def model_closed() -> ModelLoadError:
    """The error for any use of a closed model."""
    return ModelLoadError("This model is closed.", "Load it again with edge_sdk.load().")


def _decoded(value, what: str, head: str, example: str):
    """A head's decoded result, or the error saying the model was loaded without that head."""
    if value is None:
        raise InputValidationError(f"This result has no {what}: the model was loaded without {head}.",
                                   f"Load it with edge_sdk.load(path, {example}) and use infer_image().")
    return value


@dataclass(slots=True, eq=False)
class InferenceResult(Mapping):
    """One inference; also a read-only mapping of output name -> array.

    ``result["probs"]``, ``"probs" in result``, ``list(result)``, ``result.keys()`` and
    ``dict(result)`` see the outputs; a wrong name raises ``KeyError`` listing the valid ones.

    Attributes:
        outputs: Output name (as in the manifest) -> numpy array.
        timings: Milliseconds: ``preprocess``, ``quantize``, ``inference``, ``dequantize``,
            ``postprocess`` (decoding a head), ``total``.
        backend: What ran, e.g. ``litert/xnnpack``.
        delegate: The delegate / provider / device that actually ran (partial delegation included).
        model_sha256: sha256 of the model file that ran.
        profile: The profile the artifact was converted for.
        fallback: True when the profile's preferred accelerator was skipped.
        transform: For :meth:`Model.infer_image`: how the original image maps to the model input
            (:class:`~edge_sdk.preprocess.ImageTransform`); None for :meth:`Model.infer`.
        labels: Class names the model was loaded with (``load(labels=...)``), or None.
    """

    outputs: dict[str, np.ndarray]
    timings: dict[str, float]
    backend: str
    delegate: str
    model_sha256: str
    profile: str
    fallback: bool = False
    transform: "ImageTransform | None" = None
    labels: "list[str] | None" = None
    _detections: "list[Detection] | None" = field(default=None, repr=False)
    _mask: "np.ndarray | None" = field(default=None, repr=False)

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self.outputs[name]
        except (KeyError, TypeError):
            raise KeyError(f"{name!r} is not an output of this model; outputs: {', '.join(map(repr, self.outputs))}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.outputs)

    def __len__(self) -> int:
        return len(self.outputs)

    def __contains__(self, name: object) -> bool:
        return name in self.outputs

    @property
    def detections(self) -> "list[Detection]":
        """Detected objects (label, score, box in the original frame's pixels), highest score first.

        Raises:
            InputValidationError: the model was loaded without a detector head.
        """
        return _decoded(self._detections, "detections", "a detector head", "head='yolov8', labels=[...]")

    @property
    def mask(self) -> np.ndarray:
        """The segmentation over the original frame, ``[height, width]``: class indices (uint8/int32)
        for a multi-class output, probabilities (float32) for a one-channel one.

        Raises:
            InputValidationError: the model was loaded without a segmentation head.
        """
        return _decoded(self._mask, "mask", "a segmentation head", "head='segmentation'")

    def top_k(self, k: int = 5, output: str | None = None) -> "list[TopK]":
        """The ``k`` highest class scores as ``(label, score, index)``, best first.

        Args:
            k: How many.
            output: Which output (default: the first).

        Raises:
            KeyError: unknown output name (the valid ones are listed).
            InputValidationError: ``k`` below 1.
        """
        from edge_sdk.detect import top_k

        arr = self[output] if output is not None else next(iter(self.outputs.values()))
        return top_k(arr, k, self.labels)


@dataclass(frozen=True)
class LoadOptions:
    """Options of :func:`load` that shape inference (typed, not an option dict)."""

    check_finite: bool = True
    num_threads: int | None = None
    cache_dir: Path | None = None
    strict: bool = False
    watchdog_s: float | None = None


class Model:
    """A loaded artifact. Create with :func:`load`; use as a context manager or call :meth:`close`.

    Attributes:
        backend: What actually runs, ``"<backend>/<delegate>"`` (e.g. ``litert/xnnpack``).
        manifest: The validated manifest.
        selection: How the runtime step was chosen: skipped steps with reasons, notes.
        model_sha256: sha256 of the model file that runs.
    """

    def __init__(self, folder: Path, manifest: Manifest, runner: Runner, selection: Selection,
                 model_sha256: str, options: LoadOptions):
        self.folder = folder
        self.manifest = manifest
        self.selection = selection
        self.model_sha256 = model_sha256
        self.options = options
        self._runner = runner
        self._lock = None if runner.thread_safe else threading.Lock()
        self._inputs, self._outputs = format_specs(manifest, selection.step.format)
        self._in: InputPlan = plan_inputs(self._inputs, runner.input_metadata, options.check_finite)
        self._out: OutputPlan = plan_outputs(self._outputs, runner.output_metadata)
        # inputs far outside the calibrated ranges: warned (strict: refused); see RangeGuard
        self._range = RangeGuard.from_manifest(manifest.calibration, [t.name for t in self._inputs], options.strict)
        # a runaway call (an input-dependent loop) is stopped where the runtime can be told to stop
        self._watch = (Watchdog(options.watchdog_s) if runner.stoppable and options.watchdog_s != 0 else None)
        self.backend = f"{runner.backend}/{runner.delegate}"
        self._preprocess = None
        # convert --bake-preprocess: this format's graph preprocesses; frames go in as they are
        self._baked = baked_frames(manifest, selection.step.format)
        if self._baked is not None:
            self._preprocess = (None, None, self._baked.name)
        self.head: "Head | None" = None
        self.labels: list[str] | None = None
        # pipelines open for close() to drain; submit()'s shared one per (color, fast); set by close()
        self._pipes: "set[FramePipeline]" = set()
        self._submit_pipes: "dict[tuple, FramePipeline]" = {}
        self._pipes_closed = False
        self._pool_lock = threading.Lock()
        # Fixed facts of every result, gathered once (the hot path does no attribute walks).
        self._facts = (self.backend, runner.delegate, model_sha256, selection.profile, selection.fallback)

    # -- what runs --------------------------------------------------------------------------
    @property
    def inputs(self) -> list[TensorSpec]:
        """Input specs from the manifest (name, shape, dtype, quantization) of the format that runs."""
        return list(self._inputs)

    @property
    def outputs(self) -> list[TensorSpec]:
        """Output specs from the manifest, of the format that runs."""
        return list(self._outputs)

    @property
    def profile(self) -> str:
        """The profile the artifact was converted for."""
        return self.selection.profile

    @property
    def delegate(self) -> str:
        """The delegate / execution provider / device that actually runs (partial delegation included)."""
        return self._runner.delegate

    @property
    def step(self) -> RuntimeStep:
        """The runtime step (backend, accelerator, format) that was chosen."""
        return self.selection.step

    @property
    def fallback(self) -> bool:
        """True when the profile's preferred accelerator was skipped (never for an explicit choice)."""
        return self.selection.fallback

    @property
    def details(self) -> dict[str, Any]:
        """Runtime facts: precision used, ops/layers delegated, providers in use."""
        return dict(self._runner.details)

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary of what was loaded and how it was chosen."""
        return {"folder": str(self.folder), "profile": self.profile, "backend": self.backend,
                "delegate": self.delegate, "format": self.step.format, "fallback": self.fallback,
                "explicit": self.selection.explicit, "skipped": list(self.selection.skipped),
                "notes": list(self.selection.notes), "details": self.details, "model_sha256": self.model_sha256,
                "preprocessing": self._baked.describe() if self._baked is not None else "on the host (edge_sdk.preprocess)"}

    # -- inference --------------------------------------------------------------------------
    def infer(self, inputs: Any, *, raw: bool = False) -> InferenceResult:
        """Run the model once.

        Args:
            inputs: ``{name: array}``, or one array for a one-input model. Shapes and dtypes must
                match the manifest; float input to a quantized input is quantized.
            raw: Pass int8/uint8 tensors through untouched: inputs must already be of the
                model's integer dtype and outputs stay quantized.

        Returns:
            An :class:`InferenceResult`.

        Raises:
            InputValidationError: missing/extra name, wrong shape, rank or dtype, NaN/Inf.
            ModelLoadError: the model was closed.
        """
        t0 = _perf()
        runner = self._runner
        if not runner.is_active:
            raise model_closed()
        if self._range is not None and not raw:
            self._range.check(inputs)
        feed, t_quant = self._in.convert(inputs, raw)
        t1 = _perf()
        if self._lock is None:
            try:
                outs = runner.infer_impl(feed) if self._watch is None else self._watched(runner, feed)
            except Exception as exc:
                if not runner.is_active:  # closed by another thread mid-call
                    raise ModelLoadError("This model was closed while inferring.", "Do not close a model other threads use.") from None
                raise self._refused(exc) from exc
        else:
            with self._lock:
                if not runner.is_active:  # closed by another thread while this one waited
                    raise model_closed()
                try:
                    outs = runner.infer_impl(feed) if self._watch is None else self._watched(runner, feed)
                except Exception as exc:
                    raise self._refused(exc) from exc
        t2 = _perf()
        outputs = self._out.convert(outs, raw)
        t3 = _perf()
        return InferenceResult(
            outputs, {"preprocess": 0.0, "quantize": t_quant * 1e3, "inference": (t2 - t1) * 1e3,
                      "dequantize": (t3 - t2) * 1e3, "total": (t3 - t0) * 1e3}, *self._facts, None, self.labels)

    def _watched(self, runner: Runner, feed: list) -> list:
        """One call under the watchdog; a call it stopped ends in an ``InputValidationError``."""
        watch, token = self._watch, [None]
        assert watch is not None

        def arm(stop):
            token[0] = watch.arm(stop)

        t0 = _perf()
        try:
            outs = runner.infer_stoppable(feed, arm)
        except Exception:
            if watch.disarm(token[0], _perf() - t0, ok=False):
                raise InputValidationError(
                    f"This inference ran past the {watch.limit():.3g} s watchdog and was stopped: the model runs far "
                    "longer on these inputs than it should (an input-dependent loop, or a runaway model).",
                    "Check the inputs' values; if the model legitimately takes longer, load(watchdog_s=SECONDS) "
                    "(0 turns the watchdog off).") from None
            raise
        watch.disarm(token[0], _perf() - t0, ok=True)
        return outs

    def _refused(self, exc: Exception) -> Exception:
        """A runtime's failure on inputs that passed the contract (shape, dtype, finite), as one
        ``InputValidationError``: what is left is the values, e.g. a token id outside an embedding."""
        if isinstance(exc, (InputValidationError, ModelLoadError)):
            return exc
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        ints = [t.name for t in self._inputs if np.dtype(t.dtype).kind in "iu" and t.quantization is None]
        hint = (f"The inputs have the right shapes and types, so check their values: integer inputs ({', '.join(ints)}) "
                "must be valid indices (token ids below the vocabulary size)." if ints else
                "The inputs have the right shapes and types; the runtime refused their values.")
        return InputValidationError(f"{self.backend} failed on these inputs: {first[:300]}", hint)

    def _spec(self):
        if self._preprocess is None:
            from edge_sdk import preprocess as pp

            spec = self.manifest.preprocessing.spec
            if not spec:
                raise InputValidationError("This artifact records no image preprocessing.",
                                           "Pass arrays to infer(), or convert with --preprocess so the device can repeat it.")
            parsed = pp.from_dict(spec, where="manifest preprocessing")
            self._preprocess = (pp, *pp.for_inputs(parsed, self._inputs))
        return self._preprocess

    def preprocess(self, image: Any, *, color: str = "rgb", fast: bool | float = False) -> np.ndarray:
        """Apply exactly the preprocessing recorded in the manifest to one image.

        Args:
            image: A path, bytes, a PIL image, or a uint8 numpy frame of any size in ``color``.
            color: The frame's colour format: ``rgb`` (also RGBA), ``bgr`` (OpenCV), ``gray``,
                ``nv12`` or ``yuv420`` (I420); ignored for paths, bytes and PIL images.
            fast: The faster resize (see :func:`edge_sdk.preprocess.apply_with_transform`).

        Returns:
            The model input array (batch of one), float as calibrated.

        Raises:
            InputValidationError: the manifest records no preprocessing, or the image is
                unreadable, empty, None, not an array, or not shaped/typed for ``color``.
        """
        return self.preprocess_with_transform(image, color=color, fast=fast)[0]

    def _image_feed(self, x: np.ndarray) -> Any:
        """The preprocessed image as ``infer``'s input: the array, or ``{image input: array}`` beside other inputs."""
        return {self._preprocess[2]: x} if len(self._inputs) > 1 else x

    def preprocess_with_transform(self, image: Any, *, color: str = "rgb",
                                  fast: bool | float = False) -> "tuple[np.ndarray, ImageTransform]":
        """:meth:`preprocess`, also returning the :class:`~edge_sdk.preprocess.ImageTransform`
        from the original image to the model input (to map boxes back). On an artifact whose graph
        preprocesses (``convert --bake-preprocess``) the input is the checked frame itself."""
        if self._baked is not None:
            return self._baked.feed(image, color)
        pp, spec, _ = self._spec()
        return pp.apply_with_transform(image, spec, fast=fast, color=color)

    def infer_image(self, image: Any, *, color: str = "rgb", fast: bool | float = False) -> InferenceResult:
        """Preprocess one image or camera frame as recorded in the manifest, infer it, decode the head.

        Args:
            image: A path, bytes, a PIL image, or a uint8 numpy frame of any size.
            color: The numpy frame's colour format: ``rgb``, ``bgr`` (OpenCV), ``gray``, ``nv12``
                or ``yuv420``.
            fast: The faster resize (PIL ``reducing_gap``), within a few grey levels of calibration's.

        Returns:
            An :class:`InferenceResult`; with ``load(head="yolov8")`` its ``detections`` are in the
            original frame's pixels.

        Raises:
            InputValidationError: a malformed frame (None, a list, wrong dtype/shape, empty), an
                unreadable image, or no preprocessing in the manifest.
        """
        t0 = _perf()
        x, transform = self.preprocess_with_transform(image, color=color, fast=fast)
        t1 = _perf()
        result = self.infer(self._image_feed(x))
        result.transform = transform
        result.timings["preprocess"] = (t1 - t0) * 1e3
        result.timings["total"] += (t1 - t0) * 1e3
        if self.head is not None and self.head.kind != "classifier":
            from edge_sdk.detect import apply_head

            t2 = _perf()
            apply_head(result, self.head, transform=transform, labels=self.labels)
            result.timings["postprocess"] = (_perf() - t2) * 1e3
            result.timings["total"] += result.timings["postprocess"]
        return result

    # -- pipelining -------------------------------------------------------------------------
    #: What the last :meth:`pipeline` ran on (``kind``, ``jobs``, ``made``, ``peak``); None before one.
    last_pipeline: "dict[str, Any] | None" = None

    def _frame_pipeline(self, jobs: int, color: str = "rgb", fast: bool | float = False,
                        name: str = "edge_sdk-pipeline") -> "FramePipeline":
        """A :class:`~edge_sdk.runtimes.pipelining.FramePipeline` registered for :meth:`close`."""
        from .pipelining import FramePipeline

        with self._pool_lock:
            if not self._runner.is_active or self._pipes_closed:
                raise model_closed()
            pipe = FramePipeline(self, jobs, color=color, fast=fast, name=name)
            self._pipes.add(pipe)
            return pipe

    def _drop_pipeline(self, pipe: "FramePipeline") -> None:
        pipe.close()
        with self._pool_lock:
            self._pipes.discard(pipe)

    def submit(self, frame: Any, *, color: str = "rgb", fast: bool | float = False) -> "Future[InferenceResult]":
        """Start :meth:`infer_image` on one frame; returns its ``concurrent.futures.Future``.

        Preprocessing runs on a worker thread, inference on the runtime's own async machinery
        (see :meth:`pipeline`), decoding on a worker thread again, so frames overlap. The frame
        must not be changed until its future is done. ``future.result()`` raises what
        ``infer_image`` would. Up to 2 inferences run at once per colour/resize setting.

        Raises:
            ModelLoadError: the model is closed.
        """
        key = (color, fast)
        with self._pool_lock:
            pipe = self._submit_pipes.get(key)
        if pipe is None:
            from edge_sdk.frames import check_color

            check_color(color)
            made = self._frame_pipeline(2, color, fast, "edge_sdk-submit")
            with self._pool_lock:
                pipe = self._submit_pipes.setdefault(key, made)
            if pipe is not made:  # another thread made one for this key first
                self._drop_pipeline(made)
        return pipe.submit(frame)

    def pipeline(self, frames: Iterable[Any], *, max_in_flight: int = 2, color: str = "rgb",
                 fast: bool | float = False) -> Iterator[InferenceResult]:
        """Infer a stream of frames with up to ``max_in_flight`` in progress; yields results in order.

        Inference runs on the runtime's own async machinery while other frames are preprocessed
        and decoded: ``max_in_flight`` OpenVINO infer requests, or LiteRT interpreters on the CPU
        (made from the verified model bytes, the thread budget split between them), each on its
        own worker thread; ONNX Runtime ``session.run`` on worker threads.
        A hardware LiteRT delegate and TensorRT run one inference at a time (pre/post-processing
        still overlap). Results equal a plain ``for f in frames: model.infer_image(f)`` loop.
        A frame that fails raises its error (e.g. ``InputValidationError``) when its turn comes;
        use :meth:`submit` to handle each frame yourself. Frames must not be changed until their
        result is yielded. Leaving the loop (``break``, an error, closing the generator) lets the
        frames in flight finish and releases the extra requests/interpreters. Afterwards
        ``model.last_pipeline`` says what ran: ``kind``, ``jobs``, ``made`` (requests or
        interpreters made for it) and ``peak`` (most inferences in progress at once).

        Args:
            frames: Any iterable (a generator reading a camera is read ahead by ``max_in_flight``).
            max_in_flight: Frames submitted and not yet yielded (1..64); about the number of cores.
            color: The frames' colour format (see :meth:`infer_image`).
            fast: The faster resize.

        Raises:
            InputValidationError: ``max_in_flight`` outside 1..64, or a malformed frame.
            ModelLoadError: the model is closed (also when closed by another call mid-stream).
        """
        if not isinstance(max_in_flight, int) or isinstance(max_in_flight, bool) or not 1 <= max_in_flight <= 64:
            raise InputValidationError(f"max_in_flight must be 1..64, got {max_in_flight!r}.",
                                       "2 overlaps preprocessing with inference; use about the number of cores.")
        from edge_sdk.frames import check_color

        check_color(color)
        pipe = self._frame_pipeline(max_in_flight, color, fast)
        self.last_pipeline = pipe.describe()
        pending: deque[Future[InferenceResult]] = deque()
        try:
            for frame in frames:
                pending.append(pipe.submit(frame))
                if len(pending) >= max_in_flight:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            self._drop_pipeline(pipe)
            self.last_pipeline = pipe.describe()  # with the peak of inferences in progress at once

    # -- streams ----------------------------------------------------------------------------
    def stream(self, initial: Mapping[str, Any] | None = None) -> "Stream":
        """A stepper that carries the manifest's recurrent state (``convert --stream OUT:IN``).

        Each :meth:`Stream.step` feeds the state inputs from the previous step's outputs, so the
        caller passes only the other inputs. A stream belongs to the thread that made it; make
        one per thread (the model itself may be shared).

        Args:
            initial: Starting value per state input (default: zeros).

        Raises:
            InputValidationError: the artifact declares no stream, or ``initial`` is wrong.
            ModelLoadError: the running format's I/O cannot carry the declared state.
        """
        return Stream(self, initial)

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        """Release the native model; safe to call twice, and from another thread (a call in
        flight finishes first; later calls raise ``ModelLoadError``). Frames in flight in
        :meth:`submit` and :meth:`pipeline` finish first; then the pipelines' extra infer
        requests / interpreters and worker threads are released, then the model."""
        with self._pool_lock:
            self._pipes_closed = True  # no pipeline opens from here on
            pipes, self._pipes = list(self._pipes), set()
            self._submit_pipes = {}
        for pipe in pipes:  # frames in flight finish; extra requests / interpreters are released
            pipe.close()
        if self._watch is not None:
            self._watch.close()
        if self._lock is None:
            self._runner.deactivate()
        else:
            with self._lock:
                self._runner.deactivate()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<edge_sdk.Model {self.profile} on {self.backend}{' (fallback)' if self.fallback else ''}>"


class Stream:
    """Recurrent state of one sequence over a loaded :class:`Model` (see :meth:`Model.stream`).

    Attributes:
        pairs: ``(output, input)`` per state, from the manifest's ``streams``.
        steps: Steps run since the last :meth:`reset`.
    """

    def __init__(self, model: Model, initial: Mapping[str, Any] | None = None):
        declared = [(s.output, s.input) for s in model.manifest.streams]
        if not declared:
            raise InputValidationError("This artifact declares no stream (no state is fed back).",
                                       "Call infer() per step, or convert with --stream OUTPUT:INPUT (e.g. stateN:state).")
        ins = {t.name: t for t in model._inputs}
        outs = {t.name: t for t in model._outputs}
        for out, inp in declared:
            if out not in outs or inp not in ins:
                raise ModelLoadError(f"The stream {out} -> {inp} names a tensor the {model.step.format} artifact does not have "
                                     f"(inputs {sorted(ins)}, outputs {sorted(outs)}).", "Convert the model again.")
            a, b = [d for d in outs[out].shape if d != 1], [d for d in ins[inp].shape if d != 1]
            if a != b:  # a reshape would silently reorder a transposed state
                raise ModelLoadError(f"The {model.step.format} artifact's state output '{out}' {outs[out].shape} cannot be fed "
                                     f"back as '{inp}' {ins[inp].shape} unchanged.", "Load another format of this artifact.")
        self.model = model
        self.pairs = declared
        self._specs = {inp: ins[inp] for _, inp in declared}
        self._owner = threading.get_ident()
        self._state: dict[str, np.ndarray] = {}
        self.steps = 0
        self.reset(initial)

    def _zeros(self, spec: TensorSpec) -> np.ndarray:
        return np.zeros(spec.shape, np.float32 if spec.quantization is not None else np.dtype(spec.dtype))

    def reset(self, initial: Mapping[str, Any] | None = None) -> None:
        """Start a new sequence: every state back to zeros, or to ``initial[input]`` where given.

        Raises:
            InputValidationError: ``initial`` names an input that is not a state, or has the wrong shape.
        """
        self._check_thread()
        initial = dict(initial or {})
        extra = sorted(set(initial) - set(self._specs))
        if extra:
            raise InputValidationError(f"Initial state for {extra}, which {'is' if len(extra) == 1 else 'are'} not a "
                                       f"state input.", f"State inputs: {', '.join(self._specs)}")
        state = {}
        for name, spec in self._specs.items():
            if name not in initial:
                state[name] = self._zeros(spec)
                continue
            arr = np.asarray(initial[name])
            if list(arr.shape) != list(spec.shape):
                raise InputValidationError(f"Initial state '{name}' has shape {list(arr.shape)}; the input is {list(spec.shape)}.",
                                           "Give the state input's own static shape.")
            state[name] = np.array(arr, copy=True)
        self._state = state
        self.steps = 0

    @property
    def state(self) -> dict[str, np.ndarray]:
        """A copy of the state that the next step feeds, per state input."""
        return {k: v.copy() for k, v in self._state.items()}

    def _check_thread(self) -> None:
        if threading.get_ident() != self._owner:
            raise InputValidationError("This stream belongs to another thread: its state is one sequence's.",
                                       "Call model.stream() in each thread that runs a sequence.")

    def step(self, inputs: Any) -> InferenceResult:
        """Run one step: ``inputs`` are the non-state inputs (``{name: array}``, or one array when
        there is one); the state comes from the previous step (zeros or ``initial`` at first).

        Returns:
            The step's :class:`InferenceResult` (state outputs included).

        Raises:
            InputValidationError: a state input is passed, or the inputs break the model's contract.
        """
        self._check_thread()
        if not isinstance(inputs, Mapping):
            others = [t.name for t in self.model._inputs if t.name not in self._specs]
            if len(others) != 1:
                raise InputValidationError(f"This stream takes {len(others)} inputs per step ({others}): pass a dict.")
            inputs = {others[0]: inputs}
        given = sorted(set(inputs) & set(self._specs))
        if given:
            raise InputValidationError(f"{given} {'is' if len(given) == 1 else 'are'} carried by the stream and cannot be passed to step().",
                                       "Use stream.reset(initial={...}) to set a state.")
        result = self.model.infer({**inputs, **self._state})
        for out, inp in self.pairs:
            spec = self._specs[inp]
            val = np.asarray(result.outputs[out]).reshape(spec.shape)
            if spec.quantization is None and val.dtype != np.dtype(spec.dtype):
                val = val.astype(spec.dtype)
            self._state[inp] = np.array(val, copy=True)
        self.steps += 1
        return result

    def run(self, steps: Iterable[Any]) -> list[InferenceResult]:
        """:meth:`step` over every item of ``steps``, in order."""
        return [self.step(x) for x in steps]

    def __repr__(self) -> str:
        return f"<edge_sdk.Stream {', '.join(f'{o}->{i}' for o, i in self.pairs)} after {self.steps} step(s)>"


def format_specs(manifest: Manifest, fmt: str) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The I/O specs of one artifact format (see :func:`edge_sdk.manifest.format_io`)."""
    return format_io(manifest, fmt)


def load(path: str | Path, *, profile: str | None = None, backend: str | None = None, device: str | None = None,
         strict: bool = False, num_threads: int | None = None, verify: bool = True, check_finite: bool = True,
         cache_dir: str | Path | None = None, accept_failed_gate: bool = False,
         allow_unpublished: bool = False, allow_external_delegates: list[str | Path] | None = None,
         trusted_keys: list | None = None, crash_guard: bool | None = None,
         verified_cache: str | Path | None = None, head: "str | Head | None" = None,
         labels: "Sequence[str] | str | Path | None" = None, watchdog_s: float | None = None) -> Model:
    """Load an artifact for inference on the best runtime step this device supports.

    Args:
        path: An artifact folder, or a ``convert`` output folder of per-profile folders.
        profile: Which profile to load from a multi-profile folder (name or alias).
        backend: Run this backend (``litert``, ``onnxruntime``, ``openvino``, ``tensorrt``), no fallback.
        device: Run this accelerator (delegate / execution provider / OpenVINO device), no fallback.
        strict: Refuse to fall back from the profile's native accelerator, and refuse (rather than
            warn about, :class:`~edge_sdk.InputRangeWarning`) inputs far outside the ranges the
            artifact was calibrated on.
        num_threads: CPU threads for the runtime.
        verify: Check every file's sha256 against the manifest (turn off only in development;
            always on when keys are trusted, since the signature covers the files by their hashes).
        check_finite: Reject NaN/Inf in float inputs.
        cache_dir: Writable folder for runtime caches (TensorRT engines); default ``~/.cache/edge-sdk``.
        accept_failed_gate: With ``strict=True``, still load an artifact whose accuracy gate failed
            (kept with ``--allow-accuracy-drop``). Without strict such an artifact loads with an
            :class:`AccuracyWarning`.
        allow_unpublished: Load a folder that is not a published artifact (a candidate the gate
            rejected, kept under ``out/.rejected/``) for inspection. Never in a device app.
        allow_external_delegates: Absolute paths of delegate libraries a profile chain may load
            (``external:/path.so``); added to the user config file's list. Any other library an
            artifact names is refused before anything is opened (:mod:`edge_sdk.trust`).
        trusted_keys: Ed25519 public keys (paths, PEM/OpenSSH bytes or key objects): the
            manifest must be signed by one of them (:mod:`edge_sdk.signing`). None: the user
            config file's keys, if any; ``[]``: no signature required.
        crash_guard: Load the model file in a child process first, so a file that crashes the
            native runtime raises ``ModelLoadError`` here instead (:mod:`edge_sdk.runtimes.sandbox`).
            Cached by sha256, so only the first load of an artifact pays it. None: on, unless
            ``EDGE_SDK_CRASH_GUARD=0`` or the user config file turns it off.
        verified_cache: The crash guard's cache folder (default ``~/.cache/edge-sdk/verified``).
        head: Decode the outputs in :meth:`Model.infer_image`: ``"yolov8"`` (packed ``[1, 4 + C, N]``
            boxes and scores), ``"yolov5"`` (``[1, N, 5 + C]`` with objectness) or
            ``"ssd-anchors:<spec>"`` (box regressions and scores against anchors, docs/heads.md) fill
            ``result.detections`` in frame pixels; ``"segmentation"`` fills ``result.mask``; or an
            :class:`edge_sdk.detect.Head` with thresholds; ``"classifier"`` only attaches labels.
        watchdog_s: Seconds one inference may run before it is stopped with an
            ``InputValidationError`` (where the runtime can be stopped: ONNX Runtime); None:
            automatic, at least 60 s or 1000x the model's fastest call; 0: off.
        labels: Class names (a list, or a text file with one per line) for detections and
            ``result.top_k()``.

    Returns:
        A loaded :class:`Model`.

    Raises:
        ModelLoadError: missing, tampered or corrupt artifact (``ManifestError`` for the manifest).
        DelegateUnavailableError: strict mode and the accelerator is unavailable, or an explicit
            backend/device cannot be used, or nothing in the chain works.
        InputValidationError: unknown backend, or a backend/device the artifact cannot run on.
        MissingDependencyError: the runtime for the chosen step is not installed.
    """
    from edge_sdk.detect import as_head, read_labels
    from edge_sdk.trust import Policy, check_artifact

    head_spec, label_list = as_head(head), read_labels(labels)  # argument errors before any loading
    if watchdog_s is not None and (isinstance(watchdog_s, bool) or not isinstance(watchdog_s, (int, float))
                                   or not (watchdog_s >= 0 and watchdog_s < float("inf"))):
        raise InputValidationError(f"watchdog_s must be a number of seconds >= 0 (0: off), got {watchdog_s!r}.",
                                   "e.g. load(path, watchdog_s=30).")
    policy = Policy.resolve(allow_external_delegates, trusted_keys)
    verify = verify or bool(policy.trusted_keys)  # a signature vouches for files only through their hashes

    def check(where: Path):  # the one door: load and `edge-sdk verify` run exactly this
        return check_artifact(where, verify=verify, policy=policy, allow_unpublished=allow_unpublished)

    folder, notes, checked = resolve_folder(path, profile, strict, check)
    checked = checked or check(folder)
    folder, manifest, prof = checked.folder, checked.manifest, checked.profile
    gate_verdict(manifest, folder, strict=strict and not accept_failed_gate)
    if profile is not None and not notes:
        from edge_sdk.profiles import resolve_profile

        want = profile if profile == manifest.profile.name else resolve_profile(profile).name
        if want != manifest.profile.name:
            raise ModelLoadError(f"{folder} was converted for profile '{manifest.profile.name}', not '{want}'.",
                                 "Load the artifact folder of that profile, or omit profile=.")
    cache = Path(cache_dir) if cache_dir is not None else Path.home() / ".cache" / "edge-sdk" / "engines"
    chosen: dict[str, str] = {}

    def make_config(step: RuntimeStep) -> RunnerConfig:
        art = BACKENDS.get(step.backend).model_artifact(manifest, step)
        chosen["sha"] = art.sha256
        files = {a.role: folder / a.path for a in manifest.artifacts if a.role != "model"}
        return RunnerConfig(model_path=folder / art.path, accelerator=step.accelerator, num_threads=num_threads,
                            files=files, backend_options=dict(manifest.backend_options), cache_dir=cache,
                            model_sha256=art.sha256, file_sha256={a.path: a.sha256 for a in manifest.artifacts},
                            check_sha256=verify)

    from .sandbox import guard_for

    guard = guard_for(manifest, enabled=crash_guard, cache=verified_cache, verify=verify)

    def guarded(step: RuntimeStep, config: RunnerConfig) -> None:
        chosen["guard"] = guard(step, config)

    try:
        runner, selection = open_runner(folder, manifest, prof, backend=backend, device=device, strict=strict,
                                        make_config=make_config, guard=guarded if guard is not None else None)
    except DelegateUnavailableError as exc:
        missing = _missing_runtime(prof, manifest, backend, device)
        if missing is not None:
            raise missing from exc
        raise
    if selection.fallback:
        log.warning("%s: running on %s/%s because %s", prof.name, selection.step.backend, runner.delegate,
                    "; ".join(selection.skipped))
    # "trial": loaded in a child process first; "cached": a passed trial of these exact files; "off".
    runner.details["crash_guard"] = chosen.get("guard", "off")
    selection.notes.extend(notes)
    for note in notes:
        log.info("%s", note)
    try:
        model = Model(folder, manifest, runner, selection, chosen["sha"],
                      LoadOptions(check_finite=check_finite, num_threads=num_threads, cache_dir=cache, strict=strict,
                                  watchdog_s=None if watchdog_s is None else float(watchdog_s)))
        post = manifest.postprocess  # recorded at conversion; load(head=, labels=) overrides it
        if head_spec is None and post.head and post.head != "classifier":
            head_spec = as_head(post.head, post.anchors or None, post.options or None)
            if post.output and head_spec is not None:
                head_spec = dataclasses.replace(head_spec, output=post.output)
        given = head is not None or labels is not None
        if label_list is None and post.labels:
            label_list = list(post.labels)
        if given:  # what the caller asked for must fit, now rather than at the first frame
            from edge_sdk.detect import check_fit
            from edge_sdk.manifest import image_input_size

            check_fit(head_spec, model._outputs, label_list, input_size=image_input_size(manifest))
        model.head, model.labels = head_spec, label_list
        return model
    except BaseException:
        runner.deactivate()
        raise


def _missing_runtime(prof, manifest: Manifest, backend: str | None, device: str | None):
    """A :class:`MissingDependencyError` when no step of the chain could run only because the
    runtime wheels are not installed (the README promises exit 8 naming the extra); else None."""
    from edge_sdk.errors import MissingDependencyError

    from edge_sdk._deps import available
    from edge_sdk.backends import backends

    from .select import candidate_steps

    try:
        steps, _ = candidate_steps(prof, manifest, backend, device)
    except Exception:  # noqa: BLE001 - the original error explains a bad choice better
        return None
    known = backends()
    wheels = []
    for step in steps:
        desc = known.get(step.backend)
        if desc is None:
            return None
        installed = any(available(mod) for mod, _ in desc.modules)
        if not desc.extra or " " in desc.extra:  # not a pip extra (JetPack's TensorRT)
            if not installed:
                continue  # the step after it (ONNX Runtime) names the wheel
            return None
        if installed:
            return None  # something else (a delegate, a device) was the reason
        wheels.append((desc.modules[0][0], desc.extra))
    if not wheels:
        return None
    module, extra = wheels[0]
    exc = MissingDependencyError(module, extra, f"running profile '{prof.name}' ({manifest.artifacts[0].format})")
    others = [e for _, e in dict.fromkeys(wheels)][1:]
    if others:
        exc.hint = f'{exc.hint} (or {" / ".join(f"edge-sdk[{e}]" for e in others)})'
    return exc


class AccuracyWarning(UserWarning):
    """The artifact failed its accuracy gate and was kept anyway (``--allow-accuracy-drop``)."""


def gate_verdict(manifest: Manifest, folder: Path, *, strict: bool) -> str | None:
    """Say so when the artifact's accuracy gate failed: a warning, or an error in strict mode.

    Returns:
        The warning text, or None when the gate did not fail.

    Raises:
        ModelLoadError: ``strict`` and the gate failed.
    """
    acc = manifest.accuracy or {}
    if acc.get("gate") != "failed":
        return None
    fails = [f"{fmt}: {f}" for fmt, r in (acc.get("formats") or {}).items() if isinstance(r, dict)
             for f in (r.get("failures") or [])[:2]]
    from edge_sdk.fsutil import unpublished_reason

    how = "is a rejected candidate" if unpublished_reason(folder) else "was kept with --allow-accuracy-drop"
    text = (f"{folder}: this artifact FAILED its accuracy gate and {how}"
            + (f" ({'; '.join(fails[:3])})" if fails else "") + "; its outputs may not do the model's task.")
    if strict:
        raise ModelLoadError(text, "Convert again with representative calibration data, or load with "
                                   "accept_failed_gate=True (--accept-failed-gate) if you accept it.")
    warnings.warn(text, AccuracyWarning, stacklevel=3)
    log.warning("%s", text)
    return text


__all__ = ["AccuracyWarning", "InferenceResult", "LoadOptions", "Model", "gate_verdict", "load"]
