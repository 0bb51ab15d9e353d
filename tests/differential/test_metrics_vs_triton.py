"""/metrics against real Triton 2.51 on the same python-backend repository, with latency
summaries on: for every family both servers expose, the same type, HELP text and label names
(values differ by nature: durations, memory)."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from repokit.core.settings import MetricsSettings
from tests.differential.triton_reference import TritonReference, running_triton
from tests.frontends.http.server_thread import ServerThread, copy_models, running_server

pytestmark = pytest.mark.triton

FLAGS = ("--metrics-config=summary_latencies=true", "--metrics-interval-ms=200")
SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(\{(.*)\})? (\S+)$")
LABEL = re.compile(r'(\w+)="(?:[^"\\]|\\.)*"')
BODY = {
    "inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [2.0] * 16},
    ]
}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_models(tmp_path_factory.mktemp("metrics_repo"), ("add_sub",))


@pytest.fixture(scope="module")
def triton(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonReference]:
    with running_triton(
        repository, tmp_path_factory.mktemp("triton"), FLAGS, ready=("add_sub",)
    ) as server:
        yield server


@pytest.fixture(scope="module")
def repokit(repository: Path) -> Iterator[ServerThread]:
    metrics = MetricsSettings(interval_ms=200, summary_latencies=True)
    with running_server(repository, metrics=metrics, allow_grpc=True) as server:
        yield server


def _families(text: str) -> dict[str, tuple[str, str, frozenset[tuple[str, ...]]]]:
    """family -> (type, help, the label-name tuples of its samples)."""
    helps: dict[str, str] = {}
    types: dict[str, str] = {}
    labels: dict[str, set[tuple[str, ...]]] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            helps[name] = help_text
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            types[name] = kind
        elif line and not line.startswith("#"):
            match = SAMPLE.match(line)
            assert match is not None, line
            name = re.sub(r"_(count|sum)$", "", match.group(1))
            if name not in types:
                name = match.group(1)
            labels.setdefault(name, set()).add(tuple(LABEL.findall(match.group(3) or "")))
    return {
        name: (types[name], helps.get(name, ""), frozenset(labels.get(name, set())))
        for name in types
    }


def _scrape(infer_url: str, metrics_url: str) -> str:
    response = requests.post(f"{infer_url}/v2/models/add_sub/infer", json=BODY, timeout=30)
    assert response.status_code == 200, response.text
    with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=30) as answer:
        return str(answer.read().decode())


def test_families_both_have_match(triton: TritonReference, repokit: ServerThread) -> None:
    theirs = _families(_scrape(triton.endpoints.http, triton.endpoints.metrics))
    ours = _families(_scrape(repokit.endpoints.http, repokit.endpoints.metrics))
    shared = sorted(set(theirs) & set(ours))
    wanted = {
        "nv_cpu_utilization",
        "nv_cpu_memory_total_bytes",
        "nv_cpu_memory_used_bytes",
        "nv_inference_pending_request_count",
        "nv_inference_request_summary_us",
        "nv_inference_queue_summary_us",
        "nv_inference_compute_input_summary_us",
        "nv_inference_compute_infer_summary_us",
        "nv_inference_compute_output_summary_us",
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_request_duration_us",
    }
    assert wanted <= set(shared), sorted(set(theirs) - set(ours))
    for name in shared:
        assert ours[name] == theirs[name], name
