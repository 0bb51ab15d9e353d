"""Trace settings below the protocol: sampling, where collected traces are written, tensor
formatting, and the manager's fallback rules."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from repokit.backends.base import Timing
from repokit.core.tracing.manager import TraceManager
from repokit.core.tracing.options import parse_trace_flags
from repokit.core.tracing.setting import TIMESTAMPS, TraceSetting
from repokit.core.tracing.trace import _format_values
from repokit.core.tracing.trace_file import TraceFile
from repokit.errors import RepokitError


def _setting(tmp_path: Path, **values: int) -> TraceSetting:
    merged = {"level": TIMESTAMPS, "rate": 1, "count": -1, "log_frequency": 0, **values}
    return TraceSetting(file=TraceFile(str(tmp_path / "t.json")), mode="triton", **merged)


def test_sampling_rate_and_count(tmp_path: Path) -> None:
    setting = _setting(tmp_path, rate=2, count=2)
    assert [setting.sample() for _ in range(6)] == [False, True, False, True, False, False]
    assert setting.count == 0


def test_invalid_setting_samples_nothing_unless_forced(tmp_path: Path) -> None:
    off = _setting(tmp_path, level=0)
    assert off.invalid_reason == "tracing is disabled"
    assert not off.sample()
    assert off.sample(force=True)
    no_file = TraceSetting(
        level=TIMESTAMPS, rate=1, count=-1, log_frequency=0, file=TraceFile(""), mode="triton"
    )
    assert no_file.invalid_reason == "trace file name is not given"


def test_count_exhausted_writes_an_index_file(tmp_path: Path) -> None:
    setting = _setting(tmp_path, count=2)
    for number in (1, 2):
        assert setting.sample()
        setting.collect([json.dumps({"id": number})])
    # log_frequency 0, but the count ran out and both traces are in: written at once
    assert json.loads((tmp_path / "t.json.0").read_text()) == [{"id": 1}, {"id": 2}]
    assert not (tmp_path / "t.json").exists()


def test_main_file_is_one_array_closed_at_the_end(tmp_path: Path) -> None:
    file = TraceFile(str(tmp_path / "t.json"))
    file.save(['{"id":1}'], to_index_file=False)
    file.save(['{"id":2}', '{"id":2,"timestamps":[]}'], to_index_file=False)
    file.close()
    assert json.loads((tmp_path / "t.json").read_text()) == [
        {"id": 1},
        {"id": 2},
        {"id": 2, "timestamps": []},
    ]


def test_unwritable_trace_file_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    file = TraceFile(str(tmp_path / "missing" / "t.json"))
    file.save(['{"id":1}'], to_index_file=True)
    assert "failed creating trace file" in caplog.text


@pytest.mark.parametrize(
    ("datatype", "data", "text"),
    [
        ("FP32", np.array([[0.5, 1.0, 1e-7]], dtype=np.float32), "0.5,1,1e-07"),
        ("FP64", np.array([1 / 3]), "0.333333"),
        ("INT8", np.array([-1, 2], dtype=np.int8), "-1,2"),
        ("UINT64", np.array([2**64 - 1], dtype=np.uint64), "18446744073709551615"),
        ("BOOL", np.array([True, False]), "1,0"),
        ("BYTES", np.array([b"ab", b"c"], dtype=object), '"ab","c"'),
        ("FP16", np.array([1.0], dtype=np.float16), ""),
    ],
)
def test_tensor_values_as_triton_writes_them(datatype: str, data: object, text: str) -> None:
    assert _format_values(datatype, data) == text


def test_manager_fallback_and_refusals(tmp_path: Path) -> None:
    manager = TraceManager(parse_trace_flags([f"triton,file={tmp_path / 't.json'}"]))
    assert not manager.enabled
    assert manager.sample("m") is None
    manager.update("m", {"trace_level": ["TIMESTAMPS"], "trace_rate": ["1"]})
    assert manager.enabled  # a model's level turns sampling on
    trace = manager.sample("m")
    assert trace is not None and trace.model_name == "m"
    assert manager.sample("other") is None  # the global setting is still OFF
    manager.update("m", {"trace_level": None, "trace_rate": []})  # nothing of its own left
    assert manager.settings("m") == manager.settings()
    assert not manager.enabled
    with pytest.raises(RepokitError, match="trace file location can not be updated"):
        manager.update("", {"trace_file": ["x"]})
    with pytest.raises(RepokitError, match="expect only 1 value for 'log_frequency'"):
        manager.update("", {"log_frequency": ["1", "2"]})
    manager.stop()


@pytest.mark.parametrize("log_frequency", ["0", "3"])
def test_a_trace_ending_after_the_server_stopped_is_still_written(
    tmp_path: Path, log_frequency: str
) -> None:
    # a response still being sent at exit, or a frontend worker's last timestamps arriving
    # after the manager stopped: its trace goes into the closed file, the earlier ones stay
    base = tmp_path / "t.json"
    manager = TraceManager(
        parse_trace_flags(
            [
                f"triton,file={base}",
                "level=TIMESTAMPS",
                "rate=1",
                f"triton,log-frequency={log_frequency}",
            ]
        )
    )
    early, late = manager.sample("m"), manager.sample("m")
    assert early is not None and late is not None
    for number, trace in enumerate((early, late), start=1):
        trace.start_request("m", 1, f"r{number}")
    early.finish()
    manager.stop()
    late.stamp("HTTP_SEND_END")
    late.finish()
    if log_frequency == "0":
        documents = [json.loads(base.read_text())]
    else:  # the early trace flushed at stop, the late one at once in a file of its own
        documents = [json.loads(Path(f"{base}.{i}").read_text()) for i in (0, 1)]
        assert not Path(f"{base}.2").exists()
    headers = [item for document in documents for item in document if "model_name" in item]
    assert [h["request_id"] for h in headers] == ["r1", "r2"]
    late_stamps = [item for document in documents for item in document if "timestamps" in item]
    assert "HTTP_SEND_END" in json.dumps(late_stamps)


def test_index_file_appears_only_when_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader polling for ``<file>.N`` never opens it empty (CI saw '' once): the file is
    written under a hidden name and renamed into place."""
    seen: list[tuple[str, bool, str]] = []
    real_replace = os.replace

    def replace(source: str, target: str) -> None:
        seen.append((Path(source).name, Path(target).exists(), Path(source).read_text()))
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    file = TraceFile(str(tmp_path / "t.json"))
    file.save(['{"id":1}', '{"id":1,"timestamps":[]}'], to_index_file=True)
    assert seen == [(".t.json.0.partial", False, '[{"id":1},{"id":1,"timestamps":[]}]')]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json.0"]


def test_failed_index_file_write_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(source: str, target: str) -> None:
        raise PermissionError(13, "Permission denied", target)

    monkeypatch.setattr(os, "replace", refuse)
    TraceFile(str(tmp_path / "t.json")).save(['{"id":1}'], to_index_file=True)
    assert "failed creating trace file" in caplog.text
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("started", [0, 5_000, 900])
def test_compute_timestamps_start_when_the_instance_started(tmp_path: Path, started: int) -> None:
    """COMPUTE_START is the instance's own moment when the backend reports it (a reply read
    late on a busy machine moves nothing), never before QUEUE_START; without it, QUEUE_START
    plus the queue time. COMPUTE_END is when the server had the result."""
    manager = TraceManager(
        parse_trace_flags([f"triton,file={tmp_path / 't.json'}", "level=TIMESTAMPS", "rate=1"])
    )
    trace = manager.sample("m")
    assert trace is not None
    queue_start, queue_ns, ended = 1_000, 3_000, 50_000
    trace.computed(queue_start, queue_ns, Timing(100, 200, 300, started), ended)
    stamps = dict(trace.events)
    start = {0: queue_start + queue_ns, 5_000: 5_000, 900: queue_start}[started]
    assert stamps == {
        "COMPUTE_START": start,
        "COMPUTE_INPUT_END": start + 100,
        "COMPUTE_OUTPUT_START": ended - 300,
        "COMPUTE_END": ended,
    }
    manager.stop()
