"""One datatype table (repokit.protocol.datatypes): the model config's TYPE_* values written out
there agree with model_config.proto, and the mappings other modules keep are derived from it and
say what they said before the table became the only one."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from repokit.backends.python import pb_utils, wire_checks
from repokit.protocol import datatypes
from repokit.protocol.generated import model_config_pb2 as mc


def test_config_values_agree_with_model_config_proto() -> None:
    rows = datatypes.BY_CONFIG_NAME
    assert {
        name for name in mc.DataType.DESCRIPTOR.values_by_name if name != "TYPE_INVALID"
    } == set(rows)
    for name, row in rows.items():
        assert row.config == mc.DataType.Value(name)
        assert datatypes.BY_CONFIG[row.config] is row is datatypes.BY_PROTOCOL[row.protocol]


def test_the_table_needs_no_protobuf() -> None:
    code = "import sys, repokit.protocol.datatypes; print('google.protobuf' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_wire_lane_output_names_match_from_numpy() -> None:
    numeric = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"]
    names = [*numeric, "FP16", "FP32", "FP64"]
    assert sorted(wire_checks.OUTPUT_DATATYPES.values()) == sorted(names)
    for dtype, name in wire_checks.OUTPUT_DATATYPES.items():
        found = datatypes.from_numpy(dtype)
        assert found is not None and found.protocol == name
    assert wire_checks.OUTPUT_DATATYPES[np.dtype(np.float32)] == "FP32"


def test_pb_utils_type_helpers_as_triton() -> None:
    order = [np.bool_, np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16, np.int32,
             np.int64, np.float16, np.float32, np.float64, np.object_]  # fmt: skip
    for value, numpy_type in enumerate(order, start=1):
        assert pb_utils.triton_to_numpy_type(value) is numpy_type
        assert pb_utils.numpy_to_triton_type(numpy_type) == value
    assert pb_utils.triton_to_numpy_type(14) is None  # BF16 has no numpy type
    assert pb_utils.triton_string_to_numpy("TYPE_BOOL") is bool
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert "TYPE_BF16" not in pb_utils._CONFIG_TO_NUMPY
