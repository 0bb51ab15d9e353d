"""ModelInferRequest messages for the gRPC fuzz targets: every field a client can set, with
values from the plausible to the absurd."""

from __future__ import annotations

from hypothesis import strategies as st

from repokit.protocol.generated import grpc_service_pb2 as pb
from tests.fuzz.strategies import BIG, DATATYPES, MODELS, PARAMETER_KEYS, names

INT64 = st.integers(-(2**63), 2**63 - 1)
CONTENT_FIELDS = {
    "bool_contents": st.booleans(),
    "int_contents": st.integers(-(2**31), 2**31 - 1),
    "int64_contents": INT64,
    "uint_contents": st.integers(0, 2**32 - 1),
    "uint64_contents": st.integers(0, 2**64 - 1),
    "fp32_contents": st.floats(width=32, allow_nan=True),
    "fp64_contents": st.floats(allow_nan=True),
    "bytes_contents": st.binary(max_size=8),
}


@st.composite
def parameter_maps(draw: st.DrawFn, target: object) -> None:
    for key in draw(st.lists(st.sampled_from(PARAMETER_KEYS) | st.text(max_size=5), max_size=3)):
        param = target[key]  # type: ignore[index]
        kind = draw(st.sampled_from(["bool", "int64", "string", "double", "uint64"]))
        if kind == "bool":
            param.bool_param = draw(st.booleans())
        elif kind == "int64":
            param.int64_param = draw(INT64 | st.sampled_from([b for b in BIG if b < 2**63]))
        elif kind == "string":
            param.string_param = draw(st.text(max_size=8))
        elif kind == "double":
            param.double_param = draw(st.floats(allow_nan=True))
        else:
            param.uint64_param = draw(st.integers(0, 2**64 - 1))


@st.composite
def infer_requests(draw: st.DrawFn) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(
        model_name=draw(st.sampled_from(MODELS) | st.text(max_size=5)),
        model_version=draw(st.sampled_from(["", "1", "2", "-1", "x", "99999999999999999999"])),
        id=draw(st.text(max_size=5)),
    )
    draw(parameter_maps(msg.parameters))
    use_raw = draw(st.booleans())
    for _ in range(draw(st.integers(0, 3))):
        shape = draw(
            st.lists(
                st.integers(-3, 20) | st.sampled_from([b for b in BIG if b < 2**63]), max_size=4
            )
            | st.sampled_from([[1, 16], [16], [2, 16], [0, 2**40, 2**40]])
        )
        tensor = msg.inputs.add(
            name=draw(names), datatype=draw(st.sampled_from(DATATYPES)), shape=shape
        )
        if draw(st.integers(0, 3)) == 0:
            draw(parameter_maps(tensor.parameters))
        count = 1
        for dim in shape:
            count *= dim if 0 <= dim <= 64 else 1
        count = min(count, 128)
        if use_raw:
            size = draw(st.sampled_from([count * 4, count * 4, count, 0, count * 8 + 1]))
            msg.raw_input_contents.append(draw(st.binary(min_size=size, max_size=size)))
        elif draw(st.integers(0, 4)):
            field = draw(st.sampled_from(sorted(CONTENT_FIELDS)))
            length = draw(st.sampled_from([count, count, count + 1, max(count - 1, 0)]))
            values = draw(st.lists(CONTENT_FIELDS[field], min_size=length, max_size=length))
            getattr(tensor.contents, field).extend(values)
    if use_raw and draw(st.integers(0, 5)) == 0:
        msg.raw_input_contents.append(b"\0" * draw(st.integers(0, 64)))
    for _ in range(draw(st.integers(0, 2))):
        output = msg.outputs.add(name=draw(names))
        if draw(st.booleans()):
            draw(parameter_maps(output.parameters))
    return msg
