"""Triton's qa suites about server options (HTTP compression, --backend-config,
--model-config-name, the model configuration as JSON, gRPC over TLS, tracing) as scenarios for
``triton_qa.py``.

Each scenario is one server run of the suite's ``test.sh``: its model repository (the
TensorFlow models it copies from Triton's DATADIR stood in for by python models on the config
``qa/common/gen_qa_models.py`` writes, the example ``simple`` model by the stand-in of
``tools/triton_examples.py``), the flags it starts the server with, and what it checks: the
client scripts it runs (Triton's python examples, read from a git dir of
triton-inference-server/client given by ``$TRITON_CLIENT_GIT``), the JSON its ``curl``
calls get (the same regex counts its ``grep -o ... | wc -l`` make), its log greps, or a server
that must refuse to start. Nothing here is Triton's text: it is read from git dirs at run time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tools.triton_examples import CLIENT_REF, EXAMPLES, build_repository, make_certificates
from tools.triton_git import extract
from tools.triton_qa_suites import (
    HttpCall,
    Layout,
    LogCheck,
    PytestRun,
    Scenario,
    ScriptRun,
    Step,
    _delayed_identity,
    append,
    identity_stand_ins,
    sed,
)

NOT_APPLICABLE: dict[str, str] = {
    "L0_data_compression data_compressor_test": "a C++ unit test of Triton's compressor"
    " (validation.py checks its output files); the C++ simple_http_infer_client is left out,"
    " the python clients run",
    "L0_secure_grpc C++ client": "../clients/simple_grpc_infer_client is a C++ program; the"
    " python and asyncio clients run",
    "L0_backend_config tensorflow, onnxruntime on Triton": "the TensorFlow trials need a"
    " savedmodel backend (neither server has one; positive_0 and positive_2 set tensorflow's"
    " default-max-batch-size, which only a TensorFlow model's load logs: they fail on both);"
    " this Triton has no onnxruntime backend: the onnxruntime trials run on repokit only; the"
    " 'backend configuration' trials run on a python model",
    "L0_backend_config backend configuration counts": "Triton's backends also get"
    " backend-directory and min-compute-capability (4 defaults, test.sh wants at least 4);"
    " repokit's backends are built in and use no GPU, so its JSON has auto-complete-config and"
    " default-max-batch-size and the settings given (deliberate; a verbose log line only)",
    "L0_trace OpenTelemetry, custom backend tracing": "the OpenTelemetry trials download"
    " an otelcol collector binary; custom_identity_int32 traces custom activities of Triton's"
    " C++ identity backend. The BLS trial (trace_config) runs with the ensemble gen_qa_models.py"
    " --ensemble writes. The trace-file counts run on both: the C++ simple clients' one HTTP"
    " and one gRPC request per loop are sent with tritonclient, the files counted as"
    " trace_summary counts; simple is python_models/add_sub on its onnx config (no"
    " onnxruntime in this Triton)",
    "L0_sagemaker": "SageMaker's endpoints (/ping, /invocations, /models on port 8080, the"
    " 'serve' script): repokit accepts --allow-sagemaker and friends but has no such endpoint",
    "L0_vertex_ai": "Vertex AI's endpoints (AIP_HTTP_PORT, AIP_PREDICT_ROUTE ...): repokit"
    " accepts --allow-vertex-ai and friends but has no such endpoint",
}


# --- shared pieces -------------------------------------------------------------------------
def example_clients(qa: Path) -> None:
    """``qa/clients``: Triton's QA image copies the client repository's python examples there
    (from ``$TRITON_CLIENT_GIT``, branch r24.10 = Triton 2.51)."""
    clients = qa / "clients"
    if clients.exists():
        return
    git_dir = os.environ.get("TRITON_CLIENT_GIT")
    if not git_dir:
        raise SystemExit(
            "triton_qa: these scenarios run Triton's example clients: set $TRITON_CLIENT_GIT"
            " to a git dir of triton-inference-server/client"
        )
    scratch = qa.parent / "client-src"
    scratch.mkdir(exist_ok=True)
    extract(Path(git_dir), CLIENT_REF, [EXAMPLES], scratch)
    shutil.copytree(scratch / EXAMPLES, clients)


def simple_model(qa: Path, repo: Path) -> None:
    """``cp -r docs/examples/model_repository/simple models/.`` (its python stand-in) and the
    example clients beside the suites."""
    build_repository(qa.parent, ["simple"], repo)
    example_clients(qa)


def client(name: str, script: str, *args: str, fails: bool = False) -> ScriptRun:
    """``python ../clients/SCRIPT ARGS``; with ``fails`` the step passes when it exits
    non-zero (test.sh's 'Expected test failure')."""
    if not fails:
        return ScriptRun(name, (f"../clients/{script}", *args))
    code = (
        "import subprocess, sys\n"
        "done = subprocess.run([sys.executable, *sys.argv[1:]])\n"
        "sys.exit(0 if done.returncode != 0 else 1)\n"
    )
    return ScriptRun(name, ("-c", code, f"../clients/{script}", *args))


# GET/POST a URL; the body must have each regex the given number of times (grep -o | wc -l)
# and the status must be 200 (or must not, with "fail")
COUNT_MATCHES = """
import json, re, sys, urllib.error, urllib.request
path, body, expect, counts = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
data = body.encode() if body else None
request = urllib.request.Request("http://localhost:8000" + path, data=data,
                                 method="POST" if data is not None else "GET")
try:
    with urllib.request.urlopen(request, timeout=60) as response:
        status, text = response.status, response.read().decode()
except urllib.error.HTTPError as exc:
    status, text = exc.code, exc.read().decode()
print(status, text)
problems = []
if (status == 200) != (expect == "ok"):
    problems.append(f"status {status}")
for pattern, wanted in counts:
    found = len(re.findall(pattern, text))
    if found != wanted:
        problems.append(f"{found} of {pattern!r}, wanted {wanted}")
if problems:
    print("; ".join(problems))
    sys.exit(1)
"""


def curl(
    name: str, path: str, counts: dict[str, int], *, body: str = "", fails: bool = False
) -> ScriptRun:
    """test.sh's ``curl ... -o out`` and its ``grep -o PATTERN out | wc -l`` checks."""
    expect = "fail" if fails else "ok"
    return ScriptRun(
        name, ("-c", COUNT_MATCHES, path, body, expect, json.dumps(list(counts.items())))
    )


# --- L0_data_compression -------------------------------------------------------------------
def data_compression() -> list[Scenario]:
    """The python HTTP infer clients (sync and asyncio) with each request and response
    algorithm among deflate, gzip and none where the two differ, as test.sh loops."""
    steps: list[ScriptRun] = []
    for script in ("simple_http_infer_client.py", "simple_http_aio_infer_client.py"):
        for request in ("deflate", "gzip", ""):
            for response in ("deflate", "gzip", ""):
                if request == response:
                    continue
                args = ["-v"]
                if request:
                    args += ["--request-compression-algorithm", request]
                if response:
                    args += ["--response-compression-algorithm", response]
                label = f"{script[:-3]}[{request or 'none'},{response or 'none'}]"
                steps.append(client(label, script, *args))
    return [
        Scenario(
            "L0_data_compression/simple",
            "L0_data_compression",
            simple_model,
            [*steps],
            verbose=False,
        )
    ]


# --- L0_secure_grpc ------------------------------------------------------------------------
def _certified_simple(qa: Path, repo: Path) -> None:
    simple_model(qa, repo)
    folder = repo.parent
    if not (folder / "server.crt").exists():
        make_certificates(folder)


SSL_BASE = [
    "--grpc-use-ssl=1",
    "--grpc-server-cert",
    "{cwd}/server.crt",  # test.sh's relative names: the server runs in the test's folder
    "--grpc-server-key",
    "{cwd}/server.key",
    "--grpc-root-cert",
    "{cwd}/ca.crt",
]
SSL_CASES = {
    "server": ["--grpc-use-ssl=1"],
    "mutual": ["--grpc-use-ssl-mutual=1"],
    "both": ["--grpc-use-ssl=1", "--grpc-use-ssl-mutual=1"],
}
GRPC_CLIENTS = ("simple_grpc_infer_client.py", "simple_grpc_aio_infer_client.py")


def secure_grpc() -> list[Scenario]:
    """Each TLS case (server authentication, mutual, both flags) with the client's own
    certificate; then, for server and mutual, clients without TLS and with the broken
    certificate, which must fail. Certificates are made at run time with openssl."""
    good = (
        "--ssl",
        "--root-certificates",
        "ca.crt",
        "--private-key",
        "client.key",
        "--certificate-chain",
        "client.crt",
    )
    wrong = (
        "--ssl",
        "--root-certificates",
        "ca.crt",
        "--private-key",
        "client2.key",
        "--certificate-chain",
        "client2.crt",
    )
    found = []
    for case, flags in SSL_CASES.items():
        steps = [client(f"{s[:-3]}[ssl]", s, "-v", *good) for s in GRPC_CLIENTS]
        if case != "both":
            steps += [client(f"{s[:-3]}[no_ssl]", s, "-v", fails=True) for s in GRPC_CLIENTS]
            steps += [
                client(f"{s[:-3]}[wrong_ssl]", s, "-v", *wrong, fails=True) for s in GRPC_CLIENTS
            ]
        found.append(
            Scenario(
                f"L0_secure_grpc/{case}",
                "L0_secure_grpc",
                _certified_simple,
                [*steps],
                flags=[*SSL_BASE, *flags],
                verbose=False,
            )
        )
    return found


# --- L0_custom_model_config and L0_config_json ---------------------------------------------
SAVEDMODEL = "savedmodel_nobatch_float32_float32_float32"


def _generated(qa: Path) -> Path:
    """gen_qa_models.py --onnx, once per run (its DATADIR's qa_model_repository)."""
    generated = qa.parent / "qa_model_repository"
    if not generated.exists():
        subprocess.run(
            [sys.executable, "gen_qa_models.py", "--onnx", "--models_dir", str(generated)],
            cwd=qa / "common",
            check=True,
            capture_output=True,
        )
    return generated


def savedmodel_stand_in(qa: Path, repo: Path) -> Path:
    """``cp -r $DATADIR/qa_model_repository/savedmodel_nobatch_float32_float32_float32
    models/.``: the generated onnx model's config (the savedmodel's has the same tensors and
    version policy) with ``backend: "python"``, python_models/add_sub in versions 1-3."""
    source = _generated(qa) / "onnx_nobatch_float32_float32_float32"
    target = repo / SAVEDMODEL
    target.mkdir(parents=True)
    text = re.sub(r"platform:.*", 'backend: "python"', (source / "config.pbtxt").read_text())
    (target / "config.pbtxt").write_text(text.replace("onnx", "savedmodel"))
    shutil.copy(source / "output0_labels.txt", target)
    for version in ("1", "2", "3"):
        (target / version).mkdir()
        shutil.copy(qa / "python_models" / "add_sub" / "model.py", target / version / "model.py")
    return target / "config.pbtxt"


CONFIG_URL = f"/v2/models/{SAVEDMODEL}/config"
VERSIONS = {"default": "1,3", "h100": "1", "v100": "2", "config": "3"}


def _custom_configs(qa: Path, repo: Path) -> None:
    config = savedmodel_stand_in(qa, repo)
    configs = config.parent / "configs"
    configs.mkdir()
    policy = r"^version_policy:.*"
    sed(config, policy, f"version_policy: {{ specific: {{ versions: [{VERSIONS['default']}] }}}}")
    for name in ("h100", "v100", "config"):
        copy = configs / f"{name}.pbtxt"
        shutil.copy(config, copy)
        sed(copy, policy, f"version_policy: {{ specific: {{ versions: [{VERSIONS[name]}] }}}}")


def custom_model_config() -> list[Scenario]:
    """--model-config-name picks configs/<name>.pbtxt (its version policy tells which), falls
    back to config.pbtxt when that file is missing, and an empty name is refused."""
    found = []
    for name, versions in (*VERSIONS.items(), ("h200", VERSIONS["default"])):
        pattern = r'"version_policy":\{"specific":\{"versions":\[' + versions + r"\]\}\}"
        found.append(
            Scenario(
                f"L0_custom_model_config/{name}",
                "L0_custom_model_config",
                _custom_configs,
                [curl("version_policy", CONFIG_URL, {pattern: 1})],
                flags=[] if name == "default" else [f"--model-config-name={name}"],
                verbose=False,
            )
        )
    found.append(
        Scenario(
            "L0_custom_model_config/empty_name",
            "L0_custom_model_config",
            _custom_configs,
            flags=["--model-config-name="],
            expect_start=False,
            verbose=False,
        )
    )
    return found


WARMUP = """model_warmup [{
    name : "warmup 1"
    batch_size: 1
    inputs [{
        key: "INPUT0"
        value: { data_type: TYPE_FP32  dims: 16  zero_data: true }
    }, {
        key: "INPUT1"
        value: { data_type: TYPE_FP32  dims: 16  random_data: true }
    }]
  }, {
    name : "warmup 2"
    batch_size: 1
    inputs [{
        key: "INPUT0"
        value: { data_type: TYPE_FP32  dims: 16  zero_data: true }
    }, {
        key: "INPUT1"
        value: { data_type: TYPE_FP32  dims: 16  random_data: true }
    }]
  }]"""


def _config_json_models(trial: str) -> Layout:
    def lay(qa: Path, repo: Path) -> None:
        if trial == "max_priority_level":
            folder = repo / "max_priority_level"
            (folder / "1").mkdir(parents=True)
            shutil.copy(qa / "L0_config_json" / "max_priority_level.pbtxt", folder / "config.pbtxt")
            identity_stand_ins("max_priority_level")(qa, repo)
            return
        config = savedmodel_stand_in(qa, repo)
        if trial == "reshape":
            sed(config, r"data_type:.*TYPE_FP32", "data_type: TYPE_FP32\nreshape: { shape: [ 16 ]}")
        elif trial == "specific":
            sed(config, r"^version_policy:.*", "version_policy: { specific: { versions: [1] }}")
        elif trial == "dbatch":
            append(
                config,
                "dynamic_batching: { max_queue_delay_microseconds: 42 "
                "default_queue_policy: { default_timeout_microseconds: 123 } "
                "priority_queue_policy: { key: 1  value: { default_timeout_microseconds: 123 }} "
                "priority_queue_policy: { key: 2  value: { default_timeout_microseconds: 123 }}}",
            )
        elif trial == "sbatch":
            append(
                config,
                "sequence_batching: { max_sequence_idle_microseconds: 42 "
                "oldest: { max_queue_delay_microseconds: 987 }}",
            )
        elif trial == "ensemble":
            folder = repo / "simple_ensemble"
            (folder / "1").mkdir(parents=True)
            shutil.copy(qa / "L0_config_json" / "ensemble_config.pbtxt", folder / "config.pbtxt")
        elif trial == "warmup":
            append(config, WARMUP)

    return lay


MAX_UINT64 = "18446744073709551615"
CONFIG_JSON_CHECKS: dict[str, tuple[str, dict[str, int]]] = {
    "ios": (CONFIG_URL, {r'"dims":\[16\]': 4}),
    "reshape": (CONFIG_URL, {r'"reshape":\{"shape":\[16\]\}': 4}),
    "specific": (CONFIG_URL, {r'"version_policy":\{"specific":\{"versions":\[1\]\}\}': 1}),
    "dbatch": (
        CONFIG_URL,
        {
            r'"dynamic_batching":\{': 1,
            r'"max_queue_delay_microseconds":42': 1,
            r'"default_timeout_microseconds":123': 3,
        },
    ),
    "sbatch": (
        CONFIG_URL,
        {
            r'"sequence_batching":\{': 1,
            r'"max_sequence_idle_microseconds":42': 1,
            r'"oldest":\{': 1,
            r'"max_queue_delay_microseconds":987': 1,
        },
    ),
    "ensemble": (
        "/v2/models/simple_ensemble/config",
        {r'"model_version":1': 1, r'"model_version":-1': 1},
    ),
    "warmup": (CONFIG_URL, {r'"dims":\[16\]': 8}),
    "max_priority_level": (
        "/v2/models/max_priority_level/config",
        {
            f'"priority_levels":{MAX_UINT64}': 1,
            '"default_priority_level":4294967295': 1,
            re.escape(
                '"4294967296":{"timeout_action":"REJECT","default_timeout_microseconds":'
                f'{MAX_UINT64},"allow_timeout_override":true,"max_queue_size":10}}'
            ): 1,
            f'"default_timeout_microseconds":{MAX_UINT64}': 1,
        },
    ),
}


def config_json() -> list[Scenario]:
    """The model configuration as JSON (GET .../config): numbers as numbers (dims, reshape,
    versions, queue delays and timeouts, ensemble step versions, warmup dims) and 64-bit
    values that do not fit a double (max uint64 priority levels) written exactly."""
    return [
        Scenario(
            f"L0_config_json/{trial}",
            "L0_config_json",
            _config_json_models(trial),
            [curl(trial, path, counts)],
            verbose=False,
        )
        for trial, (path, counts) in CONFIG_JSON_CHECKS.items()
    ]


# --- L0_backend_config ---------------------------------------------------------------------
def _no_config_python(qa: Path, repo: Path) -> None:
    """A model the server loads whatever --backend-config says (test.sh copies a savedmodel
    that its TensorFlow backend loads; neither server has one): python_models/add_sub."""
    folder = repo / "add_sub"
    (folder / "1").mkdir(parents=True)
    shutil.copy(qa / "python_models" / "add_sub" / "config.pbtxt", folder / "config.pbtxt")
    shutil.copy(qa / "python_models" / "add_sub" / "model.py", folder / "1" / "model.py")


def _no_config_onnx(qa: Path, repo: Path) -> None:
    """``mkdir models/no_config && cp -r .../onnx_float32_float32_float32/1 models/no_config/``:
    the model file without a config."""
    source = _generated(qa) / "onnx_float32_float32_float32" / "1"
    shutil.copytree(source, repo / "no_config" / "1")


COMMON = ["--strict-model-config=false", "--log-verbose=1"]
PARSE_ERROR = "--backend-config option format is"
DEFAULT_LINE = r"Adding default backend config setting: default-max-batch-size,4"
NEGATIVE = (
    ",default-max-batch-size=3",
    "default-max-batch-size=",
    "default-max-batch-size",
    "tensorflow,default-max-batch-size=",
    "tensorflow,default-max-batch-size",
)
POSITIVE = (
    (("tensorflow,default-max-batch-size=5",), "5"),
    (("default-max-batch-size=6",), "6"),
    (("default-max-batch-size=7", "tensorflow,default-max-batch-size=8"), "8"),
)

# the "backend configuration:" log line's JSON: its "cmdline" map has at least N entries and
# the given values
CONFIG_MAP = """
import json, os, sys
lines = open(os.environ["SERVER_LOG"], errors="replace").read().splitlines()
found = [line for line in lines if '] "backend configuration:' in line]
if not found:
    sys.exit("no 'backend configuration:' line in the log")
message = json.loads(found[0].split('] ', 1)[1])  # the quoted, escaped message
cmdline = json.loads(message.split(chr(10), 1)[1])["cmdline"]
print(cmdline)
at_least, wanted = int(sys.argv[1]), json.loads(sys.argv[2])
if len(cmdline) < at_least:
    sys.exit(f"{len(cmdline)} cmdline settings, wanted at least {at_least}")
for key, value in wanted.items():
    if cmdline.get(key) != value:
        sys.exit(f"cmdline {key} is {cmdline.get(key)!r}, wanted {value!r}")
"""


def backend_config() -> list[Scenario]:
    """The default default-max-batch-size (4) and its overrides logged, malformed
    --backend-config values refused, onnxruntime's autofill taking default-max-batch-size
    (5: batching with a dynamic batcher; 0: none) and backend settings kept beside the
    defaults."""
    suite = "L0_backend_config"
    found = [
        Scenario(
            f"{suite}/positive_default",
            suite,
            _no_config_python,
            flags=COMMON,
            log_checks=[LogCheck("default_max_batch_size_4", DEFAULT_LINE)],
            verbose=False,
        )
    ]
    for index, (specs, answer) in enumerate(POSITIVE):
        found.append(
            Scenario(
                f"{suite}/positive_{index}",
                suite,
                _no_config_python,
                flags=[*(f"--backend-config={spec}" for spec in specs), *COMMON],
                log_checks=[
                    LogCheck(
                        f"overwritten_{answer}",
                        rf"Found overwritten default setting: default-max-batch-size,{answer}\b",
                    )
                ],
                verbose=False,
                repokit_flags=[f"--backend-config={spec}" for spec in specs],
            )
        )
    for index, spec in enumerate(NEGATIVE):
        found.append(
            Scenario(
                f"{suite}/negative_parse{index}",
                suite,
                _no_config_python,
                flags=[f"--backend-config={spec}", *COMMON],
                expect_start=False,
                log_checks=[LogCheck("format_message", re.escape(PARSE_ERROR))],
                verbose=False,
                repokit_flags=[f"--backend-config={spec}"],
            )
        )
    for size, checks in (
        ("5", {r'"max_batch_size":5': 1}),
        ("0", {r'"max_batch_size":0': 1}),
    ):
        log = (
            [LogCheck("dynamic_batcher", "Starting dynamic-batcher thread")] if size != "0" else []
        )
        found.append(
            Scenario(
                f"{suite}/onnxruntime_batch_{size}",
                suite,
                _no_config_onnx,
                [curl("config", "/v2/models/no_config/config", checks)],
                flags=[f"--backend-config=onnxruntime,default-max-batch-size={size}", *COMMON],
                log_checks=log,
                verbose=False,
                repokit_flags=[f"--backend-config=onnxruntime,default-max-batch-size={size}"],
            )
        )
    # test.sh runs these on its onnx model; python's here so that this Triton (without
    # onnxruntime) answers too: the settings are the same for every backend
    config_runs: tuple[tuple[str, list[str], int, dict[str, str]], ...] = (
        ("default_configs", [], 4, {}),
        ("global_configs", ["python,min-compute-capability=XX"], 4,
         {"min-compute-capability": "XX"}),
        ("specific_configs", ["python,a=0", "python,y=0", "python,z=0"], 7,
         {"a": "0", "y": "0", "z": "0"}),
    )  # fmt: skip
    for name, given, at_least, wanted in config_runs:
        flags = [f"--backend-config={spec}" for spec in given]
        found.append(
            Scenario(
                f"{suite}/{name}",
                suite,
                _no_config_python,
                [
                    ScriptRun(
                        "backend_configuration",
                        ("-c", CONFIG_MAP, str(at_least), json.dumps(wanted)),
                    )
                ],
                flags=[*flags, *COMMON],
                verbose=False,
                repokit_flags=flags,
            )
        )
    return found


# --- L0_trace -----------------------------------------------------------------------------
def _trace_models(qa: Path, repo: Path) -> None:
    """test.sh's trace_models: simple and global_simple (onnx_int32_int32_int32, version 1:
    its config with ``backend: "python"`` and python_models/add_sub, as this Triton has no
    onnxruntime backend), input_all_required (the test's python model) and dynamic_batch (an
    8 s identity model with a queue of 8 rejected after 1 s, Triton's identity backend as a
    python stand-in)."""
    source = _generated(qa) / "onnx_int32_int32_int32"
    for name in ("simple", "global_simple"):
        target = repo / name
        (target / "1").mkdir(parents=True)
        shutil.copy(qa / "python_models" / "add_sub" / "model.py", target / "1" / "model.py")
        shutil.copy(source / "output0_labels.txt", target)
        text = (source / "config.pbtxt").read_text()
        text = re.sub(r"^name:.*", f'name: "{name}"', text, flags=re.M)
        text = re.sub(r"platform:.*", 'backend: "python"', text)
        (target / "config.pbtxt").write_text(text)
    shutil.copytree(qa / "L0_trace" / "models" / "input_all_required", repo / "input_all_required")
    folder = repo / "dynamic_batch"
    folder.mkdir()
    (folder / "config.pbtxt").write_text(
        'backend: "identity"\nmax_batch_size: 1\n'
        'input [{ name: "INPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]\n'
        'output [{ name: "OUTPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]\n'
        "instance_group [{ count: 1 \n kind: KIND_CPU }]\n"
        "dynamic_batching {\n  preferred_batch_size: [ 1 ]\n"
        "  default_queue_policy { timeout_action: REJECT \n default_timeout_microseconds:"
        " 1000000 \n max_queue_size: 8 }\n}\n"
        'parameters [{ key: "execute_delay_ms" \n value: { string_value: "8000" } }]\n'
    )
    _delayed_identity(folder)


ENSEMBLE_ADD_SUB = "ensemble_add_sub_int32_int32_int32"


def _trace_bls_models(qa: Path, repo: Path) -> None:
    """trace_models with test.sh's ensemble_add_sub_int32_int32_int32 (its DATADIR's
    simple_onnx_int32_int32_int32 ensemble, version 1, its step renamed simple) and bls_simple
    (python_models/bls_simple, no config: the model completes it)."""
    _trace_models(qa, repo)
    generated = qa.parent / "qa_ensemble_model_repository"
    if not generated.exists():
        subprocess.run(
            [sys.executable, "gen_qa_models.py", "--ensemble", "--models_dir", str(generated)],
            cwd=qa / "common",
            check=True,
            capture_output=True,
        )
    target = repo / ENSEMBLE_ADD_SUB
    (target / "1").mkdir(parents=True)
    text = (generated / "simple_onnx_int32_int32_int32" / "config.pbtxt").read_text()
    text = re.sub(r"^name:.*", f'name: "{ENSEMBLE_ADD_SUB}"', text, flags=re.M)
    (target / "config.pbtxt").write_text(re.sub(r"model_name:.*", 'model_name: "simple"', text))
    (repo / "bls_simple" / "1").mkdir(parents=True)
    shutil.copy(
        qa / "python_models" / "bls_simple" / "bls_simple.py",
        repo / "bls_simple" / "1" / "model.py",
    )


# opentelemetry_unittest.send_bls_request(model_name=...) N times: bls_simple calls the model
BLS_REQUESTS = """
import sys
import numpy as np
import tritonclient.http as httpclient
for _ in range(int(sys.argv[2])):
    with httpclient.InferenceServerClient("localhost:8000") as client:
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
                  httpclient.InferInput("INPUT1", [1, 16], "INT32"),
                  httpclient.InferInput("MODEL_NAME", [1], "BYTES")]
        inputs[0].set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
        inputs[1].set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
        inputs[2].set_data_from_numpy(np.array([sys.argv[1]], dtype=np.object_))
        client.infer("bls_simple", inputs)
"""


def _settings(**values: str) -> dict[str, int]:
    """test.sh's ``grep -c '"key":"value"' curl.out`` == 1 for each setting."""
    return {re.escape(f'"{key}":{value}'): 1 for key, value in values.items()}


# test.sh's send_inference_requests: its C++ simple_http_infer_client and
# simple_grpc_infer_client N times each; each sends one request to model simple (INT32
# INPUT0/INPUT1 [1, 16]) and checks the sum and difference. The python examples send two
# requests per run, so this does what the C++ clients do with tritonclient.
TRAFFIC = """
import sys
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
a = np.arange(16, dtype=np.int32).reshape(1, 16)
b = np.ones((1, 16), dtype=np.int32)
for _ in range(int(sys.argv[1])):
    for module, url in ((httpclient, "localhost:8000"), (grpcclient, "localhost:8001")):
        client = module.InferenceServerClient(url)
        inputs = [module.InferInput("INPUT0", [1, 16], "INT32"),
                  module.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer("simple", inputs)
        if not (np.array_equal(result.as_numpy("OUTPUT0"), a + b)
                and np.array_equal(result.as_numpy("OUTPUT1"), a - b)):
            sys.exit(f"wrong answer over {url}")
        client.close()
"""

FILE_EXISTS = (
    "import os, sys; sys.exit(0 if os.path.exists(sys.argv[1]) else sys.argv[1] + ' missing')"
)


def traffic(name: str, pairs: int) -> ScriptRun:
    return ScriptRun(name, ("-c", TRAFFIC, str(pairs)))


def traced(file: str, requests: int) -> list[LogCheck]:
    """test.sh's trace_summary counts of a trace file written by the time the server stopped:
    COMPUTE_INPUT_END timestamps and traces of model simple, ``requests`` of each."""
    label = file.replace(".", "_")
    return [
        LogCheck(f"{label}_compute_input_end", r'"name":\s*"COMPUTE_INPUT_END"',
                 exactly=requests, log_file=file),
        LogCheck(f"{label}_simple", r'"model_name":\s*"simple"', exactly=requests,
                 log_file=file),
    ]  # fmt: skip


def _trace_run(
    name: str, flags: list[str], steps: list[Step], checks: list[LogCheck] | None = None
) -> Scenario:
    return Scenario(
        f"L0_trace/{name}",
        "L0_trace",
        _trace_models,
        steps,
        flags=flags,
        log_checks=checks or [],
        repo_dir="trace_models",
        verbose=False,
        server_in_cwd=True,  # trace files are named relative to it, as test.sh's server
    )


def _trace_flags(file: str, level: str, rate: str) -> list[str]:
    return ["--trace-config", f"triton,file={file}", "--trace-config", f"level={level}",
            "--trace-config", f"rate={rate}"]  # fmt: skip


SIMPLE_SETTING = "/v2/models/simple/trace/setting"
LEVEL = '["TIMESTAMPS"]'


def trace() -> list[Scenario]:
    """test.sh's server runs about the trace settings API and --trace-config:
    settings read back after each update, traces written for the requests sent (the trace
    files counted after the server stopped), trace_count running out, out-of-range values
    refused, trace_endpoint_test.py, and settings of a model that is not loaded refused."""
    level = LEVEL
    return [
        _trace_run(
            "off_to_min",
            _trace_flags("trace_off_to_min.log", "OFF", "1"),
            [
                curl(
                    "enable_global",
                    "/v2/trace/setting",
                    _settings(
                        trace_level=level,
                        trace_rate='"1"',
                        log_frequency='"0"',
                        trace_file='"trace_off_to_min.log"',
                        trace_mode='"triton"',
                    ),
                    body='{"trace_level":["TIMESTAMPS"]}',
                ),
                traffic("requests", 10),
            ],
            traced("trace_off_to_min.log", 20),
        ),
        _trace_run(
            "model_setting",
            _trace_flags("global_trace.log", "TIMESTAMPS", "6"),
            [
                curl(
                    "trace_file_refused",
                    SIMPLE_SETTING,
                    {
                        re.escape(
                            '"error":"trace file location can not be updated through network'
                            ' protocol"'
                        ): 1
                    },
                    body='{"trace_file":"global_trace.log"}',
                    fails=True,
                ),
                curl(
                    "log_frequency",
                    SIMPLE_SETTING,
                    _settings(
                        trace_level=level,
                        trace_rate='"6"',
                        trace_count='"-1"',
                        log_frequency='"2"',
                        trace_file='"global_trace.log"',
                        trace_mode='"triton"',
                    ),
                    body='{"log_frequency":"2"}',
                ),
                traffic("requests", 10),
            ],
            [*traced("global_trace.log.0", 2), *traced("global_trace.log.1", 1)],
        ),
        _trace_run(
            "update_clear",
            _trace_flags("global_trace.log", "TIMESTAMPS", "6"),
            [
                curl("rate_1", SIMPLE_SETTING, {}, body='{"trace_rate":"1"}'),
                curl(
                    "level_off",
                    SIMPLE_SETTING,
                    _settings(
                        trace_level='["OFF"]',
                        trace_rate='"1"',
                        trace_count='"-1"',
                        log_frequency='"0"',
                        trace_file='"global_trace.log"',
                        trace_mode='"triton"',
                    ),
                    body='{"trace_level":["OFF"]}',
                ),
                traffic("requests_off", 10),
                curl(
                    "level_cleared",
                    SIMPLE_SETTING,
                    _settings(
                        trace_level=level,
                        trace_rate='"1"',
                        trace_count='"-1"',
                        log_frequency='"0"',
                        trace_file='"global_trace.log"',
                        trace_mode='"triton"',
                    ),
                    body='{"trace_level":null}',
                ),
                traffic("requests_cleared", 5),
            ],
            traced("global_trace.log", 10),
        ),
        _trace_run(
            "trace_count",
            _trace_flags("global_count.log", "TIMESTAMPS", "1"),
            [
                traffic("requests", 10),
                curl(
                    "settings",
                    SIMPLE_SETTING,
                    _settings(
                        trace_level=level,
                        trace_rate='"1"',
                        trace_count='"-1"',
                        log_frequency='"0"',
                        trace_file='"global_count.log"',
                        trace_mode='"triton"',
                    ),
                ),
                curl(
                    "count_5",
                    "/v2/trace/setting",
                    _settings(
                        trace_level=level,
                        trace_rate='"1"',
                        trace_count='"5"',
                        log_frequency='"0"',
                        trace_file='"global_count.log"',
                        trace_mode='"triton"',
                    ),
                    body='{"trace_count":"5"}',
                ),
                traffic("requests_counted", 10),
                curl(
                    "count_0",
                    SIMPLE_SETTING,
                    _settings(
                        trace_level=level,
                        trace_rate='"1"',
                        trace_count='"0"',
                        log_frequency='"0"',
                        trace_file='"global_count.log"',
                        trace_mode='"triton"',
                    ),
                ),
                ScriptRun("indexed_file_written", ("-c", FILE_EXISTS, "global_count.log.0")),
                *(
                    curl(
                        f"{setting}_out_of_range",
                        SIMPLE_SETTING,
                        {},
                        body=f'{{"{setting}":"10000000000"}}',
                        fails=True,
                    )
                    for setting in ("trace_count", "trace_rate", "log_frequency")
                ),
            ],
            [*traced("global_count.log", 20), *traced("global_count.log.0", 5)],
        ),
        _trace_run(
            "trace_endpoint_test",
            _trace_flags("global_unittest.log", "TIMESTAMPS", "1"),
            [PytestRun("trace_endpoint_test.py", runner="unittest")],
        ),
        Scenario(
            "L0_trace/trace_config",
            "L0_trace",
            _trace_bls_models,
            [
                curl(
                    "settings",
                    SIMPLE_SETTING,
                    _settings(
                        trace_level=level,
                        trace_rate='"4"',
                        trace_count='"6"',
                        log_frequency='"0"',
                        trace_file='"bls_trace.log"',
                        trace_mode='"triton"',
                    ),
                ),
                ScriptRun("bls_requests", ("-c", BLS_REQUESTS, ENSEMBLE_ADD_SUB, "4")),
            ],
            flags=[
                "--trace-config=triton,file=bls_trace.log",
                "--trace-config=level=TIMESTAMPS",
                "--trace-config=rate=4",
                "--trace-config=count=6",
                "--trace-config=mode=triton",
            ],
            log_checks=[
                LogCheck(
                    "compute_input_end",
                    r'"name":\s*"COMPUTE_INPUT_END"',
                    exactly=2,
                    log_file="bls_trace.log",
                ),
                LogCheck(
                    "ensemble_traced",
                    rf'"model_name":\s*"{ENSEMBLE_ADD_SUB}"',
                    exactly=1,
                    log_file="bls_trace.log",
                ),
                LogCheck(
                    "simple_traced",
                    r'"model_name":\s*"simple"',
                    exactly=1,
                    log_file="bls_trace.log",
                ),
                LogCheck("parent_ids", r"parent_id", exactly=2, log_file="bls_trace.log"),
            ],
            repo_dir="trace_models",
            verbose=False,
            server_in_cwd=True,
        ),
        _trace_run(
            "nonexistent_model",
            ["--model-control-mode=explicit"],
            [
                HttpCall("load", "POST", "/v2/repository/models/simple/load", ""),
                curl("get_missing", "/v2/models/does-not-exist/trace/setting", {}, fails=True),
                curl(
                    "post_missing",
                    "/v2/models/does-not-exist/trace/setting",
                    {},
                    body='{"log_frequency":"1"}',
                    fails=True,
                ),
                curl("get_loaded", SIMPLE_SETTING, {}),
                curl("post_loaded", SIMPLE_SETTING, {}, body='{"log_frequency":"1"}'),
                HttpCall("unload", "POST", "/v2/repository/models/simple/unload", ""),
                curl("get_unloaded", SIMPLE_SETTING, {}, fails=True),
                curl("post_unloaded", SIMPLE_SETTING, {}, body='{"log_frequency":"1"}', fails=True),
                HttpCall("reload", "POST", "/v2/repository/models/simple/load", ""),
                curl("get_reloaded", SIMPLE_SETTING, {}),
                curl("post_reloaded", SIMPLE_SETTING, {}, body='{"log_frequency":"1"}'),
            ],
        ),
    ]


def scenarios() -> list[Scenario]:
    return [
        *data_compression(),
        *backend_config(),
        *custom_model_config(),
        *config_json(),
        *secure_grpc(),
        *trace(),
    ]
