"""The contract between the conversion pipeline and the per-format converters.

The pipeline (``pipeline.py``) reads the source model, fixes static shapes, loads and splits
the calibration data, and then, for each profile and each of its formats, calls the format's
``convert(job) -> FormatResult`` from :data:`FORMATS`. A format converter writes its files into
``job.workdir`` (the staging folder of the profile, published atomically by the pipeline) and
intermediates into ``job.scratch`` (never published). The pipeline hashes the files, writes the
manifest and runs the accuracy gate. Format converters never write manifests themselves.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np

from edge_sdk.errors import ConversionError
from edge_sdk.manifest import TensorSpec
from edge_sdk.preprocess import PreprocessSpec
from edge_sdk.profiles import Profile
from edge_sdk.registry import Registry

SourceFormat = Literal["onnx", "savedmodel", "keras", "tflite"]
Feed = dict[str, np.ndarray]


def cpu_seconds() -> float:
    """CPU time of this process (every thread) and of the children it waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def waiting_seconds() -> float:
    """Time this process's main thread has spent runnable but waiting for a CPU (Linux's
    ``/proc/self/schedstat``, second field; 0.0 where the kernel does not say): what other work on a
    busy machine added to this process's wall time."""
    try:
        with open("/proc/self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def reuse(job: "ConvertJob", what: str, cost: dict[str, float]) -> None:
    """Record that ``job`` reused work another profile did (``cost``: its ``seconds`` and
    ``cpu_s``). Recovery's default budget counts it as the baseline's own, so that a profile's
    search does not shrink because another profile converted first."""
    credit = job.cache.setdefault("reused", {"what": [], "seconds": 0.0, "cpu_s": 0.0})
    credit["what"].append(what)
    credit["seconds"] += cost["seconds"]
    credit["cpu_s"] += cost["cpu_s"]


@dataclass
class SourceModel:
    """The model the user gave us.

    ``inputs``/``outputs`` carry the source's own shapes; dynamic dims are ``-1``.
    """

    path: Path
    format: SourceFormat
    sha256: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    #: Input name -> axes other than 0 that carry the batch (an ONNX dim named like some input's
    #: dynamic dim 0, e.g. ``state [2, batch, 128]`` beside ``input [batch, 512]``).
    batch_axes: dict[str, list[int]] = field(default_factory=dict)
    #: The file the user gave, where ``path`` is a rewrite of it made for the conversion (a TFLite
    #: source whose ``TFLite_Detection_PostProcess`` was replaced); None: ``path`` is that file.
    origin: Path | None = None
    #: ``(height, width)`` the model's metadata records as its image size (ONNX ``imgsz``, as
    #: Ultralytics exports write it): suggested when an input's size is left open, never applied.
    image_size: tuple[int, int] | None = None
    #: Op type -> count of the ops only a quantized ONNX model has (``sources.QUANTIZED_OPS``):
    #: the int8 formats refuse such a source, naming them.
    quantized_ops: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Recipe:
    """How one candidate artifact is quantized (the recovery loop varies it; the manifest records it).

    Attributes:
        calibration: Activation range method: ``minmax``, ``percentile`` or ``entropy`` (as the
            format's toolchain offers it; ``None``: the profile's ``calibration_method``).
        float_nodes: Layers kept in float, by the format's own node names (ONNX node names,
            OpenVINO op names, TFLite op output tensor names).
        float_ops: Op types kept in float (``Softmax``, ``MEAN``...).
        options: Toolchain extras as (key, value) pairs, e.g. ``("bias_correction", "full")``.
        name: Short label for reports (``baseline``, ``percentile``, ``mixed(2)``).
        why: Why each float node is float (node -> reason), for the manifest.
    """

    calibration: str | None = None
    float_nodes: tuple[str, ...] = ()
    float_ops: tuple[str, ...] = ()
    options: tuple[tuple[str, Any], ...] = ()
    name: str = "baseline"
    why: tuple[tuple[str, str], ...] = ()

    def option(self, key: str, default: Any = None) -> Any:
        return dict(self.options).get(key, default)

    def method(self, profile: Profile) -> str:
        return self.calibration or profile.quantization.calibration_method

    def whole_key(self, fmt: str, profile: Profile) -> tuple:
        """The job-cache key of the model this recipe's calibration and options quantize whole: a
        mixed candidate of a format that edits (ONNX QDQ, OpenVINO) starts from that model."""
        return (fmt, "quantized whole", self.method(profile), tuple(sorted((k, repr(v)) for k, v in self.options)))

    def to_dict(self, profile: Profile) -> dict[str, Any]:
        return {"name": self.name, "calibration": self.method(profile), "float_nodes": list(self.float_nodes),
                "float_ops": list(self.float_ops), "options": dict(self.options), "why": dict(self.why)}


@dataclass
class ConvertJob:
    """Everything a format converter needs for one profile.

    Attributes:
        source: The source model.
        profile: The resolved device profile.
        input_shapes: Fully static shape of every input (batch fixed to the profile's batch size).
        calib: Calibration feeds (each a dict input name -> array of the static shape).
        holdout: Held-back feeds for the accuracy gate (never used for calibration).
        calibrated: False when the user asked for ``--calib random``.
        preprocess: The preprocessing spec images were turned into inputs with (or None).
        workdir: The profile's staging folder: artifact files go here.
        scratch: A private temporary folder for intermediates.
        log: Progress callback (one line per stage).
        options: Format-specific options from the Python API (e.g. an NNCF validation function).
        static_onnx: The source as a float ONNX file with every input and output shape fixed to
            ``input_shapes`` (ONNX sources are copied and fixed, TF sources go through tf2onnx).
            Tensor names match ``source.inputs``/``source.outputs``. Read it through
            :meth:`onnx`: for float TFLite sources it is made only when a format needs it.
        onnx_provider: Makes ``static_onnx`` on first use (set by the pipeline).
        tflite_provider: Makes the folded float TFLite of a TFLite source on first use.
        recipe: How to quantize this candidate (calibration method, layers kept float).
        cache: Shared by the candidates of one profile and format: what does not depend on the
            recipe (pre-processed models, calibration statistics) is computed once.
        targets: The profile's target config per format (:func:`.targets.targets_for`); the
            converters read it instead of the profile's backend and accelerator names.
    """

    source: SourceModel
    profile: Profile
    input_shapes: dict[str, list[int]]
    calib: list[Feed]
    holdout: list[Feed]
    calibrated: bool
    preprocess: PreprocessSpec | None
    workdir: Path
    scratch: Path
    log: Callable[[str], None] = print
    options: dict[str, Any] = field(default_factory=dict)
    static_onnx: Path | None = None
    onnx_provider: Callable[[], Path] | None = None
    tflite_provider: Callable[[], Path] | None = None
    recipe: Recipe = field(default_factory=Recipe)
    cache: dict[str, Any] = field(default_factory=dict)
    targets: Any = None

    def __post_init__(self) -> None:
        if self.targets is None:  # what each format's converter must do for this profile (converters/targets.py)
            from .targets import targets_for

            self.targets = targets_for(self.profile)

    def onnx(self) -> Path:
        """The static float ONNX form of the source, made on first use where the source is not ONNX.

        Raises:
            ConversionError: there is none and it cannot be made (e.g. tf2onnx cannot read the model).
        """
        if self.static_onnx is None and self.onnx_provider is not None:
            self.static_onnx = self.onnx_provider()
        if self.static_onnx is None:
            raise ConversionError(f"This route needs the static float ONNX form of {Path(self.source.path).name}, "
                                  "and this job has none.",
                                  "Convert through edge_sdk.convert() / `edge-sdk convert`, which makes it.")
        return self.static_onnx

    def float_tflite(self) -> Path:
        """A float TFLite source with its sparse/fp16 weights folded to dense float32 constants
        (:func:`~edge_sdk.converters.tflite_native.fold_constants`); the source itself otherwise.

        Raises:
            ConversionError: the source is not TFLite, or its weights cannot be folded.
        """
        if self.source.format != "tflite":
            raise ConversionError(f"float_tflite() is for TFLite sources; this one is {self.source.format}.")
        return self.tflite_provider() if self.tflite_provider is not None else Path(self.source.path)


@dataclass
class FormatResult:
    """What a format converter produced.

    Attributes:
        model_file: Path of the main model file, relative to ``job.workdir``.
        inputs / outputs: The artifact's static tensor specs, with quantization params where the
            artifact's I/O is quantized (e.g. uint8 input on the Edge TPU).
        extra_files: Other files to publish and hash: (relative path, role), e.g. the IR ``.bin``.
        precision: Precision of the artifact (``int8``, ``fp32``...).
        tools: Tool name -> version used.
        route: How the artifact was made, e.g. ``"onnx -> onnx2tf -> TFLiteConverter"``.
        backend_options: Recorded for the runtime / device (e.g. the trtexec command line).
        warnings: Things the user should know (also printed).
        preprocess_baked: The manifest's ``preprocessing.baked`` when this format's graph holds
            the preprocessing (``--bake-preprocess``), else None.
    """

    model_file: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    extra_files: list[tuple[str, str]] = field(default_factory=list)
    precision: str = "int8"
    tools: dict[str, str] = field(default_factory=dict)
    route: str = ""
    backend_options: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    preprocess_baked: dict[str, Any] | None = None


FormatConverter = Callable[[ConvertJob], FormatResult]

#: artifact format name -> converter function; lazily imported ("module:function").
FORMATS: Registry[FormatConverter] = Registry("artifact format", ConversionError)
FORMATS.register("onnx-qdq", "edge_sdk.converters.onnx_qdq:convert")
FORMATS.register("openvino-ir", "edge_sdk.converters.openvino_ir:convert")
FORMATS.register("tflite-int8", "edge_sdk.converters.tflite_int8:convert")
