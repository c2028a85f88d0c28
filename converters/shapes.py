"""Static shapes: fix every dynamic dim before conversion.

Rules (the same for every profile): a dynamic batch dim (dim 0) is fixed to the profile's
batch size; every other dynamic dim needs ``--input-shape NAME:d0,d1,...``. A dynamic dim left
open is an error that lists every input with its dynamic dims and an example flag.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from edge_sdk.errors import InputValidationError
from edge_sdk.manifest import TensorSpec


@dataclass
class StaticShapes:
    """The result of fixing shapes for one batch size.

    Attributes:
        shapes: Input name -> fully static shape.
        batch_size: The batch size dynamic batch dims were fixed to.
        batch_fixed: Inputs whose dynamic batch dim was fixed to ``batch_size``.
        user_shapes: The shapes the user gave (``--input-shape``).
        notes: What was decided, for the manifest and the progress log.
    """

    shapes: dict[str, list[int]]
    batch_size: int
    batch_fixed: list[str] = field(default_factory=list)
    user_shapes: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_manifest(self, source_inputs: list[TensorSpec]) -> dict:
        return {
            "inputs": {k: list(v) for k, v in self.shapes.items()},
            "source_inputs": {s.name: list(s.shape) for s in source_inputs},
            "batch_size": self.batch_size,
            "batch_fixed_to_profile": list(self.batch_fixed),
            "user_shapes": {k: list(v) for k, v in self.user_shapes.items()},
            "notes": list(self.notes),
        }


def parse_input_shape(text: str) -> tuple[str, list[int]]:
    """Parse ``NAME:d0,d1,...`` (``NAME=d0,...`` and ``x`` separators are accepted too).

    Raises:
        InputValidationError: malformed value.
    """
    sep = ":" if ":" in text else "="
    name, _, dims = text.rpartition(sep)
    try:
        # Every separated piece must be a dimension: "1,x" or "1,,3" are typos, not shorter shapes.
        shape = [int(d) for d in dims.replace("x", ",").split(",")]
    except ValueError:
        shape = []
    if not name or not shape or any(d < 1 for d in shape):
        raise InputValidationError(f"--input-shape '{text}' is not NAME:d0,d1,... with positive dims.",
                                   "example: --input-shape image:1,3,224,224")
    return name, shape


def _example(spec: TensorSpec, batch: int, size_hint: tuple[int, int] | None = None) -> str:
    dims = [str(batch) if i == 0 and d < 0 else (str(d) if d > 0 else "<size>") for i, d in enumerate(spec.shape)]
    spatial = {"NCHW": (2, 3), "NHWC": (1, 2), None: ()}[image_layout(spec.shape)]
    if size_hint and spatial and all(dims[a] == "<size>" for a in spatial):
        for a, v in zip(spatial, size_hint):
            dims[a] = str(v)
        return f"--input-shape {spec.name}:{','.join(dims)} (the image size the model's metadata records)"
    return f"--input-shape {spec.name}:{','.join(dims)}"


def image_layout(shape: list[int]) -> str | None:
    """``NCHW`` or ``NHWC`` for a 4-D image input (1 or 3 channels; dim 1 wins when both could
    be), None for any other input. Dynamic dims (-1) are never channels."""
    if len(shape) == 4 and shape[1] in (1, 3) and shape[3] not in (1, 3):
        return "NCHW"
    if len(shape) == 4 and shape[3] in (1, 3):
        return "NHWC"
    return None


def fix_shapes(inputs: list[TensorSpec], batch_size: int, user: dict[str, list[int]] | None = None,
               batch_axes: dict[str, list[int]] | None = None, size_hint: tuple[int, int] | None = None) -> StaticShapes:
    """Resolve a fully static shape for every input.

    Args:
        inputs: The source's inputs (dynamic dims are ``-1``).
        batch_size: The profile's batch size.
        user: ``--input-shape`` values by input name.
        batch_axes: Input name -> other axes that carry the batch (named like a dim 0 in the
            source, e.g. a recurrent state ``[layers, batch, H]``); fixed to ``batch_size`` too.
        size_hint: ``(height, width)`` the model's metadata records (Ultralytics' ``imgsz``): only
            suggested in the error for an image input left dynamic, never applied silently.

    Returns:
        The static shapes and what was decided.

    Raises:
        InputValidationError: unknown input name, wrong rank, a static dim contradicted, or
            dynamic non-batch dims left without a shape.
    """
    user = dict(user or {})
    names = [s.name for s in inputs]
    unknown = sorted(set(user) - set(names))
    if unknown:
        raise InputValidationError(f"--input-shape names unknown input(s) {unknown}.", f"The model's inputs are: {', '.join(names)}")
    result = StaticShapes(shapes={}, batch_size=batch_size, user_shapes=user)
    open_dims: list[str] = []
    for spec in inputs:
        src = list(spec.shape)
        if spec.name in user:
            want = user[spec.name]
            if len(want) != len(src):
                raise InputValidationError(
                    f"--input-shape {spec.name}: rank {len(want)} but the input has rank {len(src)} (shape {src}).",
                    f"example: {_example(spec, batch_size, size_hint)}")
            for i, (s, w) in enumerate(zip(src, want)):
                if s > 0 and s != w:
                    raise InputValidationError(
                        f"--input-shape {spec.name}: dim {i} is fixed to {s} in the model, not {w}.",
                        f"example: {_example(spec, batch_size, size_hint)}")
            shape = list(want)
            if src and src[0] < 0 and shape[0] != batch_size:
                result.notes.append(f"input '{spec.name}': batch dim set to {shape[0]} by --input-shape "
                                    f"(the profile's batch size is {batch_size})")
        else:
            shape = list(src)
            if shape and shape[0] < 0:
                shape[0] = batch_size
                result.batch_fixed.append(spec.name)
                result.notes.append(f"input '{spec.name}': dynamic batch fixed to the profile's batch size {batch_size}")
            for axis in (batch_axes or {}).get(spec.name, []):
                if axis < len(shape) and shape[axis] < 0:
                    shape[axis] = batch_size
                    result.notes.append(f"input '{spec.name}': dim {axis} is named like the batch in the model, "
                                        f"fixed to the profile's batch size {batch_size}")
            dyn = [i for i, d in enumerate(shape) if d < 0]
            if dyn:
                open_dims.append(f"'{spec.name}' {src} (dynamic dims {dyn}): {_example(spec, batch_size, size_hint)}")
        result.shapes[spec.name] = shape
    if open_dims:
        raise InputValidationError(
            "The model has dynamic dims that must be fixed for an edge artifact: " + "; ".join(open_dims),
            "Pass --input-shape NAME:d0,d1,... for each input listed (input_shapes={...} in Python).")
    return result
