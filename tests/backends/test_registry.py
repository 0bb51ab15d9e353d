"""Backend selection by backend/platform name, and the TensorRT-less machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from repokit.backends.base import instance_count
from repokit.backends.registry import backend_name, create_backend
from repokit.backends.tensorrt import NOT_INSTALLED, TensorRTBackend
from repokit.config.parse import parse_text
from repokit.errors import Code, RepokitError
from tests.backends.conftest import make_context


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('backend: "python"', "python"),
        ('platform: "onnxruntime_onnx"', "onnxruntime"),
        ('backend: "onnxruntime"', "onnxruntime"),
        ('platform: "tensorrt_plan"', "tensorrt"),
        ('platform: "tensorrt_plan" backend: "tensorrt"', "tensorrt"),
    ],
)
def test_backend_name(text: str, expected: str) -> None:
    assert backend_name(parse_text(f'name: "m" {text}')) == expected


def test_instance_count_sums_groups() -> None:
    config = parse_text('name: "m" instance_group [ { count: 2 }, { count: 3 } ]')
    assert instance_count(config) == 5
    assert instance_count(parse_text('name: "m"')) == 1


def test_unknown_backend_uses_tritons_message(tmp_path: Path) -> None:
    context = make_context(tmp_path, "m", 'name: "m" backend: "pytorch"', {})
    with pytest.raises(RepokitError) as info:
        create_backend(context)
    assert info.value.code is Code.INVALID_ARG
    assert info.value.message == (
        "unable to find backend library for backend 'pytorch', try specifying runtime on the "
        "model configuration."
    )


async def test_tensorrt_missing_is_unavailable_with_install_hint(tmp_path: Path) -> None:
    context = make_context(
        tmp_path, "plan", 'name: "plan" platform: "tensorrt_plan"', {"model.plan": b"\x00"}
    )
    backend = create_backend(context)
    assert isinstance(backend, TensorRTBackend)
    with pytest.raises(RepokitError) as info:
        await backend.load()
    assert info.value.code is Code.UNAVAILABLE
    assert info.value.message == NOT_INSTALLED
    assert "pip install repokit[tensorrt]" in NOT_INSTALLED and "GPU" in NOT_INSTALLED
