"""JSON Schema (draft 2020-12) of the model config's JSON form, generated from the descriptors.

The schema describes what Triton's ``JsonStringToMessage`` accepts for ``inference.ModelConfig``
(the load API's ``config`` override, and ``GET /v2/models/<m>/config``): both the proto field
names and their camelCase JSON names, enum names in any letter case or their numbers, 64-bit
integers as numbers or numeric strings, maps as objects, at most one member of each oneof.
It is written to ``schemas/model_config.schema.json`` by ``nox -s generate`` and used by
:func:`validate_config_json` for configs given as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from google.protobuf import descriptor
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]

from repokit.config.diagnostics import Diagnostic, Severity
from repokit.config.parse import ConfigParseError, parse_json
from repokit.config.suggest import did_you_mean
from repokit.paths import schemas_dir
from repokit.protocol.generated import model_config_pb2 as mc

SCHEMA_FILE = "model_config.schema.json"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
RULE_SCHEMA = "config-json-schema"
RULE_SYNTAX = "config-json-syntax"
RULE_PARSE = "config-json-parse"

Schema = dict[str, Any]
_FD = descriptor.FieldDescriptor
_INT_RANGES: dict[int, tuple[int, int]] = {
    _FD.TYPE_INT32: (-(2**31), 2**31 - 1),
    _FD.TYPE_SINT32: (-(2**31), 2**31 - 1),
    _FD.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    _FD.TYPE_UINT32: (0, 2**32 - 1),
    _FD.TYPE_FIXED32: (0, 2**32 - 1),
    _FD.TYPE_INT64: (-(2**63), 2**63 - 1),
    _FD.TYPE_SINT64: (-(2**63), 2**63 - 1),
    _FD.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    _FD.TYPE_UINT64: (0, 2**64 - 1),
    _FD.TYPE_FIXED64: (0, 2**64 - 1),
}
_FLOAT_STRING = (
    r"^(NaN|-?Infinity|-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?|-?\.[0-9]+([eE][-+]?[0-9]+)?)$"
)
_BASE64 = r"^[A-Za-z0-9+/_-]*={0,2}$"


def _case_insensitive(name: str) -> str:
    """A portable (ECMA-262) regex body matching ``name`` in any letter case."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in name)


def _enum_schema(enum: descriptor.EnumDescriptor) -> Schema:
    names = "|".join(_case_insensitive(v.name) for v in enum.values)
    return {
        "anyOf": [
            {"type": "string", "pattern": f"^(?:{names})$"},
            {"type": "integer", "enum": [v.number for v in enum.values]},
        ],
        "description": f"{enum.full_name}: " + ", ".join(v.name for v in enum.values),
    }


def _integer_schema(field_type: int) -> Schema:
    low, high = _INT_RANGES[field_type]
    digits = r"^-?[0-9]+$" if low < 0 else r"^[0-9]+$"
    return {
        "anyOf": [
            {"type": "integer", "minimum": low, "maximum": high},
            {"type": "string", "pattern": digits},
        ]
    }


def _scalar_schema(field: descriptor.FieldDescriptor) -> Schema:
    if field.type == _FD.TYPE_MESSAGE:
        return {"$ref": f"#/$defs/{field.message_type.full_name}"}
    if field.type == _FD.TYPE_ENUM:
        return {"$ref": f"#/$defs/{field.enum_type.full_name}"}
    if field.type in _INT_RANGES:
        return _integer_schema(field.type)
    if field.type in (_FD.TYPE_FLOAT, _FD.TYPE_DOUBLE):
        return {"anyOf": [{"type": "number"}, {"type": "string", "pattern": _FLOAT_STRING}]}
    if field.type == _FD.TYPE_BOOL:
        return {"type": "boolean"}
    if field.type == _FD.TYPE_STRING:
        return {"type": "string"}
    if field.type == _FD.TYPE_BYTES:
        return {"type": "string", "contentEncoding": "base64", "pattern": _BASE64}
    raise ValueError(f"unsupported field type {field.type} for {field.full_name}")


def _map_key_schema(key: descriptor.FieldDescriptor) -> Schema:
    if key.type in _INT_RANGES:
        low, _ = _INT_RANGES[key.type]
        return {"pattern": r"^-?[0-9]+$" if low < 0 else r"^[0-9]+$"}
    if key.type == _FD.TYPE_BOOL:
        return {"pattern": "^(true|false)$"}
    return {}


def _field_schema(field: descriptor.FieldDescriptor) -> Schema:
    message = field.message_type
    if message is not None and message.GetOptions().map_entry:
        schema: Schema = {
            "type": "object",
            "additionalProperties": _scalar_schema(message.fields_by_name["value"]),
        }
        key_schema = _map_key_schema(message.fields_by_name["key"])
        if key_schema:
            schema["propertyNames"] = key_schema
        return schema
    if field.is_repeated:
        return {"type": "array", "items": _scalar_schema(field)}
    return _scalar_schema(field)


def _field_names(field: descriptor.FieldDescriptor) -> list[str]:
    json_name = str(getattr(field, "json_name", field.camelcase_name))
    return [field.name] if json_name == field.name else [field.name, json_name]


def _message_schema(message: descriptor.Descriptor) -> Schema:
    properties: Schema = {}
    exclusive: dict[str, list[str]] = {}  # a name -> names that must not appear with it
    for field in message.fields:
        names = _field_names(field)
        for name in names:
            properties[name] = _field_schema(field)
        if len(names) == 2:  # the same field given twice under its two names
            exclusive[names[0]] = [names[1]]
    for oneof in message.oneofs:
        if len(oneof.fields) > 1:
            members = [(f, _field_names(f)) for f in oneof.fields]
            for field, names in members:
                others = [n for other, ns in members if other is not field for n in ns]
                for name in names:
                    exclusive.setdefault(name, []).extend(others)
    schema: Schema = {
        "type": "object",
        "description": message.full_name,
        "properties": properties,
        "additionalProperties": False,
    }
    if exclusive:
        schema["dependentSchemas"] = {
            name: {"properties": {other: False for other in others}}
            for name, others in exclusive.items()
        }
    return schema


def _collect(
    message: descriptor.Descriptor,
    messages: dict[str, descriptor.Descriptor],
    enums: dict[str, descriptor.EnumDescriptor],
) -> None:
    if message.full_name in messages:
        return
    messages[message.full_name] = message
    for field in message.fields:
        if field.enum_type is not None:
            enums[field.enum_type.full_name] = field.enum_type
        if field.message_type is not None:
            entry = field.message_type
            if entry.GetOptions().map_entry:
                value = entry.fields_by_name["value"]
                if value.enum_type is not None:
                    enums[value.enum_type.full_name] = value.enum_type
                if value.message_type is not None:
                    _collect(value.message_type, messages, enums)
            else:
                _collect(entry, messages, enums)


def model_config_schema() -> Schema:
    """The schema of inference.ModelConfig's JSON form, built from the descriptors."""
    root = cast(descriptor.Descriptor, mc.ModelConfig.DESCRIPTOR)
    messages: dict[str, descriptor.Descriptor] = {}
    enums: dict[str, descriptor.EnumDescriptor] = {}
    _collect(root, messages, enums)
    defs: Schema = {}
    for name in sorted(messages):
        if name != root.full_name:
            defs[name] = _message_schema(messages[name])
    for name in sorted(enums):
        defs[name] = _enum_schema(enums[name])
    schema: Schema = {
        "$schema": DRAFT,
        "$id": "https://repokit.invalid/schemas/model_config.schema.json",
        "title": "Triton model configuration (inference.ModelConfig), JSON form",
    }
    schema.update(_message_schema(root))
    schema["$defs"] = defs
    return schema


def schema_text() -> str:
    return json.dumps(model_config_schema(), indent=2) + "\n"


def write_schemas(target: Path | None = None) -> list[Path]:
    """Write schemas/model_config.schema.json (called by ``nox -s generate``)."""
    directory = target or schemas_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / SCHEMA_FILE
    path.write_text(schema_text())
    return [path]


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _error_path(error: ValidationError) -> str:
    path = str(error.json_path).removeprefix("$").removeprefix(".")
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = error.schema.get("properties", {})
        extra = [k for k in error.instance if k not in allowed]
        if len(extra) == 1:
            path = _join(path, extra[0])
    return path


def _enum_message(error: ValidationError) -> str | None:
    description = error.schema.get("description", "") if isinstance(error.schema, dict) else ""
    if ": " not in description:
        return None
    enum_name, names = description.split(": ", 1)
    hint = (
        did_you_mean(str(error.instance), names.split(", "))
        if isinstance(error.instance, str)
        else ""
    )
    return (
        f"{error.instance!r} is not a {enum_name} value{hint}; expected one of {names} "
        "(in any letter case) or its number"
    )


def _error_message(error: ValidationError) -> str:
    if error.validator == "additionalProperties":
        properties = error.schema.get("properties", {})
        allowed = sorted(k for k in properties if "_" in k or k.islower())
        extra = [k for k in error.instance if k not in properties]
        hint = did_you_mean(extra[0], properties) if len(extra) == 1 else ""
        return f"{error.message}{hint}; known fields: {', '.join(allowed)}"
    if error.validator == "anyOf":
        enum = _enum_message(error)
        if enum is not None:
            return enum
        if error.context:
            reasons = "; ".join(sorted({e.message for e in error.context}))
            return f"{error.instance!r} is not valid here: {reasons}"
    return str(error.message)


def _walk(data: object, path: Iterable[str | int]) -> object:
    for part in path:
        if isinstance(data, dict) and isinstance(part, str):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return None
    return data


def _exclusive_conflict(error: ValidationError, data: object) -> tuple[str, str] | None:
    """(path, message) for a oneof/duplicate-name violation found through dependentSchemas."""
    schema_path = list(error.relative_schema_path)
    if "dependentSchemas" not in schema_path:
        return None
    trigger = str(schema_path[schema_path.index("dependentSchemas") + 1])
    parent = _walk(data, error.path)
    names = [trigger]
    if isinstance(parent, dict):
        names += sorted(k for k in parent if k != trigger and parent[k] == error.instance)
    path = error.json_path.removeprefix("$").removeprefix(".")
    quoted = " and ".join(f"'{n}'" for n in sorted(names))
    message = (
        f"fields {quoted} cannot be given together: they are members of one oneof, or one "
        "field under its proto name and its JSON name"
    )
    return _join(path, sorted(names)[-1]), message


class ConfigJsonValidator:
    """Checks config JSON against the generated schema; build once, use for many configs."""

    def __init__(self) -> None:
        self._validator = Draft202012Validator(model_config_schema())

    def schema_errors(self, data: object) -> list[tuple[str, str]]:
        """(field path, message) for each violation, ordered by path, without repeats."""
        found: set[tuple[str, str]] = set()
        for error in self._validator.iter_errors(data):
            conflict = _exclusive_conflict(error, data)
            found.add(conflict or (_error_path(error), _error_message(error)))
        return sorted(found)

    def check(self, text: str, model: str = "", file: str = "") -> list[Diagnostic]:
        return self.load(text, model, file)[1]

    def load(
        self, text: str, model: str = "", file: str = ""
    ) -> tuple[mc.ModelConfig | None, list[Diagnostic]]:
        """Schema-check and parse a JSON config: (config or None, findings)."""

        def diag(
            rule: str, message: str, path: str = "", line: int = 0, col: int = 0
        ) -> Diagnostic:
            return Diagnostic(rule, Severity.ERROR, model, message, file, path, line, col)

        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            return None, [diag(RULE_SYNTAX, f"invalid JSON: {exc.msg}", "", exc.lineno, exc.colno)]
        errors = [diag(RULE_SCHEMA, message, path) for path, message in self.schema_errors(data)]
        if errors:
            return None, errors
        try:
            return parse_json(text), []
        except ConfigParseError as exc:
            return None, [diag(RULE_PARSE, exc.message, "", exc.line, exc.column)]


def validate_config_json(text: str, model: str = "", file: str = "") -> list[Diagnostic]:
    """Findings for a config given as JSON (load API override): syntax, schema, protobuf."""
    return ConfigJsonValidator().check(text, model, file)


def load_config_json(
    text: str, model: str = "", file: str = ""
) -> tuple[mc.ModelConfig | None, list[Diagnostic]]:
    """For ``repokit validate`` on JSON configs: the parsed ModelConfig (None on errors) and the
    findings, so the caller can run the usual rules on it."""
    return ConfigJsonValidator().load(text, model, file)
