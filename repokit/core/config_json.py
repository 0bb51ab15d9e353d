"""A ModelConfig in Triton's ``/config`` JSON form (§1.3.4).

Proto field names, default-valued scalars and empty lists/maps printed, unset messages and
oneofs omitted, enums by name, keys in declaration order; int64 fields are strings as protobuf
JSON writes them, except the fixed list Triton converts back to numbers
(``ModelConfigToJson``). The same text is what python models get as ``args["model_config"]``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format

from repokit.protocol.generated import model_config_pb2 as mc

Json = Any


def _ordered(value: Json, desc: Any) -> Json:
    """Reorder an object's keys as the message declares its fields (Triton's order)."""
    if not isinstance(value, dict):
        return value
    out: dict[str, Json] = {}
    for field in desc.fields:
        if field.name not in value:
            continue
        item = value[field.name]
        message = field.message_type
        if message is not None and message.GetOptions().map_entry:
            value_desc = message.fields_by_name["value"].message_type
            if value_desc is not None and isinstance(item, dict):
                item = {k: _ordered(v, value_desc) for k, v in item.items()}
        elif message is not None:
            if isinstance(item, list):
                item = [_ordered(v, message) for v in item]
            else:
                item = _ordered(item, message)
        out[field.name] = item
    return out


def _to_int(value: Json) -> Json:
    if isinstance(value, list):
        return [int(v) for v in value]
    if isinstance(value, str):
        return int(value)
    return value


def _convert(obj: Json, path: tuple[str, ...]) -> None:
    """Convert the field at ``path`` ('*' = every list item / map value) to numbers."""
    if not path or not isinstance(obj, dict):
        return
    head, rest = path[0], path[1:]
    if head == "*":
        return
    if head not in obj:
        return
    if not rest:
        obj[head] = _to_int(obj[head])
        return
    target = obj[head]
    if rest[0] == "*":
        items = target if isinstance(target, list) else list(target.values())
        for item in items:
            if len(rest) == 1:
                continue
            _convert(item, rest[1:])
        return
    _convert(target, rest)


_NUMERIC_PATHS: tuple[tuple[str, ...], ...] = (
    ("input", "*", "dims"),
    ("input", "*", "reshape", "shape"),
    ("output", "*", "dims"),
    ("output", "*", "reshape", "shape"),
    ("version_policy", "specific", "versions"),
    ("dynamic_batching", "max_queue_delay_microseconds"),
    ("dynamic_batching", "priority_levels"),
    ("dynamic_batching", "default_priority_level"),
    ("dynamic_batching", "default_queue_policy", "default_timeout_microseconds"),
    ("dynamic_batching", "priority_queue_policy", "*", "default_timeout_microseconds"),
    ("sequence_batching", "max_sequence_idle_microseconds"),
    ("sequence_batching", "oldest", "max_queue_delay_microseconds"),
    ("sequence_batching", "direct", "max_queue_delay_microseconds"),
    ("sequence_batching", "state", "*", "dims"),
    ("ensemble_scheduling", "step", "*", "model_version"),
    ("model_warmup", "*", "inputs", "*", "dims"),
)


def config_to_json(config: mc.ModelConfig) -> dict[str, Json]:
    data: dict[str, Json] = json_format.MessageToDict(
        config,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    data = _ordered(data, mc.ModelConfig.DESCRIPTOR)
    for path in _NUMERIC_PATHS:
        _convert(data, path)
    return data


def config_to_json_text(config: mc.ModelConfig, dumps: Callable[[Any], str] = json.dumps) -> str:
    return dumps(config_to_json(config))
