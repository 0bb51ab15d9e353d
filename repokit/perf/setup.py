"""Everything before the first request: ask the server about the model, build and encode data.

:func:`prepare_session` reads server metadata (does it offer the statistics extension?), the
model's metadata and config (and the configs of an ensemble's steps, recursively), builds the
data set (``--input-data``), places it in shared memory when asked, and pre-encodes one request
per sample with the transport.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repokit.perf.errors import option_error
from repokit.perf.input_json import check_batchable, json_dataset
from repokit.perf.inputs import (
    DataSet,
    batched,
    check_shape_names,
    directory_dataset,
    synthetic_dataset,
)
from repokit.perf.model_info import ModelInfo, build_model_info, check_batch_size
from repokit.perf.options import PerfOptions
from repokit.perf.shared_memory import SystemShm
from repokit.perf.transports.base import Transport
from repokit.perf.workload import SequenceSource, Workload
from repokit.protocol.tensor_codec import wire_dtype

MAX_ENSEMBLE_DEPTH = 8


@dataclass
class Session:
    info: ModelInfo
    workload: Workload
    sequences: SequenceSource | None
    include_server_stats: bool
    composing_models: list[str]
    shm: SystemShm | None
    bls_models: frozenset[str] = frozenset()  # --bls-composing-models


def load_dataset(options: PerfOptions, info: ModelInfo) -> DataSet:
    sources = options.input_data or ["random"]
    kinds = {"zero", "random"}
    if len(sources) == 1 and sources[0] in kinds:
        return synthetic_dataset(
            info,
            sources[0],
            options.shapes,
            string_length=options.string_length,
            string_data=options.string_data,
            seed=options.seed,
        )
    if any(s in kinds for s in sources):
        raise option_error("--input-data zero/random cannot be combined with other sources")
    paths = [Path(s) for s in sources]
    directories = [p for p in paths if p.is_dir()]
    if directories:
        if len(paths) > 1:
            raise option_error("--input-data takes one directory, or one or more JSON files")
        return directory_dataset(info, directories[0], options.shapes)
    return json_dataset(paths, info, options.shapes)


def output_region_sizes(info: ModelInfo, options: PerfOptions) -> dict[str, int]:
    """perf_analyzer's output regions: a fixed-size output's bytes for the batch, else
    --output-shared-memory-size per batch item (BYTES and variable dims)."""
    sizes: dict[str, int] = {}
    for spec in info.outputs:
        per_item = options.output_shared_memory_size
        if spec.datatype != "BYTES" and all(d >= 0 for d in spec.dims):
            per_item = max(math.prod(spec.dims) * wire_dtype(spec.datatype).itemsize, 1)
        sizes[spec.name] = per_item * max(options.batch_size, 1)
    return sizes


async def _composing(transport: Transport, info: ModelInfo) -> list[str]:
    names: list[str] = []
    pending = list(info.ensemble_steps)
    depth = 0
    while pending and depth < MAX_ENSEMBLE_DEPTH:
        depth += 1
        next_round: list[tuple[str, str]] = []
        for name, _version in pending:
            if name in names:
                continue
            names.append(name)
            config = await transport.model_config(name, "")
            steps = (config or {}).get("ensemble_scheduling", {}).get("step", []) or []
            next_round.extend((str(s.get("model_name", "")), "") for s in steps)
        pending = next_round
    return names


async def prepare_session(options: PerfOptions, transport: Transport) -> Session:
    server = await transport.server_metadata()
    include_stats = "statistics" in (server.get("extensions") or [])
    metadata = await transport.model_metadata(options.model, options.version)
    config = await transport.model_config(options.model, options.version)
    info = build_model_info(options.model, options.version, metadata, config)
    check_batch_size(info, options.batch_size)
    check_shape_names(info, options.shapes)
    composing = await _composing(transport, info) if info.is_ensemble else []
    for name in options.bls_composing_models:
        if await transport.model_config(name, "") is None:
            raise option_error(
                f"--bls-composing-models names '{name}', which the server does not have"
            )
        if name not in composing:
            composing.append(name)
    dataset = load_dataset(options, info)
    check_batchable(dataset.streams, options.batch_size)
    batching = info.max_batch_size > 0
    types = {t.name: t.datatype for t in info.inputs}
    outputs = [(t.name, t.datatype) for t in info.outputs]
    shm: SystemShm | None = None
    output_regions: dict[str, tuple[str, int, int]] = {}
    if options.shared_memory == "system":
        shm = SystemShm(transport)
        output_regions = await shm.output_regions(output_region_sizes(info, options))
    streams: list[list[Any]] = []
    expected: list[list[Any]] = []
    index = 0
    for stream in dataset.streams:
        prepared_stream: list[Any] = []
        for sample in stream:
            tensors = {
                name: (types[name], batched(array, options.batch_size, batching))
                for name, array in sample.tensors.items()
            }
            binding = None
            if shm is not None:
                binding = await shm.bind_sample(index, tensors, output_regions)
            prepared_stream.append(
                transport.prepare(
                    options.model, options.version, tensors, outputs, binding, info.decoupled
                )
            )
            index += 1
        streams.append(prepared_stream)
        expected.append([s.expected if shm is None else None for s in stream])
    workload = Workload(streams, expected, info.is_sequence, dataset.stream_lengths_from_data)
    sequences = None
    if info.is_sequence:
        start, end = options.sequence_id_range
        sequences = SequenceSource(
            id_start=start,
            id_end=end,
            length=options.sequence_length,
            variation_pct=options.sequence_length_variation,
            use_stream_lengths=dataset.stream_lengths_from_data
            and not options.sequence_length_specified,
            stream_count=len(streams),
            stream_lengths=[len(s) for s in streams],
            seed=options.seed,
        )
    bls = frozenset(options.bls_composing_models)
    return Session(info, workload, sequences, include_stats, composing, shm, bls)
