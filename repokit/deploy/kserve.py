"""KServe manifests for a repository served by ``repokit serve`` (``repokit deploy kserve``).

Conventions follow the Triton runtime KServe ships (``kserve-tritonserver``): the storage
initializer puts the repository at ``/mnt/models``; HTTP/REST (v2 protocol) on 8080, gRPC on
9000; the container's ``args`` are the whole command (the image has no entrypoint); the
runtime's ``prometheus.kserve.io/port|path`` annotations point at the metrics port (8002), and
the InferenceService's ``serving.kserve.io/enable-prometheus-scraping`` turns them into the
pod's scrape annotations.

Shutdown within the pod's ``terminationGracePeriodSeconds``: the kubelet first runs the
preStop hook (a sleep, so that the endpoints controller and the ingress stop sending new
requests to the pod before it stops accepting), then sends SIGTERM; ``repokit serve`` stops
accepting, drains what is in flight for at most ``--exit-timeout-secs``, unloads and exits.
The grace period is therefore split as preStop sleep + exit timeout + a margin for the exit.

The InferenceService uses KServe's raw deployment mode (``RawDeployment``, read as
``Standard`` by newer KServe): requests reach the pods through a Kubernetes Service, where an
Istio DestinationRule can hash on a header. That is what sequence models need: every request
of a sequence must reach the replica holding its correlation ID's slot, so when the
repository has sequence models the bundle adds a DestinationRule hashing on
:data:`AFFINITY_HEADER`, which clients set to the sequence's correlation ID.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repokit.errors import Code, RepokitError

HTTP_PORT = 8080
GRPC_PORT = 9000
METRICS_PORT = 8002
MODEL_DIR = "/mnt/models"
PRESTOP_SLEEP_SECS = 5
EXIT_MARGIN_SECS = 3  # after the drain: unload, finalize, process exit
AFFINITY_HEADER = "x-correlation-id"
CONTAINER_NAME = "kserve-container"  # the name KServe merges the predictor's model into
MODEL_FORMAT = "triton"  # the format name KServe's Triton runtime declares, version "2"
DEFAULT_PYTHON_IMAGE = "python:3.11-slim"
DEFAULT_GPU_IMAGE = "nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04"


@dataclass(frozen=True)
class RepositoryFacts:
    """What the manifests need to know of the repository."""

    models: tuple[str, ...] = ()
    gpu_models: tuple[str, ...] = ()  # TensorRT plans, or instance groups of kind GPU
    sequence_models: tuple[str, ...] = ()  # sequence batching: needs correlation-ID affinity
    error_count: int = 0


@dataclass(frozen=True)
class KServeOptions:
    name: str
    storage_uri: str
    image: str
    namespace: str = ""
    cluster_runtime: bool = False
    gpu: bool = False
    grpc: bool = False  # the InferenceService's protocol: grpc-v2 instead of v2 (HTTP)
    grace_period_secs: int = 60
    min_replicas: int = 1
    max_replicas: int = 1
    cpu: str = "1"
    memory: str = "2Gi"
    sequence_models: tuple[str, ...] = ()
    serve_flags: tuple[str, ...] = field(default_factory=tuple)  # extra `repokit serve` flags

    @property
    def runtime_name(self) -> str:
        return f"{self.name}-repokit"

    @property
    def runtime_kind(self) -> str:
        return "ClusterServingRuntime" if self.cluster_runtime else "ServingRuntime"

    @property
    def exit_timeout_secs(self) -> int:
        return self.grace_period_secs - PRESTOP_SLEEP_SECS - EXIT_MARGIN_SECS


def _dns_label(value: str) -> bool:
    return (
        0 < len(value) <= 63
        and value[0].isalnum()
        and value[-1].isalnum()
        and all(c.islower() or c.isdigit() or c == "-" for c in value)
    )


def check_options(o: KServeOptions) -> None:
    """Refuse options the cluster would refuse later, naming the option."""
    if not _dns_label(o.name) or len(o.runtime_name) > 63:
        raise RepokitError(
            Code.INVALID_ARG,
            f"--name '{o.name}' must be a DNS label: lowercase letters, digits and '-', "
            "starting and ending with a letter or digit, at most 55 characters",
        )
    if o.namespace and not _dns_label(o.namespace):
        raise RepokitError(
            Code.INVALID_ARG, f"--namespace '{o.namespace}' must be a DNS label (e.g. 'models')"
        )
    if "://" not in o.storage_uri:
        raise RepokitError(
            Code.INVALID_ARG,
            f"--storage-uri '{o.storage_uri}' needs a scheme KServe's storage initializer "
            "reads (s3://, gs://, pvc://, https://, ...)",
        )
    if not o.image:
        raise RepokitError(
            Code.INVALID_ARG, "--image is required (the image built from Dockerfile)"
        )
    least = PRESTOP_SLEEP_SECS + EXIT_MARGIN_SECS + 1
    if o.grace_period_secs < least:
        raise RepokitError(
            Code.INVALID_ARG,
            f"--grace-period {o.grace_period_secs} leaves no time to drain: it must be at least "
            f"{least} s ({PRESTOP_SLEEP_SECS} s preStop sleep + {EXIT_MARGIN_SECS} s to exit + "
            "the drain)",
        )
    if o.min_replicas < 0 or o.max_replicas < max(o.min_replicas, 1):
        raise RepokitError(
            Code.INVALID_ARG,
            f"--replicas {o.min_replicas}:{o.max_replicas} needs 0 <= min <= max and max >= 1",
        )


def serve_args(o: KServeOptions) -> list[str]:
    """The container's command line."""
    return [
        "repokit",
        "serve",
        f"--model-repository={MODEL_DIR}",
        f"--http-port={HTTP_PORT}",
        f"--grpc-port={GRPC_PORT}",
        f"--metrics-port={METRICS_PORT}",
        "--allow-http=true",
        "--allow-grpc=true",
        "--allow-metrics=true",
        "--model-control-mode=none",  # a load through one replica would change only that one
        f"--exit-timeout-secs={o.exit_timeout_secs}",
        *o.serve_flags,
    ]


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": HTTP_PORT, "scheme": "HTTP"},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def container(o: KServeOptions) -> dict[str, Any]:
    resources: dict[str, Any] = {
        "requests": {"cpu": o.cpu, "memory": o.memory},
        "limits": {"cpu": o.cpu, "memory": o.memory},
    }
    if o.gpu:
        resources["requests"]["nvidia.com/gpu"] = "1"
        resources["limits"]["nvidia.com/gpu"] = "1"
    return {
        "name": CONTAINER_NAME,
        "image": o.image,
        "args": serve_args(o),
        # models load before the ports open: the startup probe gives them up to 10 minutes
        # before liveness counts
        "startupProbe": _probe("/v2/health/live", 5, 120),
        "livenessProbe": _probe("/v2/health/live", 10, 3),
        "readinessProbe": _probe("/v2/health/ready", 5, 3),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(PRESTOP_SLEEP_SECS)]}}},
        "resources": resources,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def _metadata(o: KServeOptions, name: str, namespaced: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/managed-by": "repokit"}}
    if namespaced and o.namespace:
        meta["namespace"] = o.namespace
    return meta


def serving_runtime(o: KServeOptions) -> dict[str, Any]:
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": o.runtime_kind,
        "metadata": _metadata(o, o.runtime_name, namespaced=not o.cluster_runtime),
        "spec": {
            "annotations": {
                "prometheus.kserve.io/port": str(METRICS_PORT),
                "prometheus.kserve.io/path": "/metrics",
            },
            "supportedModelFormats": [
                {"name": MODEL_FORMAT, "version": "2", "autoSelect": False},
            ],
            "protocolVersions": ["v2", "grpc-v2"],
            "multiModel": False,
            "containers": [container(o)],
        },
    }


def inference_service(o: KServeOptions) -> dict[str, Any]:
    meta = _metadata(o, o.name)
    meta["annotations"] = {
        "serving.kserve.io/deploymentMode": "RawDeployment",
        "serving.kserve.io/enable-prometheus-scraping": "true",
    }
    model: dict[str, Any] = {
        "modelFormat": {"name": MODEL_FORMAT, "version": "2"},
        "runtime": o.runtime_name,
        "storageUri": o.storage_uri,
        "protocolVersion": "grpc-v2" if o.grpc else "v2",
    }
    if o.grpc:  # the Service's port then speaks HTTP/2 cleartext to the gRPC port
        model["ports"] = [{"name": "h2c", "containerPort": GRPC_PORT, "protocol": "TCP"}]
    predictor: dict[str, Any] = {
        "minReplicas": o.min_replicas,
        "maxReplicas": o.max_replicas,
        "terminationGracePeriodSeconds": o.grace_period_secs,
        "model": model,
    }
    if o.max_replicas > o.min_replicas:
        predictor["scaleMetric"] = "cpu"
        predictor["scaleTarget"] = 70
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": meta,
        "spec": {"predictor": predictor},
    }


def destination_rule(o: KServeOptions) -> dict[str, Any]:
    """Istio: requests carrying the same AFFINITY_HEADER value reach the same replica."""
    # the predictor's Service; a short name resolves in the DestinationRule's own namespace
    host = f"{o.name}-predictor"
    if o.namespace:
        host += f".{o.namespace}.svc.cluster.local"
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "DestinationRule",
        "metadata": _metadata(o, f"{o.name}-sequence-affinity"),
        "spec": {
            "host": host,
            "trafficPolicy": {
                "loadBalancer": {"consistentHash": {"httpHeaderName": AFFINITY_HEADER}}
            },
        },
    }


def manifests(o: KServeOptions) -> list[dict[str, Any]]:
    out = [serving_runtime(o), inference_service(o)]
    if o.sequence_models:
        out.append(destination_rule(o))
    return out


def dockerfile(o: KServeOptions) -> str:
    base = DEFAULT_GPU_IMAGE if o.gpu else DEFAULT_PYTHON_IMAGE
    extras = "tensorrt" if o.gpu else ""
    python_setup = (
        "RUN apt-get update \\\n"
        " && apt-get install -y --no-install-recommends python3 python3-venv \\\n"
        " && rm -rf /var/lib/apt/lists/* \\\n"
        " && python3 -m venv /opt/repokit\n"
        if o.gpu
        else "RUN python3 -m venv /opt/repokit\n"
    )
    return (
        "# The image KServe runs for repokit serve (written by `repokit deploy kserve`).\n"
        "# Build beside this file: docker build -t IMAGE .\n"
        "# wheels/ may hold a repokit wheel built from a checkout (pip wheel --no-deps -w\n"
        "# wheels/ PATH_TO_REPOKIT); without one, repokit is installed from the package index.\n"
        "# REPOKIT_EXTRAS=tensorrt (the GPU default) adds TensorRT for tensorrt_plan models.\n"
        f"ARG BASE_IMAGE={base}\n"
        "FROM ${BASE_IMAGE}\n"
        f'ARG REPOKIT_EXTRAS="{extras}"\n'
        'ARG REPOKIT_VERSION=""\n'
        "ENV PYTHONUNBUFFERED=1 PATH=/opt/repokit/bin:$PATH\n"
        f"{python_setup}"
        "COPY wheels/ /wheels/\n"
        "# a wheel in wheels/ wins over the index (where another project may hold the name)\n"
        "RUN set -e; wheel=$(ls /wheels/repokit-*.whl 2>/dev/null | head -n 1); \\\n"
        '    spec="${wheel:-repokit${REPOKIT_VERSION:+==${REPOKIT_VERSION}}}"; \\\n'
        '    pip install --no-cache-dir "${spec}${REPOKIT_EXTRAS:+[${REPOKIT_EXTRAS}]}"; \\\n'
        "    rm -rf /wheels; repokit --version\n"
        "# KServe's storage initializer mounts the repository here\n"
        f"RUN mkdir -p {MODEL_DIR} && chown 1000:1000 {MODEL_DIR}\n"
        "USER 1000\n"
        f"EXPOSE {HTTP_PORT} {GRPC_PORT} {METRICS_PORT}\n"
        "# no ENTRYPOINT: the ServingRuntime's args are the whole command line\n"
        f'CMD ["repokit", "serve", "--model-repository={MODEL_DIR}", '
        f'"--http-port={HTTP_PORT}", "--grpc-port={GRPC_PORT}", '
        f'"--metrics-port={METRICS_PORT}"]\n'
    )


def load_schema(schemas: Path) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((schemas / "kubernetes" / "kserve.schema.json").read_text())
    return schema


def schema_errors(document: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Where ``document`` breaks the schema of its kind ("kind X: path: message")."""
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

    kind = str(document.get("kind", ""))
    definitions = schema["$defs"]
    if kind not in definitions:
        return [f"kind '{kind}': no schema (known: {', '.join(sorted(schema['kinds']))})"]
    validator = Draft202012Validator({"$ref": f"#/$defs/{kind}", "$defs": definitions})
    out = []
    for error in sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in error.absolute_path) or "(document)"
        out.append(f"{kind}: {where}: {error.message}")
    return out
