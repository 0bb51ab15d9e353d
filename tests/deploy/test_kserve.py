"""repokit deploy kserve: the manifests validate against the Kubernetes/KServe/Istio schema
subsets in schemas/kubernetes/, the schema refuses what the API server would refuse (or drop),
the container's command line really serves the repository with working probe paths, and bad
input gets a clear error."""

from __future__ import annotations

import copy
import shutil
import signal
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from repokit.cli.main import make_app
from repokit.deploy.bundle import build_bundle, repository_facts, write_bundle
from repokit.deploy.kserve import (
    AFFINITY_HEADER,
    GRPC_PORT,
    HTTP_PORT,
    METRICS_PORT,
    KServeOptions,
    dockerfile,
    load_schema,
    manifests,
    schema_errors,
    serve_args,
)
from repokit.paths import default_sample_repository, sample_repos_dir, schemas_dir
from tests.cli.serve_process import ServeProcess

SCHEMA = load_schema(schemas_dir())


def _options(**changes: Any) -> KServeOptions:
    values: dict[str, Any] = {
        "name": "models",
        "storage_uri": "s3://bucket/compiled",
        "image": "registry.example/repokit:0.1",
    }
    values.update(changes)
    return KServeOptions(**values)


def _by_kind(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in documents}


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"cluster_runtime": True, "namespace": "serving"},
        {"gpu": True, "grpc": True, "min_replicas": 2, "max_replicas": 8},
        {"sequence_models": ("accumulate",), "namespace": "serving"},
    ],
)
def test_every_manifest_validates(changes: dict[str, Any]) -> None:
    documents = manifests(_options(**changes))
    for document in documents:
        assert schema_errors(document, SCHEMA) == []
    kinds = [d["kind"] for d in documents]
    runtime = "ClusterServingRuntime" if changes.get("cluster_runtime") else "ServingRuntime"
    assert kinds[:2] == [runtime, "InferenceService"]
    assert ("DestinationRule" in kinds) == bool(changes.get("sequence_models"))


def test_runtime_follows_kserve_conventions() -> None:
    o = _options(grace_period_secs=90)
    docs = _by_kind(manifests(o))
    runtime, isvc = docs["ServingRuntime"], docs["InferenceService"]
    spec = runtime["spec"]
    [container] = spec["containers"]
    assert container["name"] == "kserve-container"
    assert container["args"][:3] == ["repokit", "serve", "--model-repository=/mnt/models"]
    assert f"--http-port={HTTP_PORT}" in container["args"] and HTTP_PORT == 8080
    assert f"--grpc-port={GRPC_PORT}" in container["args"] and GRPC_PORT == 9000
    assert spec["protocolVersions"] == ["v2", "grpc-v2"]
    assert spec["annotations"] == {
        "prometheus.kserve.io/port": str(METRICS_PORT),
        "prometheus.kserve.io/path": "/metrics",
    }
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert container["startupProbe"]["httpGet"]["port"] == HTTP_PORT
    # the grace period covers the preStop sleep, the drain (serve's exit timeout) and the exit
    sleep = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    predictor = isvc["spec"]["predictor"]
    assert predictor["terminationGracePeriodSeconds"] == 90
    assert f"--exit-timeout-secs={o.exit_timeout_secs}" in container["args"]
    assert sleep + o.exit_timeout_secs < 90
    model = predictor["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["modelFormat"] == {"name": "triton", "version": "2"}
    assert spec["supportedModelFormats"] == [
        {"name": "triton", "version": "2", "autoSelect": False}
    ]
    assert model["storageUri"] == "s3://bucket/compiled" and model["protocolVersion"] == "v2"
    assert isvc["metadata"]["annotations"]["serving.kserve.io/enable-prometheus-scraping"] == (
        "true"
    )


def test_grpc_gpu_and_autoscaling() -> None:
    docs = _by_kind(manifests(_options(gpu=True, grpc=True, min_replicas=2, max_replicas=6)))
    model = docs["InferenceService"]["spec"]["predictor"]["model"]
    assert model["protocolVersion"] == "grpc-v2"
    assert model["ports"] == [{"name": "h2c", "containerPort": GRPC_PORT, "protocol": "TCP"}]
    [container] = docs["ServingRuntime"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    predictor = docs["InferenceService"]["spec"]["predictor"]
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (2, 6)
    assert predictor["scaleMetric"] == "cpu"


def test_sequence_affinity_rule_hashes_the_correlation_header() -> None:
    docs = _by_kind(manifests(_options(sequence_models=("accumulate",), namespace="serving")))
    rule = docs["DestinationRule"]
    assert rule["spec"]["host"] == "models-predictor.serving.svc.cluster.local"
    balancer = rule["spec"]["trafficPolicy"]["loadBalancer"]
    assert balancer == {"consistentHash": {"httpHeaderName": AFFINITY_HEADER}}
    no_namespace = _by_kind(manifests(_options(sequence_models=("accumulate",))))
    assert no_namespace["DestinationRule"]["spec"]["host"] == "models-predictor"


def _broken(kind: str, edit: Any) -> dict[str, Any]:
    documents = _by_kind(
        manifests(_options(sequence_models=("a",))) + manifests(_options(cluster_runtime=True))
    )
    document = copy.deepcopy(documents[kind])
    edit(document)
    return document


def _container(d: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = d["spec"]["containers"][0]
    return result


@pytest.mark.parametrize(
    ("kind", "edit", "where"),
    [
        ("ServingRuntime", lambda d: d["spec"].pop("containers"), "spec"),
        (
            "ServingRuntime",
            lambda d: _container(d)["readinessProbe"].pop("httpGet"),
            "spec.containers.0.readinessProbe",
        ),
        (
            "ServingRuntime",
            lambda d: _container(d)["livenessProbe"]["httpGet"].update(port=70000),
            "spec.containers.0.livenessProbe.httpGet.port",
        ),
        (
            "ServingRuntime",
            lambda d: _container(d).update(readinesProbe={}),
            "spec.containers.0",
        ),
        (
            "ServingRuntime",
            lambda d: _container(d)["resources"]["limits"].update(memory="2 GB"),
            "spec.containers.0.resources.limits.memory",
        ),
        ("ServingRuntime", lambda d: d["metadata"].update(name="Models"), "metadata.name"),
        (
            "ClusterServingRuntime",
            lambda d: d["metadata"].update(namespace="x"),
            "metadata",
        ),
        (
            "InferenceService",
            lambda d: d["spec"]["predictor"]["model"].update(storageUri="bucket/models"),
            "spec.predictor.model.storageUri",
        ),
        (
            "InferenceService",
            lambda d: d["spec"]["predictor"]["model"].update(protocolVersion="v3"),
            "spec.predictor.model.protocolVersion",
        ),
        (
            "InferenceService",
            lambda d: d["spec"]["predictor"].update(terminationGracePeriodSeconds="60"),
            "spec.predictor.terminationGracePeriodSeconds",
        ),
        ("InferenceService", lambda d: d.update(apiVersion="serving.kserve.io/v1"), "apiVersion"),
        (
            "DestinationRule",
            lambda d: d["spec"]["trafficPolicy"]["loadBalancer"]["consistentHash"].update(
                useSourceIp=True
            ),
            "spec.trafficPolicy.loadBalancer.consistentHash",
        ),
    ],
)
def test_schema_refuses_broken_manifests(kind: str, edit: Any, where: str) -> None:
    errors = schema_errors(_broken(kind, edit), SCHEMA)
    assert errors, "the schema accepted a broken manifest"
    assert any(e.startswith(f"{kind}: {where}:") for e in errors), errors


def test_unknown_kind_is_named() -> None:
    assert schema_errors({"kind": "Deployment"}, SCHEMA) == [
        "kind 'Deployment': no schema (known: ClusterServingRuntime, DestinationRule, "
        "InferenceService, ServingRuntime)"
    ]


def test_repository_facts_of_the_sample() -> None:
    facts = repository_facts(default_sample_repository())
    assert "add_sub" in facts.models and facts.error_count == 0
    assert facts.sequence_models == ("accumulate",)
    assert facts.gpu_models == ()


def _tensorrt_repo(root: Path) -> Path:
    (root / "plan" / "1").mkdir(parents=True)
    (root / "plan" / "1" / "model.plan").write_bytes(b"")
    (root / "plan" / "config.pbtxt").write_text(
        'name: "plan"\nplatform: "tensorrt_plan"\nmax_batch_size: 8\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )
    return root


def test_cli_writes_yaml_dockerfile_and_wheels_dir(tmp_path: Path) -> None:
    out = tmp_path / "deploy"
    result = CliRunner().invoke(
        make_app(),
        [
            "deploy",
            "kserve",
            str(default_sample_repository()),
            "--storage-uri",
            "pvc://models/compiled",
            "--image",
            "repokit:0.1",
            "-o",
            str(out),
            "--replicas",
            "2:4",
            "--name",
            "samples",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "ServingRuntime samples-repokit and InferenceService samples" in result.output
    assert f"'{AFFINITY_HEADER}' header" in result.output
    documents = list(yaml.safe_load_all((out / "kserve.yaml").read_text()))
    assert [d["kind"] for d in documents] == [
        "ServingRuntime",
        "InferenceService",
        "DestinationRule",
    ]
    for document in documents:
        assert schema_errors(document, SCHEMA) == []
    assert (out / "wheels" / "README.txt").is_file()
    assert "FROM ${BASE_IMAGE}" in (out / "Dockerfile").read_text()


def test_gpu_follows_the_repository_unless_told(tmp_path: Path) -> None:
    repo = _tensorrt_repo(tmp_path / "repo")
    auto = build_bundle(repo, _options(), None)
    assert auto.options.gpu and "nvidia/cuda" in auto.dockerfile
    assert 'REPOKIT_EXTRAS="tensorrt"' in auto.dockerfile
    told = build_bundle(repo, _options(), False)
    assert not told.options.gpu and "python:3.11-slim" in told.dockerfile
    written = write_bundle(told, tmp_path / "out")
    assert [p.name for p in written] == ["kserve.yaml", "Dockerfile", "wheels"]


def _install_step(text: str) -> str:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("RUN set -e; wheel="))
    step = []
    for line in lines[start:]:
        step.append(line.removesuffix("\\"))
        if not line.endswith("\\"):
            break
    return " ".join(step).removeprefix("RUN ")


@pytest.mark.parametrize(
    ("wheel", "extras", "version", "expected"),
    [
        (False, "", "", "repokit"),
        (False, "tensorrt", "0.1.0", "repokit==0.1.0[tensorrt]"),
        (True, "tensorrt", "", "/WHEELS/repokit-0.1.0-py3-none-any.whl[tensorrt]"),
        (True, "", "9.9", "/WHEELS/repokit-0.1.0-py3-none-any.whl"),
    ],
)
def test_dockerfile_install_step_picks_the_wheel_then_the_index(
    tmp_path: Path, wheel: bool, extras: str, version: str, expected: str
) -> None:
    """The RUN step's shell logic, with pip and repokit replaced by functions that print."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    if wheel:
        (wheels / "repokit-0.1.0-py3-none-any.whl").write_bytes(b"")
    step = _install_step(dockerfile(_options())).replace("/wheels", str(wheels))
    script = (
        'pip() { echo "PIP $*"; }\nrepokit() { :; }\n'
        f'REPOKIT_EXTRAS="{extras}"\nREPOKIT_VERSION="{version}"\n{step}\n'
    )
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True)
    wanted = expected.replace("/WHEELS", str(wheels))
    assert done.stdout.strip() == f"PIP install --no-cache-dir {wanted}"


def test_container_command_serves_with_working_probes(tmp_path: Path) -> None:
    """The runtime's args, with the model path and ports swapped for a test's, start a real
    server whose probe and metrics paths answer; SIGTERM (after the preStop sleep the kubelet
    runs) ends it cleanly."""
    repo = tmp_path / "models"
    shutil.copytree(default_sample_repository() / "add_sub", repo / "add_sub")
    args = serve_args(_options())
    assert args[:2] == ["repokit", "serve"]
    swapped = []
    for arg in args[2:]:
        flag, _, _ = arg.partition("=")
        if flag == "--model-repository":
            arg = f"{flag}={repo}"
        elif flag in ("--http-port", "--grpc-port", "--metrics-port"):
            arg = f"{flag}=0"
        swapped.append(arg)
    server = ServeProcess(*swapped, "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1")
    try:
        http, metrics = server.url("HTTPService"), server.url("Metrics Service")
        for path in ("/v2/health/live", "/v2/health/ready"):
            with urllib.request.urlopen(f"http://{http}{path}", timeout=10) as answer:
                assert answer.status == 200
        with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as answer:
            assert b"nv_inference_request_success" in answer.read()
        server.process.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0
    finally:
        server.kill()


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (["--grace-period", "5"], 2, "--grace-period 5 leaves no time to drain"),
        (["--name", "My_Models"], 2, "--name 'My_Models' must be a DNS label"),
        (["--storage-uri", "bucket/models"], 2, "needs a scheme"),
        (["--replicas", "3:1"], 2, "--replicas 3:1 needs 0 <= min <= max"),
        (["--replicas", "x"], 2, "--replicas takes N or MIN:MAX"),
        (["--namespace", "Bad_NS"], 2, "--namespace 'Bad_NS' must be a DNS label"),
    ],
)
def test_cli_option_errors(tmp_path: Path, extra: list[str], code: int, message: str) -> None:
    args = [
        "deploy", "kserve", str(default_sample_repository()), "--storage-uri", "s3://b/m",
        "--image", "r:1", "-o", str(tmp_path / "out"), *extra,
    ]  # fmt: skip
    result = CliRunner().invoke(make_app(), args, env={"COLUMNS": "300"})
    assert result.exit_code == code, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_cli_refuses_a_repository_with_errors_and_a_missing_one(tmp_path: Path) -> None:
    invalid = sample_repos_dir() / "invalid" / "backend-undeterminable"
    base = ["--storage-uri", "s3://b/m", "--image", "r:1", "-o", str(tmp_path / "out")]
    result = CliRunner().invoke(make_app(), ["deploy", "kserve", str(invalid), *base])
    assert result.exit_code == 1, result.output
    assert "error(s) Triton would refuse to load" in result.output
    assert f"repokit validate {invalid}" in result.output
    missing = tmp_path / "nope"
    result = CliRunner().invoke(make_app(), ["deploy", "kserve", str(missing), *base])
    assert result.exit_code == 2, result.output
    assert f"repository '{missing}' does not exist" in result.output
    assert not (tmp_path / "out").exists()
