"""Fuzzing the config parser and validator: config.pbtxt text (built from the fields Triton
reads, with wrong values, then mangled) and JSON overrides. Parsing ends in a ModelConfig or a
ConfigParseError with a location; validating a repository holding such a config ends in a
report, never an exception."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from repokit.config.parse import ConfigParseError, parse_json, parse_text
from repokit.config.report import ValidateOptions
from repokit.config.validate import validate_repository
from tests.fuzz.conftest import PURE, PURE_SLOW, long_run
from tests.fuzz.strategies import json_values

TYPES = ("TYPE_FP32", "TYPE_INT32", "TYPE_STRING", "TYPE_BOOL", "TYPE_FP16", "TYPE_INVALID", "X")
BACKENDS = ("python", "onnxruntime", "tensorrt", "pytorch", "ensemble", "", "nope")
PLATFORMS = ("onnxruntime_onnx", "tensorrt_plan", "ensemble", "pytorch_libtorch", "")
numbers = st.integers(-3, 20) | st.sampled_from([2**31, 2**63 - 1, -(2**63), 2**64])
words = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=6)


def _q(text: str) -> str:
    return json.dumps(text)  # a text-format string literal (escapes included)


@st.composite
def tensor(draw: st.DrawFn) -> str:
    dims = ", ".join(str(d) for d in draw(st.lists(numbers, max_size=4)))
    extra = draw(
        st.sampled_from(
            [
                "",
                " optional: true",
                " is_shape_tensor: true",
                " allow_ragged_batch: true",
                " reshape { shape: [ 2, -1 ] }",
                f" label_filename: {_q(draw(words))}",
            ]
        )
    )
    return (
        f"{{ name: {_q(draw(words | st.sampled_from(['INPUT0', 'OUTPUT0'])))} "
        f"data_type: {draw(st.sampled_from(TYPES))} dims: [ {dims} ]{extra} }}"
    )


@st.composite
def config_texts(draw: st.DrawFn) -> str:
    parts = [
        f"name: {_q(draw(words))}",
        f"backend: {_q(draw(st.sampled_from(BACKENDS)))}",
        f"platform: {_q(draw(st.sampled_from(PLATFORMS)))}",
        f"max_batch_size: {draw(numbers)}",
        f"input [ {', '.join(draw(st.lists(tensor(), max_size=3)))} ]",
        f"output [ {', '.join(draw(st.lists(tensor(), max_size=3)))} ]",
        f"instance_group [ {{ count: {draw(numbers)} kind: "
        f"{draw(st.sampled_from(['KIND_CPU', 'KIND_GPU', 'KIND_MODEL', 'KIND_AUTO']))} }} ]",
        f"dynamic_batching {{ preferred_batch_size: [ {draw(numbers)} ] "
        f"max_queue_delay_microseconds: {draw(numbers)} }}",
        "sequence_batching { max_sequence_idle_microseconds: 5 control_input [ { name: "
        f"{_q(draw(words))} control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: "
        f"[ {draw(numbers)}, 1 ] }} ] }} ] }}",
        f"version_policy {{ specific {{ versions: [ {draw(numbers)} ] }} }}",
        "version_policy { latest { num_versions: 0 } }",
        f"parameters {{ key: {_q(draw(words))} value {{ string_value: {_q(draw(words))} }} }}",
        f"default_model_filename: {_q(draw(words))}",
        "ensemble_scheduling { step [ { model_name: "
        f'{_q(draw(words))} model_version: -1 input_map {{ key: "a" value: "b" }} }} ] }}',
        f"model_warmup [ {{ name: {_q(draw(words))} batch_size: {draw(numbers)} inputs {{ "
        f'key: "INPUT0" value {{ data_type: TYPE_FP32 dims: [ 2 ] zero_data: true }} }} }} ]',
        "optimization { priority: PRIORITY_MAX }",
        "model_transaction_policy { decoupled: true }",
        "response_cache { enable: true }",
    ]
    chosen = draw(st.lists(st.sampled_from(parts), max_size=10))
    text = "\n".join(chosen)
    choice = draw(st.integers(0, 5))
    if choice == 4 and text:
        text = text[: draw(st.integers(0, len(text) - 1))]
    elif choice == 5:
        text = draw(st.text(max_size=80))
    return text


def _parse_text(text: str) -> None:
    try:
        parse_text(text)
    except ConfigParseError as error:
        assert error.message


def _parse_json(value: object) -> None:
    text = value if isinstance(value, str) else json.dumps(value, allow_nan=True)
    try:
        parse_json(text)
    except ConfigParseError as error:
        assert error.message


test_parse_text = PURE(given(config_texts())(_parse_text))
test_parse_text_long = long_run(PURE_SLOW(given(config_texts())(_parse_text)))
json_configs = json_values | st.dictionaries(
    st.sampled_from(
        [
            "name",
            "backend",
            "max_batch_size",
            "input",
            "output",
            "instance_group",
            "dynamic_batching",
            "parameters",
            "platform",
            "version_policy",
        ]
    ),
    json_values,
    max_size=5,
)
test_parse_json = PURE(given(json_configs | st.text(max_size=40))(_parse_json))
test_parse_json_long = long_run(PURE_SLOW(given(json_configs)(_parse_json)))


def _validate(tmp_path: Path, text: str, with_file: bool) -> None:
    model = tmp_path / "repo" / "m"
    (model / "1").mkdir(parents=True, exist_ok=True)
    (model / "config.pbtxt").write_text(text, encoding="utf-8", errors="surrogatepass")
    model_file = model / "1" / "model.py"
    if with_file:
        model_file.write_text("x = 1\n")
    elif model_file.exists():
        model_file.unlink()
    report = validate_repository(tmp_path / "repo", ValidateOptions())
    assert list(report.models) == ["m"]


test_validate = PURE(given(text=config_texts(), with_file=st.booleans())(_validate))
test_validate_long = long_run(
    PURE_SLOW(given(text=config_texts(), with_file=st.booleans())(_validate))
)
