"""``--rate-limit-resource NAME:COUNT:DEVICE`` on this server: CPU instances run on device 0 (as
in Triton), so the count given for device 0 is theirs and another device's count is not; a
global resource's count is the largest any flag gives it (checked against Triton 2.51: a global
need of 2 loads with G:1:0 and G:2:1, and fails with G:1:0 and G:1:1). Read from recorded
overlaps."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from repokit.scheduler.rate_limiter import parse_resource_flags
from tests.e2e.rate_limit_models import max_concurrency, write_model
from tests.frontends.http.server_thread import running_server


def _overlap(tmp_path: Path, flags: list[str], glob: bool, wait_s: str) -> int:
    repo, log = tmp_path / "models", tmp_path / "log"
    for name in ("dev_a", "dev_b"):
        write_model(
            repo,
            name,
            log_path=log,
            resources=[("R", 1, glob)],
            parameters={"wait_for_peer_s": wait_s},
        )
    with running_server(
        repo, rate_limit="execution_count", rate_limit_resources=parse_resource_flags(flags)
    ) as server:

        def one(model: str) -> None:
            client = httpclient.InferenceServerClient(server.http_url)
            item = httpclient.InferInput("INPUT0", [1], "FP32")
            item.set_data_from_numpy(np.ones((1,), np.float32))
            assert client.infer(model, [item]).as_numpy("OUTPUT0") is not None
            client.close()

        with ThreadPoolExecutor(2) as pool:
            list(pool.map(one, ["dev_a", "dev_b"]))
    return max_concurrency(log)


@pytest.mark.parametrize(
    ("flags", "glob", "wait_s", "expected"),
    [
        (["R:2:0", "R:1:1"], False, "60", 2),  # device 0 has 2: both run (they wait for it)
        (["R:1:0", "R:5:1"], False, "0.3", 1),  # device 1's 5 is not device 0's
        (["R:1:0", "R:2:1"], True, "60", 2),  # global: the largest count given, 2
    ],
)
def test_device_counts_apply_to_cpu_instances_on_device_0(
    tmp_path: Path, flags: list[str], glob: bool, wait_s: str, expected: int
) -> None:
    assert _overlap(tmp_path, flags, glob, wait_s) == expected
