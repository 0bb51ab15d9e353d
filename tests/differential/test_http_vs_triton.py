"""The same HTTP requests, valid and malformed, against real Triton 2.51 and repokit serving
the same python-backend repository: same status codes, same outputs, and neither server falls
over. Documented difference: malformed / ill-typed JSON is 400 in repokit where Triton answers
500 (its TritonJson errors are INTERNAL; the KServe v2 spec asks for 400)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson
import pytest
import requests

from tests.differential.triton_reference import TritonReference, running_triton
from tests.frontends.http.server_thread import ServerThread, copy_models, running_server

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_models(tmp_path_factory.mktemp("diff_repo"))


@pytest.fixture(scope="module")
def triton(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonReference]:
    with running_triton(repository, tmp_path_factory.mktemp("triton"), ready=()) as server:
        yield server


@pytest.fixture(scope="module")
def repokit(repository: Path) -> Iterator[ServerThread]:
    # Triton 2.51 predates --allow-client-shm (client shm was always on)
    with running_server(repository, allow_client_shm=True) as srv:
        yield srv


@dataclass
class Case:
    name: str
    method: str
    path: str
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    json_error_500: bool = False  # Triton 500 (TritonJson) -> repokit 400


def _json(doc: object) -> bytes:
    return orjson.dumps(doc)


def _binary(
    doc: dict[str, object], *blobs: bytes, header: str | None = None
) -> tuple[bytes, dict[str, str]]:
    head = orjson.dumps(doc)
    return head + b"".join(blobs), {"Inference-Header-Content-Length": header or str(len(head))}


A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)


def _add_sub_json(**extra: object) -> dict[str, object]:
    return {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": A.ravel().tolist()},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": B.tolist()},
        ],
        **extra,
    }


def _bin_inputs(size0: int = 64, size1: int = 64, dtype: str = "FP32") -> dict[str, object]:
    return {
        "inputs": [
            {
                "name": "INPUT0",
                "shape": [1, 16],
                "datatype": dtype,
                "parameters": {"binary_data_size": size0},
            },
            {
                "name": "INPUT1",
                "shape": [1, 16],
                "datatype": dtype,
                "parameters": {"binary_data_size": size1},
            },
        ]
    }


def _cases() -> list[Case]:
    cases = [
        Case("live", "GET", "/v2/health/live"),
        Case("ready", "GET", "/v2/health/ready"),
        Case("health_bare", "GET", "/v2/health"),
        Case("health_post", "POST", "/v2/health/ready"),
        Case("models_list", "GET", "/v2/models"),
        Case("model_meta", "GET", "/v2/models/add_sub"),
        Case("model_meta_v1", "GET", "/v2/models/add_sub/versions/1"),
        Case("model_meta_v9", "GET", "/v2/models/add_sub/versions/9"),
        Case("model_meta_vx", "GET", "/v2/models/add_sub/versions/x"),
        Case("model_ready", "GET", "/v2/models/identity/ready"),
        Case("model_ready_unknown", "GET", "/v2/models/nope/ready"),
        Case("config", "GET", "/v2/models/add_sub/config"),
        Case("stats_all", "GET", "/v2/models/stats"),
        Case("stats_unknown", "GET", "/v2/models/nope/stats"),
        Case("trailing_slash", "GET", "/v2/models/add_sub/"),
        Case("dotdot", "GET", "/v2/models/../x"),
        Case("pct_dotdot", "GET", "/v2/models/%2e%2e/ready"),
        Case("long_name", "GET", "/v2/models/" + "a" * 5000),
        Case("infer_get", "GET", "/v2/models/add_sub/infer"),
        Case("infer_unknown", "POST", "/v2/models/nope/infer", _json(_add_sub_json())),
        Case("infer_v9", "POST", "/v2/models/add_sub/versions/9/infer", _json(_add_sub_json())),
        Case("infer_json", "POST", "/v2/models/add_sub/infer", _json(_add_sub_json(id="7"))),
        Case(
            "infer_json_nested_bdo",
            "POST",
            "/v2/models/add_sub/infer",
            _json(_add_sub_json(parameters={"binary_data_output": True})),
        ),
        Case("bad_json", "POST", "/v2/models/add_sub/infer", b"{not json", json_error_500=True),
        Case("json_array_root", "POST", "/v2/models/add_sub/infer", b"[1,2]", json_error_500=True),
        Case(
            "no_inputs_member",
            "POST",
            "/v2/models/add_sub/infer",
            _json({"id": "1"}),
            json_error_500=True,
        ),
        Case(
            "shape_strings",
            "POST",
            "/v2/models/add_sub/infer",
            _json(
                {"inputs": [{"name": "INPUT0", "shape": ["1"], "datatype": "FP32", "data": [1]}]}
            ),
            json_error_500=True,
        ),
        Case(
            "too_few_elements",
            "POST",
            "/v2/models/add_sub/infer",
            _json(
                {
                    "inputs": [
                        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [1.0]},
                        {
                            "name": "INPUT1",
                            "shape": [1, 16],
                            "datatype": "FP32",
                            "data": [1.0] * 16,
                        },
                    ]
                }
            ),
            json_error_500=True,
        ),
        Case(
            "unknown_datatype_json",
            "POST",
            "/v2/models/add_sub/infer",
            _json(
                {
                    "inputs": [
                        {
                            "name": "INPUT0",
                            "shape": [1, 16],
                            "datatype": "FLOAT32",
                            "data": [1.0] * 16,
                        },
                        {
                            "name": "INPUT1",
                            "shape": [1, 16],
                            "datatype": "FP32",
                            "data": [1.0] * 16,
                        },
                    ]
                }
            ),
        ),
        Case(
            "wrong_shape",
            "POST",
            "/v2/models/add_sub/infer",
            _json(
                {
                    "inputs": [
                        {"name": "INPUT0", "shape": [16], "datatype": "FP32", "data": [1.0] * 16},
                        {"name": "INPUT1", "shape": [16], "datatype": "FP32", "data": [1.0] * 16},
                    ]
                }
            ),
        ),
        Case(
            "missing_input",
            "POST",
            "/v2/models/add_sub/infer",
            _json(
                {
                    "inputs": [
                        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}
                    ]
                }
            ),
        ),
        Case(
            "unknown_output",
            "POST",
            "/v2/models/add_sub/infer",
            _json(_add_sub_json(outputs=[{"name": "NOPE"}])),
        ),
        Case(
            "triton_param",
            "POST",
            "/v2/models/add_sub/infer",
            _json(_add_sub_json(parameters={"triton_x": 1})),
        ),
        Case(
            "param_list",
            "POST",
            "/v2/models/add_sub/infer",
            _json(_add_sub_json(parameters={"custom": [1]})),
        ),
        Case(
            "no_data_field",
            "POST",
            "/v2/models/add_sub/infer",
            _json({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32"}]}),
        ),
        Case(
            "raw_identity",
            "POST",
            "/v2/models/identity/infer",
            A.tobytes(),
            {"Inference-Header-Content-Length": "0"},
        ),
        Case(
            "raw_add_sub",
            "POST",
            "/v2/models/add_sub/infer",
            A.tobytes(),
            {"Inference-Header-Content-Length": "0"},
        ),
        Case("empty_body", "POST", "/v2/models/add_sub/infer"),
        Case(
            "unsupported_encoding",
            "POST",
            "/v2/models/add_sub/infer",
            b"{}",
            {"Content-Encoding": "br"},
        ),
        Case("index", "POST", "/v2/repository/index"),
        Case(
            "index_bad_ready",
            "POST",
            "/v2/repository/index",
            _json({"ready": 1}),
            json_error_500=True,
        ),
        Case("index_get", "GET", "/v2/repository/index"),
        Case("load_none_mode", "POST", "/v2/repository/models/add_sub/load"),
        Case("load_trailing", "POST", "/v2/repository/models/add_sub/load/"),
        Case("named_repo", "POST", "/v2/repository/other/index"),
        Case("named_repo_load", "POST", "/v2/repository/other/models/add_sub/load"),
        Case("shm_status", "GET", "/v2/systemsharedmemory/status"),
        Case(
            "shm_register_missing_key",
            "POST",
            "/v2/systemsharedmemory/region/r/register",
            _json({"key": "/k", "byte_size": 8}),
        ),
        Case("shm_status_unknown", "GET", "/v2/systemsharedmemory/region/zz/status"),
        Case("logging_get", "GET", "/v2/logging"),
        Case("logging_bad_format", "POST", "/v2/logging", _json({"log_format": "xml"})),
        Case("logging_file", "POST", "/v2/logging", _json({"log_file": "/tmp/x"})),
    ]
    ok_bin, ok_headers = _binary(_bin_inputs(), A.tobytes(), B.tobytes())
    cases.append(Case("infer_binary", "POST", "/v2/models/add_sub/infer", ok_bin, ok_headers))
    out_doc = {
        **_bin_inputs(),
        "outputs": [{"name": "OUTPUT1", "parameters": {"binary_data": True}}, {"name": "OUTPUT0"}],
    }
    body, headers = _binary(out_doc, A.tobytes(), B.tobytes())
    cases.append(
        Case("infer_binary_mixed_outputs", "POST", "/v2/models/add_sub/infer", body, headers)
    )
    body, headers = _binary(_bin_inputs(), A.tobytes(), B.tobytes()[:60])
    cases.append(Case("too_few_bytes", "POST", "/v2/models/add_sub/infer", body, headers))
    body, headers = _binary(_bin_inputs(), A.tobytes(), B.tobytes(), b"xx")
    cases.append(Case("extra_bytes", "POST", "/v2/models/add_sub/infer", body, headers))
    body, headers = _binary(_bin_inputs(64, 6400), A.tobytes(), B.tobytes())
    cases.append(Case("size_beyond_body", "POST", "/v2/models/add_sub/infer", body, headers))
    body, headers = _binary(_bin_inputs(60, 68), A.tobytes(), B.tobytes())
    cases.append(Case("wrong_byte_sizes", "POST", "/v2/models/add_sub/infer", body, headers))
    body, headers = _binary(_bin_inputs(dtype="FP99"), A.tobytes(), B.tobytes())
    cases.append(Case("unknown_datatype_binary", "POST", "/v2/models/add_sub/infer", body, headers))
    body, _h = _binary(_bin_inputs(), A.tobytes(), B.tobytes())
    cases.append(
        Case(
            "header_not_number",
            "POST",
            "/v2/models/add_sub/infer",
            body,
            {"Inference-Header-Content-Length": "abc"},
        )
    )
    cases.append(
        Case(
            "header_negative",
            "POST",
            "/v2/models/add_sub/infer",
            body,
            {"Inference-Header-Content-Length": "-5"},
        )
    )
    cases.append(
        Case(
            "header_too_big",
            "POST",
            "/v2/models/add_sub/infer",
            body,
            {"Inference-Header-Content-Length": str(len(body) + 10)},
        )
    )
    cases.append(
        Case(
            "header_short",
            "POST",
            "/v2/models/add_sub/infer",
            body,
            {"Inference-Header-Content-Length": "10"},
            json_error_500=True,
        )
    )
    cases.append(
        Case(
            "no_header_with_blobs",
            "POST",
            "/v2/models/add_sub/infer",
            body,
            {},
            json_error_500=True,
        )
    )
    return cases


CASES = _cases()


def _send(base: str, case: Case) -> requests.Response:
    return requests.request(
        case.method, base + case.path, data=case.body, headers=case.headers, timeout=60
    )


TRITON_DROPS = 5


def _send_to_triton(base: str, case: Case) -> requests.Response:
    """Triton's answer, asked again when it closes the connection without one: its HTTP
    server (evhtp) drops some requests whose head is several KiB long (measured on 2.51 at 8
    clients: 70 of 400 with a 8,000-character model name, all with 16,000; once in CI with the
    5,000 of ``long_name``). repokit answers every one of them (404, or 413 past its head
    limit), which the test still asserts on its side."""
    for _ in range(TRITON_DROPS - 1):
        try:
            return _send(base, case)
        except requests.ConnectionError:
            continue
    return _send(base, case)


def _outputs(response: requests.Response) -> dict[str, np.ndarray]:
    length = response.headers.get("Inference-Header-Content-Length")
    head = response.content if length is None else response.content[: int(length)]
    offset = 0 if length is None else int(length)
    doc = orjson.loads(head)
    out: dict[str, np.ndarray] = {}
    for entry in doc.get("outputs", []):
        size = entry.get("parameters", {}).get("binary_data_size")
        if size is not None:
            out[entry["name"]] = np.frombuffer(
                response.content[offset : offset + size], dtype=np.float32
            )
            offset += size
        else:
            out[entry["name"]] = np.asarray(entry["data"], dtype=np.float32)
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_same_status_and_outputs(
    case: Case, triton: TritonReference, repokit: ServerThread
) -> None:
    expected = _send_to_triton(triton.url, case)
    got = _send(f"http://{repokit.http_url}", case)
    if case.json_error_500 and expected.status_code == 500:
        assert got.status_code == 400, got.text  # documented: 400 per the KServe spec
    else:
        assert got.status_code == expected.status_code, (expected.text, got.text)
    if expected.status_code != 200:
        if expected.content:
            assert "error" in got.json()
        return
    expected_type = expected.headers.get("Content-Type", "")
    assert got.headers.get("Content-Type", "") == expected_type or not expected.content
    if case.path.endswith("/infer"):
        assert (expected.headers.get("Inference-Header-Content-Length") is None) == (
            got.headers.get("Inference-Header-Content-Length") is None
        )
        want, have = _outputs(expected), _outputs(got)
        assert want.keys() == have.keys()
        for name in want:
            np.testing.assert_array_equal(want[name], have[name])
        head_e = orjson.loads(
            expected.content[
                : int(
                    expected.headers.get("Inference-Header-Content-Length", len(expected.content))
                )
            ]
        )
        head_g = orjson.loads(
            got.content[: int(got.headers.get("Inference-Header-Content-Length", len(got.content)))]
        )
        assert [(o["name"], o["datatype"], o["shape"]) for o in head_e["outputs"]] == [
            (o["name"], o["datatype"], o["shape"]) for o in head_g["outputs"]
        ]
        assert head_e.get("id") == head_g.get("id")
        assert head_e["model_version"] == head_g["model_version"]


def test_both_servers_still_healthy(triton: TritonReference, repokit: ServerThread) -> None:
    for case in CASES:  # replay everything, then check health
        _send(f"http://{repokit.http_url}", case)
    assert requests.get(f"{triton.url}/v2/health/ready", timeout=10).status_code == 200
    assert requests.get(f"http://{repokit.http_url}/v2/health/ready", timeout=10).status_code == 200
