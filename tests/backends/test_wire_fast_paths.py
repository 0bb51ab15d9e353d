"""The wire lane's one-pass decoding of fixed-dims inputs takes exactly what the plain-request
rules take, with the same arrays: the JSON common form (repokit.backends.python.wire_json_inputs)
against the checked JSON decoding, and the gRPC decoder against the rules applied input by input
(repokit.protocol.plain_request.plain_input), on requests drawn near the form that each take."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from repokit.backends.python import wire_grpc, wire_http
from repokit.backends.python.wire_json_inputs import common_request
from repokit.backends.wire_plan import WirePlan
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.plain_request import plain_input

LIMIT = 4096
DTYPES = {"FP32": "<f4", "FP64": "<f8", "INT32": "<i4", "UINT8": "u1", "INT64": "<i8"}


@st.composite
def plans(draw: st.DrawFn) -> WirePlan:
    """Two or three inputs of fixed dims (a variable one now and then), batched or not."""
    inputs = {}
    for index in range(draw(st.integers(1, 3))):
        datatype = draw(st.sampled_from(sorted(DTYPES)))
        dims = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
        if draw(st.integers(0, 5)) == 0 and dims:
            dims = (-1, *dims[1:])
        count = -1 if -1 in dims else int(np.prod(dims, dtype=np.int64))
        inputs[f"I{index}"] = (datatype, dims, np.dtype(DTYPES[datatype]), count)
    return WirePlan("m", "1", draw(st.sampled_from([0, 1, 4])), inputs, frozenset({"Y", "Z"}))


def _numbers(draw: st.DrawFn, datatype: str, count: int) -> list[Any]:
    number = (
        st.floats(allow_nan=False, allow_infinity=False, width=32) | st.integers(-9, 9)
        if datatype.startswith("FP")
        else st.integers(0, 200)
    )
    return draw(st.lists(number, min_size=count, max_size=count))


def _spoil(draw: st.DrawFn, item: dict[str, Any]) -> None:
    """One change that a plain request may or may not survive."""
    change = draw(st.integers(0, 8))
    if change == 0:
        item["name"] = draw(st.sampled_from(["I0", "Q"]))
    elif change == 1:
        item["datatype"] = draw(st.sampled_from(["FP32", "INT32", 3]))
    elif change == 2:
        item["shape"] = draw(st.lists(st.integers(-1, 3), max_size=3))
        count = max(0, int(np.prod(item["shape"], dtype=np.int64)))
        item["data"] = item["data"][:count] + [1] * (count - len(item["data"]))
    elif change == 3:
        item["data"] = [*item["data"], 1]
    elif change == 4 and item["data"]:
        element = [True, None, "1", [1], 1.5, 2**64, -(2**70), {}]
        item["data"][0] = draw(st.sampled_from(element))
    elif change == 5:
        item["parameters"] = {}
    elif change == 6:
        item["shape"] = [float(d) for d in item["shape"]]
    elif change == 7:
        item["shape"] = [*item["shape"][:1], *item["shape"]]
    else:
        del item[draw(st.sampled_from(sorted(item)))]


@st.composite
def requests(draw: st.DrawFn, plan: WirePlan) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(the inputs, the rest of the document): a plain request of ``plan``, half of them with
    an input changed."""
    batch = draw(st.integers(1, 3)) if plan.max_batch_size else 0
    inputs = []
    for name, (datatype, dims, _, _) in plan.inputs.items():
        item_dims = [draw(st.integers(0, 2)) if d == -1 else d for d in dims]
        shape = ([batch] if plan.max_batch_size else []) + item_dims
        count = int(np.prod(shape, dtype=np.int64))
        data = _numbers(draw, datatype, count)
        inputs.append({"name": name, "datatype": datatype, "shape": shape, "data": data})
    if draw(st.booleans()):
        _spoil(draw, draw(st.sampled_from(inputs)))
    rest: dict[str, Any] = {}
    if draw(st.booleans()):
        rest["id"] = draw(st.sampled_from(["r1", "", "r1", 7, None]))
    if draw(st.booleans()):
        outputs = [[], [{"name": "Y"}], [{"name": "Y"}, {"name": "Z"}], [{"name": "W"}], None]
        rest["outputs"] = draw(st.sampled_from(outputs))
    return inputs, rest


def _same(left: Any, right: Any) -> None:
    assert (left is None) == (right is None)
    if left is None:
        return
    arrays, requested, request_id, batch_size = left
    assert (requested, request_id, batch_size) == right[1:]
    assert [name for name, _ in arrays] == [name for name, _ in right[0]]
    for (_, got), (_, want) in zip(arrays, right[0], strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.flags.writeable and got.flags.c_contiguous
        assert got.tobytes() == want.tobytes()


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_json_common_form_takes_what_the_checked_decoding_takes(data: st.DataObject) -> None:
    plan = data.draw(plans())
    inputs, rest = data.draw(requests(plan))
    document = {"inputs": inputs, **rest}
    body = json.dumps(document).encode()
    checked = wire_http._checked_request(orjson.loads(body), plan, LIMIT)
    common = common_request(orjson.loads(body), plan, LIMIT)
    if common is not None:
        _same(common, checked)
    _same(wire_http.decode_request(body, plan, LIMIT), checked)


def test_json_common_form_is_taken_in_one_pass() -> None:
    f32 = np.dtype("<f4")
    plan = WirePlan("m", "1", 8, {"A": ("FP32", (2,), f32, 2)}, frozenset({"Y"}))
    document = {"id": "x", "inputs": [{"name": "A", "datatype": "FP32", "shape": [2, 2],
                                       "data": [1, 2.5, 3, 4]}]}  # fmt: skip
    taken = common_request(document, plan, LIMIT)
    assert taken is not None
    assert taken[0][0][1].tolist() == [[1, 2.5], [3, 4]] and taken[1:] == ({"Y"}, "x", 2)
    unbatched = WirePlan("m", "1", 0, {"A": ("FP32", (), f32, 1)}, frozenset({"Y"}))
    scalar = {"inputs": [{"name": "A", "datatype": "FP32", "shape": [], "data": [7]}]}
    taken = common_request(scalar, unbatched, LIMIT)
    assert taken is not None and taken[0][0][1].shape == () and taken[3] == 0


def _by_the_rules(msg: pb.ModelInferRequest, plan: WirePlan) -> Any:
    """The plain-request rules applied input by input to a parsed request."""
    if msg.parameters or len(msg.inputs) != len(plan.inputs):
        return None
    if len(msg.raw_input_contents) != len(msg.inputs):
        return None
    batch_size, seen, arrays = 0, set(), []
    for tensor, data in zip(msg.inputs, msg.raw_input_contents, strict=True):
        if tensor.parameters or tensor.HasField("contents"):
            return None
        shape = tuple(tensor.shape)
        checked = plain_input(
            plan.inputs, plan.max_batch_size, seen, tensor.name, tensor.datatype, shape,
            len(data), batch_size,
        )  # fmt: skip
        if checked is None:
            return None
        dtype, batch_size = checked
        seen.add(tensor.name)
        arrays.append((tensor.name, np.frombuffer(data, dtype=dtype).reshape(shape)))
    requested = {output.name for output in msg.outputs}
    if any(o.parameters or o.name not in plan.outputs for o in msg.outputs):
        return None
    return arrays, requested or set(plan.outputs), msg.id, batch_size


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_grpc_decoder_takes_what_the_rules_take(data: st.DataObject) -> None:
    plan = data.draw(plans())
    inputs, rest = data.draw(requests(plan))
    request_id = rest.get("id")
    msg = pb.ModelInferRequest(model_name="m", id=request_id if type(request_id) is str else "")
    for item in inputs:  # the JSON request's gRPC twin, as far as gRPC can say it
        name, datatype = item.get("name", ""), item.get("datatype", "")
        shape, count = item.get("shape", []), len(item.get("data", []))
        if type(datatype) is not str or any(type(d) is not int for d in shape):
            continue
        msg.inputs.add(name=name, datatype=datatype, shape=shape)
        width = np.dtype(DTYPES.get(datatype, "<f4")).itemsize
        msg.raw_input_contents.append(bytes(range(256))[: width * count])
    for output in rest.get("outputs") or []:
        msg.outputs.add(name=output["name"])
    raw = msg.SerializeToString()
    _same(
        wire_grpc.decode_request(raw, plan),
        _by_the_rules(pb.ModelInferRequest.FromString(raw), plan),
    )
