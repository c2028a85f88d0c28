"""Static shape rules and --input-shape parsing (fast)."""

from __future__ import annotations

import pytest

from edge_sdk.converters.shapes import fix_shapes, parse_input_shape
from edge_sdk.errors import InputValidationError
from edge_sdk.manifest import TensorSpec

TWO = [TensorSpec("image", [-1, 3, -1, 16], "float32"), TensorSpec("aux", [-1, 4], "float32")]


def test_batch_is_fixed_to_the_profile_and_recorded():
    s = fix_shapes(TWO, 1, {"image": [1, 3, 24, 16]})
    assert s.shapes == {"image": [1, 3, 24, 16], "aux": [1, 4]}
    assert s.batch_fixed == ["aux"]
    m = s.to_manifest(TWO)
    assert m["batch_size"] == 1 and m["batch_fixed_to_profile"] == ["aux"] and m["source_inputs"]["image"] == [-1, 3, -1, 16]


def test_profile_batch_size_is_used():
    assert fix_shapes([TensorSpec("x", [-1, 8], "float32")], 4).shapes == {"x": [4, 8]}


def test_dynamic_spatial_dim_without_shape_lists_every_input_with_an_example():
    two = TWO + [TensorSpec("mask", [1, -1, -1], "float32")]
    with pytest.raises(InputValidationError) as err:
        fix_shapes(two, 1)
    msg = err.value.message
    assert "'image'" in msg and "dynamic dims [2]" in msg and "--input-shape image:1,3,<size>,16" in msg
    assert "'mask'" in msg and "dynamic dims [1, 2]" in msg
    assert "'aux'" not in msg  # only its batch was dynamic: fixed, not an error
    assert "--input-shape" in err.value.hint


def test_the_metadata_image_size_is_suggested_never_applied(tmp_path):
    """Ultralytics exports with dynamic height/width record imgsz in the ONNX metadata: the error's
    example carries it (NCHW and NHWC), and the shape is still the user's to give."""
    import onnx
    from onnx import TensorProto, helper

    from edge_sdk.converters.sources import read_source

    nchw = [TensorSpec("images", [-1, 3, -1, -1], "float32")]
    with pytest.raises(InputValidationError, match=r"--input-shape images:1,3,320,256 \(the image size the model's metadata"):
        fix_shapes(nchw, 1, size_hint=(320, 256))
    with pytest.raises(InputValidationError) as err:  # a wrong rank: the example carries the size too
        fix_shapes(nchw, 1, {"images": [1, 3, 320]}, size_hint=(320, 256))
    assert "--input-shape images:1,3,320,256" in err.value.hint
    with pytest.raises(InputValidationError, match=r"--input-shape x:1,640,640,3 \("):
        fix_shapes([TensorSpec("x", [-1, -1, -1, 3], "float32")], 1, size_hint=(640, 640))
    with pytest.raises(InputValidationError, match=r"--input-shape x:1,<size>,8\b"):  # not an image: no size put in
        fix_shapes([TensorSpec("x", [-1, -1, 8], "float32")], 1, size_hint=(640, 640))
    graph = helper.make_graph([helper.make_node("Relu", ["images"], ["y"])], "g",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["b", 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 3, "h", "w"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for value, want in (("[320, 256]", (320, 256)), ("640", (640, 640)), ("nonsense", None)):
        del model.metadata_props[:]
        helper.set_model_props(model, {"imgsz": value})
        onnx.save(model, str(tmp_path / "m.onnx"))
        assert read_source(tmp_path / "m.onnx").image_size == want


@pytest.mark.parametrize("user, match", [
    ({"nope": [1, 2]}, "unknown input"),
    ({"image": [1, 3, 24]}, "rank 3"),
    ({"image": [1, 4, 24, 16]}, "dim 1 is fixed to 3"),
])
def test_bad_input_shapes(user, match):
    with pytest.raises(InputValidationError, match=match):
        fix_shapes(TWO, 1, user)


def test_parse_input_shape():
    assert parse_input_shape("image:1,3,24,16") == ("image", [1, 3, 24, 16])
    assert parse_input_shape("serving_default_image:0:1,32,32,3") == ("serving_default_image:0", [1, 32, 32, 3])
    assert parse_input_shape("x=1x8") == ("x", [1, 8])
    for bad in ("image", "image:", "image:1,a", "image:0,3", "image:1,x", "image:1,,3", "image:1,3,"):
        with pytest.raises(InputValidationError):
            parse_input_shape(bad)
