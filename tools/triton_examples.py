#!/usr/bin/env python3
"""Run Triton's own example clients against ``repokit serve`` (or real Triton 2.51).

The clients (``src/python/examples`` of triton-inference-server/client, ``--client-git`` or
``$TRITON_CLIENT_GIT``, branch r24.10 = Triton 2.51) and the configs of the example model
repository (``docs/examples/model_repository`` of triton-inference-server/server,
``--server-git`` or ``$TRITON_SERVER_GIT``, tag v2.51.0) are read at run time with
``git archive``: nothing of Triton's is in this repository.

The example models are TensorFlow graphdef/savedmodel models, so the runner lays out, at run
time, python-backend stand-ins with the same names and the same configs (inputs, outputs,
datatypes, batching, sequence batcher and its controls, instance groups), read from Triton's
config.pbtxt with ``platform`` replaced by ``backend: "python"``. What each one computes is what
the clients check: ``simple`` adds and subtracts (INT32 [16]), ``simple_int8`` the same on INT8,
``simple_string`` on numbers written as strings, ``simple_identity`` echoes bytes,
``simple_sequence`` answers INPUT + START, ``simple_dyna_sequence`` INPUT + START, plus the
correlation id on the last request; ``simple_string_dyna_sequence`` is made as Triton's
qa/L0_grpc/test.sh makes it (the dyna config with a TYPE_STRING CORRID) and accumulates as its
``dyna_sequence`` backend does; ``repeat_int32`` (src/test/models) answers each IN element after
its DELAY as the ``repeat`` backend does. ``inception_graphdef`` is listed (config only, never
loaded) where the model-control clients count the repository's models.

On real Triton 2.51 the four ``[dyna]`` sequence clients fail on this repository: its python
backend refuses the TYPE_STRING CORRID control the sequence batcher adds (``unexpected number of
string elements 2 for inference input 'CORRID', expecting 1``) before the model runs; Triton's
qa serves that model with its C++ dyna_sequence backend instead. repokit passes them.

Each client script runs unmodified with ``-v`` and ``-u`` pointing at the server's ports (chosen
free below 32768), as the qa tests L0_http and L0_grpc run them; a client passes when it exits
0 and, if it prints PASS when it succeeds, printed it. One line per client, the tail of its
output on failure.

    python tools/triton_examples.py --client-git DIR --server-git DIR
    python tools/triton_examples.py ... --grpc-transport both      # native and grpcio columns
    python tools/triton_examples.py ... --triton                   # and real Triton 2.51
    python tools/triton_examples.py --list                         # cases and skipped clients
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

from google.protobuf import text_format

from repokit.parent_death import popen_tied
from repokit.protocol.generated import model_config_pb2 as mc
from tools.triton_git import extract
from tools.triton_reference import TritonServer

CLIENT_REF = "r24.10"  # the client branch of Triton 2.51
SERVER_REF = "v2.51.0"
EXAMPLES = "src/python/examples"
EXAMPLE_MODELS = "docs/examples/model_repository"
TEST_MODELS = "src/test/models"
PORT_FLOOR, PORT_CEILING = 20000, 32767  # below the kernel's ephemeral range
TIMEOUT_READY = 180.0
TIMEOUT_CLIENT = 180.0

# --- what the stand-ins compute ---------------------------------------------------------------

ADD_SUB = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 in the inputs' datatype."""

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
'''

ADD_SUB_STRING = '''
import numpy as np
import triton_python_backend_utils as pb_utils


def numbers(request, name):
    values = pb_utils.get_input_tensor_by_name(request, name).as_numpy()
    return np.array([int(v) for v in values.reshape(-1)], dtype=np.int64).reshape(values.shape)


def strings(values):
    return np.array([str(v).encode() for v in values.reshape(-1)], dtype=np.object_).reshape(
        values.shape)


class TritonPythonModel:
    """simple on numbers written as strings: the sum and difference written as strings."""

    def execute(self, requests):
        responses = []
        for request in requests:
            a, b = numbers(request, "INPUT0"), numbers(request, "INPUT1")
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", strings(a + b)),
                 pb_utils.Tensor("OUTPUT1", strings(a - b))]))
        return responses
'''

IDENTITY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUT0 = INPUT0."""

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUTPUT0", pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy())])
            for request in requests
        ]
'''

SEQUENCE = '''
import numpy as np
import triton_python_backend_utils as pb_utils


def value(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().astype(np.int64)


class TritonPythonModel:
    """OUTPUT = INPUT + START (and + CORRID on the request that ends the sequence, when the
    model has an END and a CORRID control), as the example graphdef sequence models answer."""

    def execute(self, requests):
        responses = []
        for request in requests:
            out = value(request, "INPUT") + value(request, "START")
            end, corrid = value(request, "END"), value(request, "CORRID")
            if end is not None and corrid is not None:
                out = out + end * corrid
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT", out.astype(np.int32))]))
        return responses
'''

ACCUMULATOR = '''
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def tensor(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


class TritonPythonModel:
    """Triton's dyna_sequence test backend: per instance, an accumulator per correlation id.
    READY=0 leaves it alone; START=1 sets it to INPUT, START=0 adds INPUT; END=1 adds the
    correlation id (a number written as a string here) and forgets the sequence. Every
    response carries the accumulator; each execution waits execute_delay_ms first."""

    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        delay = parameters.get("execute_delay_ms", {}).get("string_value", "0")
        self.delay = int(delay) / 1000.0
        self.accumulators = {}

    def execute(self, requests):
        time.sleep(self.delay)
        responses = []
        for request in requests:
            inputs = tensor(request, "INPUT").astype(np.int64)
            start, end = tensor(request, "START"), tensor(request, "END")
            ready, corrid = tensor(request, "READY"), tensor(request, "CORRID")
            out = np.zeros(inputs.shape, dtype=np.int32)
            for row in range(inputs.shape[0]):
                key = corrid.reshape(inputs.shape[0], -1)[row][0]
                key = key.decode() if isinstance(key, bytes) else str(key)
                if ready[row].all():
                    if start[row].all():
                        self.accumulators[key] = int(inputs[row].sum())
                    else:
                        self.accumulators[key] = self.accumulators.get(key, 0) + int(
                            inputs[row].sum())
                    if end[row].all():
                        self.accumulators[key] += int(key)
                out[row] = self.accumulators.get(key, 0)
                if ready[row].all() and end[row].all():
                    self.accumulators.pop(key, None)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", out)]))
        return responses
'''

REPEAT = '''
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Triton's repeat test backend (decoupled): for each element of IN, after DELAY[i] ms, a
    response with OUT = IN[i] and IDX = i; WAIT ms later the final flag."""

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()
            for index, item in enumerate(values.reshape(-1)):
                time.sleep(float(delays.reshape(-1)[index]) / 1000.0)
                sender.send(pb_utils.InferenceResponse([
                    pb_utils.Tensor("OUT", np.array([item], dtype=np.int32)),
                    pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32)),
                ]))
            time.sleep(float(wait.reshape(-1)[0]) / 1000.0)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''


@dataclass(frozen=True)
class StandIn:
    """A model of Triton's example repository (or its test models) served by a python model."""

    name: str
    config: str  # path in the server repository
    source: str | None  # model.py; None: the config alone (listed, never loaded)
    string_corrid: bool = False  # CORRID becomes TYPE_STRING (qa/L0_grpc/test.sh)


STAND_INS = {
    s.name: s
    for s in (
        StandIn("simple", f"{EXAMPLE_MODELS}/simple/config.pbtxt", ADD_SUB),
        StandIn("simple_int8", f"{EXAMPLE_MODELS}/simple_int8/config.pbtxt", ADD_SUB),
        StandIn("simple_string", f"{EXAMPLE_MODELS}/simple_string/config.pbtxt", ADD_SUB_STRING),
        StandIn("simple_identity", f"{EXAMPLE_MODELS}/simple_identity/config.pbtxt", IDENTITY),
        StandIn("simple_sequence", f"{EXAMPLE_MODELS}/simple_sequence/config.pbtxt", SEQUENCE),
        StandIn(
            "simple_dyna_sequence", f"{EXAMPLE_MODELS}/simple_dyna_sequence/config.pbtxt", SEQUENCE
        ),
        StandIn(
            "simple_string_dyna_sequence",
            f"{EXAMPLE_MODELS}/simple_dyna_sequence/config.pbtxt",
            ACCUMULATOR,
            string_corrid=True,
        ),
        StandIn("repeat_int32", f"{TEST_MODELS}/repeat_int32/config.pbtxt", REPEAT),
        StandIn("inception_graphdef", f"{EXAMPLE_MODELS}/inception_graphdef/config.pbtxt", None),
    )
}

SERVED = [
    "simple",
    "simple_int8",
    "simple_string",
    "simple_identity",
    "simple_sequence",
    "simple_dyna_sequence",
    "simple_string_dyna_sequence",
    "repeat_int32",
]
# the repositories of qa/L0_grpc and qa/L0_http, whose model-control clients count the models
GRPC_REPOSITORY = [*SERVED[:7], "inception_graphdef"]
HTTP_REPOSITORY = [m for m in GRPC_REPOSITORY if m != "simple_int8"]


@dataclass(frozen=True)
class Setup:
    """One server: its repository and flags (repokit-only flags apart)."""

    name: str
    models: list[str]
    flags: list[str] = field(default_factory=list)
    repokit_flags: list[str] = field(default_factory=list)


TLS_FLAGS = [
    "--grpc-server-cert={certs}/server.crt",
    "--grpc-server-key={certs}/server.key",
    "--grpc-root-cert={certs}/ca.crt",
]
SETUPS = {
    s.name: s
    for s in (
        # Triton serves system shared memory by default; repokit only when allowed
        Setup("default", SERVED, repokit_flags=["--allow-client-shm=true"]),
        Setup("compression", ["simple"], flags=["--grpc-infer-response-compression-level=high"]),
        Setup("explicit_grpc", GRPC_REPOSITORY, flags=["--model-control-mode=explicit"]),
        Setup("explicit_http", HTTP_REPOSITORY, flags=["--model-control-mode=explicit"]),
        # qa/L0_secure_grpc: server-side TLS, mutual TLS, both flags
        *(
            Setup(f"tls_{case}", ["simple"], flags=[*TLS_FLAGS, *flags])
            for case, flags in (
                ("server", ["--grpc-use-ssl=1"]),
                ("mutual", ["--grpc-use-ssl-mutual=1"]),
                ("both", ["--grpc-use-ssl=1", "--grpc-use-ssl-mutual=1"]),
            )
        ),
    )
}


@dataclass(frozen=True)
class Case:
    """One run of a client script. ``args`` may name {http} and {grpc} (host:port)."""

    name: str
    script: str
    args: list[str]
    setup: str = "default"
    fails: bool = False  # the client is meant to exit non-zero
    expect: str = ""  # a regex its output must match
    copies: int = 1  # run this many at once (qa/L0_socket runs 11)


def http_case(name: str, script: str, *extra: str, setup: str = "default") -> Case:
    return Case(name, script, ["-v", "-u", "{http}", *extra], setup)


def grpc_case(name: str, script: str, *extra: str, setup: str = "default") -> Case:
    return Case(name, script, ["-v", "-u", "{grpc}", *extra], setup)


def data_compression_cases() -> list[Case]:
    """qa/L0_data_compression: the HTTP infer clients with each request and response
    compression (deflate, gzip, none) that differ, and with both the same."""
    cases = []
    for script in ("simple_http_infer_client", "simple_http_aio_infer_client"):
        for request in ("deflate", "gzip", ""):
            for response in ("deflate", "gzip", ""):
                if not request and not response:
                    continue
                extra = [f"--request-compression-algorithm={request}"] if request else []
                if response:
                    extra.append(f"--response-compression-algorithm={response}")
                label = f"{request or 'none'}/{response or 'none'}"
                cases.append(http_case(f"{script}[{label}]", f"{script}.py", *extra))
    return cases


def tls_cases() -> list[Case]:
    """qa/L0_secure_grpc: the infer clients over TLS with the client's certificate; without TLS
    and with a broken client key they must fail (server and mutual)."""
    good = [
        "--ssl",
        "--root-certificates={certs}/ca.crt",
        "--private-key={certs}/client.key",
        "--certificate-chain={certs}/client.crt",
    ]
    wrong = [
        *good[:2],
        "--private-key={certs}/client2.key",
        "--certificate-chain={certs}/client2.crt",
    ]
    cases = []
    for setup in ("server", "mutual", "both"):
        for script in ("simple_grpc_infer_client", "simple_grpc_aio_infer_client"):
            cases.append(
                grpc_case(f"{script}[tls_{setup}]", f"{script}.py", *good, setup=f"tls_{setup}")
            )
            if setup == "both":
                continue
            for label, extra in (("no_ssl", []), ("wrong_ssl", wrong)):
                cases.append(
                    Case(
                        f"{script}[tls_{setup},{label}]",
                        f"{script}.py",
                        ["-v", "-u", "{grpc}", *extra],
                        f"tls_{setup}",
                        fails=True,
                    )
                )
    return cases


CASES = [
    http_case("simple_http_health_metadata", "simple_http_health_metadata.py"),
    http_case("simple_http_infer_client", "simple_http_infer_client.py"),
    *data_compression_cases(),
    # qa/L0_http: a base path in the URL reaches the server as is, and fails there
    Case(
        "simple_http_infer_client[base_path]",
        "simple_http_infer_client.py",
        ["-v", "-u", "{http}/base_path"],
        fails=True,
        expect=r"POST /base_path/v2/models/simple/infer",
    ),
    http_case("simple_http_aio_infer_client", "simple_http_aio_infer_client.py"),
    http_case("simple_http_async_infer_client", "simple_http_async_infer_client.py"),
    http_case("simple_http_string_infer_client", "simple_http_string_infer_client.py"),
    http_case("simple_http_shm_client", "simple_http_shm_client.py"),
    http_case("simple_http_shm_string_client", "simple_http_shm_string_client.py"),
    http_case(
        "simple_http_sequence_sync_infer_client", "simple_http_sequence_sync_infer_client.py"
    ),
    http_case(
        "simple_http_sequence_sync_infer_client[dyna]",
        "simple_http_sequence_sync_infer_client.py",
        "-d",
    ),
    http_case("reuse_infer_objects_client[http]", "reuse_infer_objects_client.py", "-i", "http"),
    http_case("simple_http_model_control", "simple_http_model_control.py", setup="explicit_http"),
    grpc_case("simple_grpc_health_metadata", "simple_grpc_health_metadata.py"),
    grpc_case("simple_grpc_infer_client", "simple_grpc_infer_client.py"),
    # qa/L0_socket: eleven infer clients at once
    Case(
        "simple_grpc_infer_client[x11]", "simple_grpc_infer_client.py", ["-u", "{grpc}"], copies=11
    ),
    Case(
        "simple_http_infer_client[x11]", "simple_http_infer_client.py", ["-u", "{http}"], copies=11
    ),
    *(
        grpc_case(
            f"simple_grpc_infer_client[{algorithm}]",
            "simple_grpc_infer_client.py",
            "-C",
            algorithm,
            setup="compression",
        )
        for algorithm in ("deflate", "gzip")
    ),
    grpc_case("simple_grpc_aio_infer_client", "simple_grpc_aio_infer_client.py"),
    grpc_case("simple_grpc_async_infer_client", "simple_grpc_async_infer_client.py"),
    grpc_case("simple_grpc_string_infer_client", "simple_grpc_string_infer_client.py"),
    grpc_case("simple_grpc_shm_client", "simple_grpc_shm_client.py"),
    grpc_case("simple_grpc_shm_string_client", "simple_grpc_shm_string_client.py"),
    *(
        case
        for script in (
            "simple_grpc_sequence_sync_infer_client",
            "simple_grpc_sequence_stream_infer_client",
            "simple_grpc_aio_sequence_stream_infer_client",
        )
        for case in (
            grpc_case(script, f"{script}.py"),
            grpc_case(f"{script}[dyna]", f"{script}.py", "-d"),
        )
    ),
    grpc_case("simple_grpc_keepalive_client", "simple_grpc_keepalive_client.py"),
    grpc_case("simple_grpc_custom_args_client", "simple_grpc_custom_args_client.py"),
    grpc_case("simple_grpc_custom_repeat", "simple_grpc_custom_repeat.py"),
    grpc_case("grpc_explicit_int_content_client", "grpc_explicit_int_content_client.py"),
    grpc_case("grpc_explicit_int8_content_client", "grpc_explicit_int8_content_client.py"),
    grpc_case("grpc_explicit_byte_content_client", "grpc_explicit_byte_content_client.py"),
    grpc_case("reuse_infer_objects_client[grpc]", "reuse_infer_objects_client.py", "-i", "grpc"),
    grpc_case("simple_grpc_model_control", "simple_grpc_model_control.py", setup="explicit_grpc"),
    *tls_cases(),
]

SKIPPED = {
    "simple_http_cudashm_client.py": "CUDA shared memory (needs a GPU)",
    "simple_grpc_cudashm_client.py": "CUDA shared memory (needs a GPU)",
    "image_client.py": "image classification on inception_graphdef / densenet_onnx: TensorFlow"
    " weights and an ONNX file that docs/examples/fetch_models.sh downloads",
    "grpc_image_client.py": "image classification on inception_graphdef (TensorFlow weights"
    " downloaded by fetch_models.sh)",
    "grpc_client.py": "raw gRPC infer on inception_graphdef (TensorFlow, downloaded weights)",
    "ensemble_image_client.py": "an image preprocessing ensemble that is not in the example"
    " repository (qa/L0_grpc comments it out too)",
    "memory_growth_test.py": "hard-codes localhost:8000/8001 (no -u) and a custom_identity_int32"
    " C++ test model; measures a C++ client's memory",
}


# --- Triton's files ---------------------------------------------------------------------------
def stand_in_config(text: str, stand_in: StandIn) -> str:
    """Triton's config with ``backend: "python"`` for its platform or backend (and the changes
    qa/L0_grpc/test.sh makes for the string-correlation-id model)."""
    config = text_format.Parse(text, mc.ModelConfig())
    config.name = stand_in.name
    config.ClearField("platform")
    config.backend = "python"
    if stand_in.string_corrid:
        for control_input in config.sequence_batching.control_input:
            for control in control_input.control:
                if control.kind == mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID:
                    control.data_type = mc.TYPE_STRING
    return text_format.MessageToString(config)


def build_repository(server_tree: Path, models: Sequence[str], repository: Path) -> None:
    shutil.rmtree(repository, ignore_errors=True)
    repository.mkdir(parents=True)
    for name in models:
        stand_in = STAND_INS[name]
        source = server_tree / stand_in.config
        folder = repository / name
        folder.mkdir()
        if stand_in.source is None:  # listed only: Triton's files as they are
            for item in source.parent.iterdir():
                if item.is_file():
                    shutil.copy(item, folder / item.name)
            continue
        (folder / "config.pbtxt").write_text(stand_in_config(source.read_text(), stand_in))
        (folder / "1").mkdir()
        (folder / "1" / "model.py").write_text(stand_in.source.lstrip())


def make_certificates(directory: Path) -> Path:
    """A CA, a server and a client certificate for localhost signed by it (as
    qa/L0_secure_grpc/test.sh makes them with openssl), and client2.key/.crt: the client's
    files with the first letter of every word upper-cased (the qa's broken credentials)."""
    directory.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    openssl("genrsa", "-out", "ca.key", "2048")
    openssl(
        "req",
        "-new",
        "-x509",
        "-days",
        "2",
        "-key",
        "ca.key",
        "-out",
        "ca.crt",
        "-subj",
        "/C=SP/ST=Spain/L=Valdepenias/O=Test/OU=Test/CN=Root CA",
    )
    for name in ("server", "client"):
        openssl("genrsa", "-out", f"{name}.key", "2048")
        openssl(
            "req",
            "-new",
            "-key",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/C=SP/ST=Spain/L=Valdepenias/O=Test/OU={name.title()}/CN=localhost",
        )
        openssl(
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-set_serial",
            "01",
            "-out",
            f"{name}.crt",
        )
    for suffix in ("key", "crt"):
        text = (directory / f"client.{suffix}").read_text()
        broken = re.sub(r"\b(.)", lambda m: m.group(1).upper(), text)
        (directory / f"client2.{suffix}").write_text(broken)
    return directory


# --- servers ----------------------------------------------------------------------------------
def free_ports(count: int) -> list[int]:
    """``count`` ports nothing is bound to, below the ephemeral range."""
    ports: list[int] = []
    rng = random.Random()
    while len(ports) < count:
        port = rng.randint(PORT_FLOOR, PORT_CEILING)
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
        if port not in ports:
            ports.append(port)
    return ports


def http_ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/v2/health/ready", timeout=2
        ) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class Server:
    """repokit (with a gRPC transport) or real Triton, on a repository, logging into a file."""

    kind: str  # "native" | "grpcio" | "triton"
    log_path: Path
    certs: Path
    http: int = 0
    grpc: int = 0
    process: subprocess.Popen[bytes] | None = None
    triton: TritonServer | None = None

    def start(self, repository: Path, setup: Setup) -> None:
        self.http, self.grpc, metrics = free_ports(3)
        flags = [flag.format(certs=self.certs) for flag in setup.flags]
        if self.kind == "triton":
            server = TritonServer(
                repository, self.log_path, flags, ports=(self.http, self.grpc, metrics)
            )
            self.triton = server
            server.start(timeout=TIMEOUT_READY)
            server.wait_ready(timeout=TIMEOUT_READY)
            return
        command = [
            sys.executable,
            "-m",
            "repokit",
            "serve",
            "--model-repository",
            str(repository),
            f"--http-port={self.http}",
            f"--grpc-port={self.grpc}",
            f"--metrics-port={metrics}",
            f"--grpc-transport={self.kind}",
            *flags,
            *setup.repokit_flags,
        ]
        with self.log_path.open("ab") as log:
            self.process = popen_tied(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + TIMEOUT_READY
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"repokit serve exited: {self.log_tail()}")
            if http_ready(self.http):
                return
            time.sleep(0.3)
        raise RuntimeError(f"repokit serve not ready in {TIMEOUT_READY:.0f}s: {self.log_tail()}")

    def stop(self) -> None:
        if self.triton is not None:
            self.triton.stop()
            self.triton = None
        process, self.process = self.process, None
        if process is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(OSError):
                os.killpg(process.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(30)
                break

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:])


# --- clients ----------------------------------------------------------------------------------
@dataclass
class Outcome:
    case: str
    result: str  # PASS / FAIL
    detail: str = ""


def prints_pass(script: Path) -> bool:
    return "PASS" in script.read_text()


def run_client(case: Case, examples: Path, server: Server, log_dir: Path) -> Outcome:
    """Run the case's client (``copies`` of it at once) and judge each run."""
    args = [
        a.format(
            http=f"localhost:{server.http}", grpc=f"localhost:{server.grpc}", certs=server.certs
        )
        for a in case.args
    ]
    script = examples / case.script
    log_name = re.sub(r"[^A-Za-z0-9_.-]+", "_", case.name)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
    processes = [
        subprocess.Popen(
            [sys.executable, str(script), *args],
            cwd=examples,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for _ in range(case.copies)
    ]
    deadline = time.monotonic() + TIMEOUT_CLIENT
    for copy, process in enumerate(processes):
        code: int | None
        try:
            out, _ = process.communicate(timeout=max(deadline - time.monotonic(), 1.0))
            code = process.returncode
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate()
            code = None
        output = out.decode(errors="replace")
        suffix = f".{copy}" if case.copies > 1 else ""
        (log_dir / f"{log_name}{suffix}.log").write_text(output)
        problems = judge(case, script, code, output)
        if problems:
            tail = " | ".join(line.strip()[:160] for line in output.strip().splitlines()[-4:])
            which = f"copy {copy}: " if case.copies > 1 else ""
            for other in processes[copy + 1 :]:
                other.kill()
                other.communicate()
            return Outcome(case.name, "FAIL", f"{which}{'; '.join(problems)}: {tail}")
    return Outcome(case.name, "PASS")


def judge(case: Case, script: Path, code: int | None, output: str) -> list[str]:
    """What is wrong with one run of a client (nothing: it passed)."""
    problems = []
    if code is None:
        problems.append(f"timed out after {TIMEOUT_CLIENT:.0f}s")
    elif case.fails and code == 0:
        problems.append("exit 0, expected a failure")
    elif not case.fails and code != 0:
        problems.append(f"exit {code}")
    if not case.fails and code == 0 and prints_pass(script) and "PASS" not in output:
        problems.append("no PASS printed")
    if "context creation failed" in output:
        problems.append("context creation failed")
    if case.expect and not re.search(case.expect, output):
        problems.append(f"output lacks {case.expect!r}")
    return problems


def run_target(
    kind: str, cases: Sequence[Case], trees: tuple[Path, Path], workdir: Path, verbose: bool
) -> list[Outcome]:
    """Every case against one kind of server, a server per setup."""
    examples, server_tree = trees
    outcomes: list[Outcome] = []
    log_dir = workdir / kind
    log_dir.mkdir(parents=True, exist_ok=True)
    for setup_name in dict.fromkeys(case.setup for case in cases):
        setup = SETUPS[setup_name]
        repository = workdir / f"models-{kind}-{setup.name}"
        build_repository(server_tree, setup.models, repository)
        server = Server(kind, log_dir / f"server-{setup.name}.log", workdir / "certs")
        chosen = [case for case in cases if case.setup == setup_name]
        try:
            try:
                server.start(repository, setup)
            except RuntimeError as exc:
                for case in chosen:
                    outcomes.append(Outcome(case.name, "FAIL", f"server: {str(exc)[:300]}"))
                    print(format_line(kind, outcomes[-1], verbose), flush=True)
                continue
            for case in chosen:
                outcomes.append(run_client(case, examples, server, log_dir))
                print(format_line(kind, outcomes[-1], verbose), flush=True)
        finally:
            server.stop()
    return outcomes


def format_line(kind: str, outcome: Outcome, verbose: bool) -> str:
    line = f"{kind:<7} {outcome.case:<52} {outcome.result}"
    if outcome.detail and (verbose or outcome.result != "PASS"):
        line += f"\n        {outcome.detail}"
    return line


def print_table(results: dict[str, list[Outcome]]) -> None:
    kinds = list(results)
    by_kind = {kind: {o.case: o.result for o in outcomes} for kind, outcomes in results.items()}
    names = list(dict.fromkeys(o.case for outcomes in results.values() for o in outcomes))
    width = max((len(n) for n in names), default=10)
    print(f"{'client':<{width}}  " + "  ".join(f"{kind:<7}" for kind in kinds))
    for name in names:
        print(f"{name:<{width}}  " + "  ".join(f"{by_kind[k].get(name, '-'):<7}" for k in kinds))
    totals = "  ".join(
        f"{kind} {sum(1 for o in results[kind] if o.result == 'PASS')}/{len(results[kind])}"
        for kind in kinds
    )
    print(f"# passed: {totals}")
    for script, reason in SKIPPED.items():
        print(f"# skipped {script}: {reason}")


# --- command ----------------------------------------------------------------------------------
def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--client-git",
        type=Path,
        default=os.environ.get("TRITON_CLIENT_GIT"),
        help="git dir of triton-inference-server/client ($TRITON_CLIENT_GIT)",
    )
    parser.add_argument("--client-ref", default=CLIENT_REF, help=f"default {CLIENT_REF}")
    parser.add_argument(
        "--server-git",
        type=Path,
        default=os.environ.get("TRITON_SERVER_GIT"),
        help="git dir of triton-inference-server/server ($TRITON_SERVER_GIT)",
    )
    parser.add_argument("--server-ref", default=SERVER_REF, help=f"default {SERVER_REF}")
    parser.add_argument(
        "--grpc-transport",
        choices=("native", "grpcio", "both"),
        default="native",
        help="repokit's gRPC transport (both: a column each)",
    )
    parser.add_argument("--triton", action="store_true", help="also run against real Triton")
    parser.add_argument(
        "-k", dest="patterns", action="append", default=[], help="only cases containing this"
    )
    parser.add_argument("--list", action="store_true", help="list the cases and skipped clients")
    parser.add_argument("--workdir", type=Path, default=None, help="where temp dirs go")
    parser.add_argument("--keep", action="store_true", help="keep repositories and logs")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("-v", "--verbose", action="store_true", help="details of passes too")
    return parser.parse_args(list(argv))


@contextlib.contextmanager
def triton_trees(args: argparse.Namespace) -> Iterator[tuple[Path, Path]]:
    with tempfile.TemporaryDirectory(prefix="triton-examples-src-", dir=args.workdir) as tmp:
        root = Path(tmp)
        (root / "client").mkdir()
        (root / "server").mkdir()
        extract(args.client_git, args.client_ref, [EXAMPLES], root / "client")
        configs = sorted({STAND_INS[name].config.rsplit("/", 1)[0] for name in STAND_INS})
        extract(args.server_git, args.server_ref, configs, root / "server")
        yield root / "client" / EXAMPLES, root / "server"


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    cases = [c for c in CASES if not args.patterns or any(p in c.name for p in args.patterns)]
    if args.list:
        for case in cases:
            print(f"{case.name}  ({case.setup}: {' '.join([case.script, *case.args])})")
        print("\n# not run:")
        for script, reason in SKIPPED.items():
            print(f"{script}: {reason}")
        return 0
    missing = [
        flag
        for flag, value in (("--client-git", args.client_git), ("--server-git", args.server_git))
        if value is None
    ]
    if missing:
        print(f"triton_examples: give {' and '.join(missing)}", file=sys.stderr)
        return 2
    kinds = ["native", "grpcio"] if args.grpc_transport == "both" else [args.grpc_transport]
    if args.triton:
        kinds.insert(0, "triton")
    workdir = Path(tempfile.mkdtemp(prefix="triton-examples-", dir=args.workdir))
    results: dict[str, list[Outcome]] = {}
    make_certificates(workdir / "certs")
    try:
        with triton_trees(args) as trees:
            for kind in kinds:
                results[kind] = run_target(kind, cases, trees, workdir, args.verbose)
    finally:
        if args.keep:
            print(f"# logs kept in {workdir}", flush=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print_table(results)
    if args.json:
        args.json.write_text(
            json.dumps({k: [o.__dict__ for o in v] for k, v in results.items()}, indent=1)
        )
    failed = any(o.result != "PASS" for kind, v in results.items() if kind != "triton" for o in v)
    return 1 if failed else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    sys.exit(main(sys.argv[1:]))
