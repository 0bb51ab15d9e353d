"""File names in a config override must stay inside the model directory.

A config sent with a load request (the ``config`` load parameter) comes from a client, not from
the repository: its file-name fields could otherwise point the backend at any file on the
machine (Triton 2.51 loads ``default_model_filename: "../../../x/model.py"`` and runs it). Each
field is resolved the way the server uses it (model files under the version folder, label files
under the model directory, warmup data under ``warmup/``); an absolute name, a NUL byte, or one
that climbs out of the model directory is refused. Repository configs are trusted and are not
checked here.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

from repokit.protocol.generated import model_config_pb2 as mc


def _file_fields(config: mc.ModelConfig) -> Iterator[tuple[str, str, str]]:
    """(field path, value, folder the value is relative to) for every file-name field set."""
    if config.default_model_filename:
        yield "default_model_filename", config.default_model_filename, "version"
    for key in sorted(config.cc_model_filenames):
        yield f"cc_model_filenames[{key}]", config.cc_model_filenames[key], "version"
    for index, output in enumerate(config.output):
        if output.label_filename:
            yield f"output[{index}].label_filename", output.label_filename, ""
    for index, warmup in enumerate(config.model_warmup):
        for name in sorted(warmup.inputs):
            data_file = warmup.inputs[name].input_data_file
            if data_file:
                yield f"model_warmup[{index}].inputs[{name}].input_data_file", data_file, "warmup"


def _outside(value: str, folder: str) -> bool:
    if value.startswith("/") or "\0" in value:
        return True
    resolved = posixpath.normpath(posixpath.join(folder, value))
    return resolved == ".." or resolved.startswith("../")


def override_path_problem(config: mc.ModelConfig) -> str | None:
    """The first file-name field of an override that leaves the model directory, as a message."""
    for field, value, folder in _file_fields(config):
        if _outside(value, folder):
            return (
                f"config override field '{field}' is '{value}', which is outside the model "
                "directory; file names in a config override must be relative and stay within "
                "the model directory"
            )
    return None
