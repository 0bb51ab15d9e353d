"""Parse model configurations with the real protobuf descriptors (never a hand-written parser).

``config.pbtxt`` goes through ``google.protobuf.text_format`` into ``inference.ModelConfig``;
the load API's JSON override goes through ``json_format`` with unknown fields rejected and
enum names matched case-insensitively, as Triton's JsonStringToMessage does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from google.protobuf import descriptor, json_format, text_format

from repokit.config.parse_messages import plain_words
from repokit.config.suggest import did_you_mean
from repokit.protocol.generated import model_config_pb2 as mc

_LOCATION = re.compile(r"^(\d+):(\d+) : ")
_UNKNOWN_FIELD = re.compile(r'Message type "([\w.]+)" has no field named "(\w+)"')
_UNKNOWN_ENUM = re.compile(
    r'Enum type "([\w.]+)" has no value named (\w+)|Invalid enum value (\w+) for enum type ([\w.]+)'
)


def suggestion(message: str) -> str:
    """ " (did you mean ...?)" for a protobuf parse error about an unknown field or enum value."""
    pool = mc.DESCRIPTOR.pool
    field = _UNKNOWN_FIELD.search(message)
    if field is not None:
        try:
            message_type = pool.FindMessageTypeByName(field.group(1))
        except KeyError:
            return ""
        names = [f.name for f in message_type.fields]
        return did_you_mean(field.group(2), names, quote='"')
    enum = _UNKNOWN_ENUM.search(message)
    if enum is not None:
        enum_name, value = enum.group(1) or enum.group(4), enum.group(2) or enum.group(3)
        try:
            enum_type = pool.FindEnumTypeByName(enum_name)
        except KeyError:
            return ""
        return did_you_mean(value, [v.name for v in enum_type.values])
    return ""


class ConfigParseError(Exception):
    """A config that protobuf cannot parse; line/column are 1-based, 0 when unknown."""

    def __init__(self, message: str, line: int = 0, column: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


def parse_text(text: str) -> mc.ModelConfig:
    """Parse pbtxt text into a ModelConfig, raising ConfigParseError with the location."""
    config = mc.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        message = str(exc)
        line, column = exc.GetLine() or 0, exc.GetColumn() or 0
        match = _LOCATION.match(message)
        if match:
            message = message[match.end() :]
            line, column = line or int(match.group(1)), column or int(match.group(2))
        plain = plain_words(text, message, line, column)
        if plain is not None:
            raise ConfigParseError(plain, line, column) from exc
        raise ConfigParseError(message + suggestion(message), line, column) from exc
    return config


def parse_file(path: Path) -> mc.ModelConfig:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigParseError(f"file is not valid UTF-8: {exc.reason}") from exc
    return parse_text(text)


def _normalize_enums(value: Any, desc: Any) -> Any:
    """Upper-case enum names in a JSON object so that matching is case-insensitive."""
    if not isinstance(value, dict):
        return value
    fields = {f.name: f for f in desc.fields}
    fields.update({f.json_name: f for f in desc.fields})
    out: dict[str, Any] = {}
    for key, item in value.items():
        field = fields.get(key)
        if field is None:
            out[key] = item
            continue
        out[key] = _normalize_field(item, field)
    return out


def _normalize_scalar(item: Any, field: descriptor.FieldDescriptor) -> Any:
    if field.type == descriptor.FieldDescriptor.TYPE_ENUM and isinstance(item, str):
        names = {v.name.upper(): v.name for v in field.enum_type.values}
        return names.get(item.upper(), item)
    if field.type == descriptor.FieldDescriptor.TYPE_MESSAGE:
        return _normalize_enums(item, field.message_type)
    return item


def _normalize_field(item: Any, field: descriptor.FieldDescriptor) -> Any:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value_field = field.message_type.fields_by_name["value"]
        if isinstance(item, dict):
            return {k: _normalize_scalar(v, value_field) for k, v in item.items()}
        return item
    if field.is_repeated and isinstance(item, list):
        return [_normalize_scalar(v, field) for v in item]
    if field.is_repeated and item is not None:
        # Triton 2.51's JSON parser (protobuf's C++ JsonStringToMessage) takes one value for
        # a repeated field as a list of it: qa/L0_lifecycle loads {"instance_group": {...}}
        return [_normalize_scalar(item, field)]
    return _normalize_scalar(item, field)


def parse_json(text: str) -> mc.ModelConfig:
    """Parse the JSON form (load API ``config`` override); errors raise ConfigParseError."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigParseError(f"invalid JSON: {exc.msg}", exc.lineno, exc.colno) from exc
    if not isinstance(data, dict):
        raise ConfigParseError("the config must be a JSON object")
    config = mc.ModelConfig()
    try:
        json_format.ParseDict(
            _normalize_enums(data, config.DESCRIPTOR), config, ignore_unknown_fields=False
        )
    except json_format.ParseError as exc:
        raise ConfigParseError(str(exc) + suggestion(str(exc))) from exc
    return config


def to_text(config: mc.ModelConfig) -> str:
    return text_format.MessageToString(config)
