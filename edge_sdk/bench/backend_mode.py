"""``bench --mode backend``: the runtime's own call alone, on buffers bound once.

The default (end-to-end) mode times ``Model.infer``: what an application waits for, with the input
contract, quantize/dequantize and output copies. Vendors' tools time less: OpenVINO's
``benchmark_app`` fills the request's tensors once and times ``infer()``; LiteRT's
``benchmark_model`` sets tensors once and times ``Invoke()``. Backend mode does the same through
each runtime's Python API, so our figure and theirs can be compared:

- OpenVINO: an ``InferRequest`` with its input tensors set once; ``req.infer()``.
- ONNX Runtime: an ``IOBinding`` with inputs bound once and outputs bound to the device;
  ``session.run_with_iobinding``.
- LiteRT: the interpreter's inputs set once; ``interpreter.invoke()``.
- TensorRT: not offered (no GPU where this was built and tested); refused with the reason.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from edge_sdk.errors import InputValidationError

MODES = ("end-to-end", "backend")


def _native_feed(runner) -> list[np.ndarray]:
    """One random array per native input (the runtime's own shapes and dtypes, as bound once)."""
    rng = np.random.default_rng(0)
    out = []
    for t in runner.input_metadata:
        shape = tuple(max(int(d), 1) for d in t.shape)
        dt = np.dtype(t.dtype)
        if dt.kind in "iu":
            info = np.iinfo(dt)
            out.append(rng.integers(max(info.min, -128), min(info.max, 127) + 1, shape).astype(dt)
                       if getattr(t, "quant", None) or dt.itemsize == 1 else np.zeros(shape, dt))
        elif dt == np.bool_:
            out.append(np.ones(shape, bool))
        else:
            out.append(rng.random(shape).astype(dt))
    return out


def bound_call(model: Any) -> Callable[[], Any]:
    """A callable running one inference of ``model``'s runtime on inputs bound once.

    The backend's ``binder`` hook (:mod:`edge_sdk.backends`) binds them.

    Raises:
        InputValidationError: the backend has no bound-buffer path here (TensorRT).
    """
    from edge_sdk.backends import backends

    runner = model._runner
    desc = backends().get(runner.backend)
    binder = desc.hook("binder") if desc is not None else None
    if binder is None:
        raise InputValidationError(f"--mode backend is not available for {runner.backend} artifacts.",
                                   "Use the default end-to-end mode (TensorRT: trtexec times the engine alone).")
    return binder(runner, _native_feed(runner))


def bind_openvino(runner, feed: list[np.ndarray]) -> Callable[[], Any]:
    """OpenVINO: a request whose input tensors are set once; ``infer`` is the timed call."""
    import openvino as ov

    req = runner._compiled.create_infer_request()
    for i, arr in enumerate(feed):
        req.set_input_tensor(i, ov.Tensor(np.ascontiguousarray(arr)))
    return req.infer


def bind_onnxruntime(runner, feed: list[np.ndarray]) -> Callable[[], Any]:
    """ONNX Runtime: IO binding of the inputs (outputs bound to CPU); ``run_with_iobinding`` is timed."""
    sess = runner._sess
    io = sess.io_binding()
    for meta, arr in zip(runner.input_metadata, feed):
        io.bind_cpu_input(meta.name, np.ascontiguousarray(arr))
    for meta in runner.output_metadata:
        io.bind_output(meta.name)
    return lambda: sess.run_with_iobinding(io)


def bind_litert(runner, feed: list[np.ndarray]) -> Callable[[], Any]:
    """LiteRT: tensors set once; ``invoke`` is timed (what ``benchmark_model`` times)."""
    interp = runner._interp
    for meta, arr in zip(runner.input_metadata, feed):
        interp.set_tensor(meta.handle, arr)
    return interp.invoke
