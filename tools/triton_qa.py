#!/usr/bin/env python3
"""Run Triton's own python-backend qa tests against ``repokit serve`` (or real Triton).

The tests are read at run time from a git dir of triton-inference-server/server (``--server-git``
or ``$TRITON_SERVER_GIT``; ``git archive <ref> qa/...``): nothing of Triton's is in this
repository. Each scenario in ``triton_qa_suites.py`` lays out a model repository the way the
test's ``test.sh`` does, starts the server with the same flags, runs the test's unittest files
unmodified with pytest (or checks the server log, or that the server refused to start) and
prints one line per test.

The qa tests talk to ``localhost:8000/8001/8002``. So that those ports are free whatever else
runs on the machine, the tool re-executes itself in a private network namespace
(``unshare --user --map-root-user --net``) where the server and the tests see only each other;
``--no-netns`` runs in the machine's namespace instead (the three ports must then be free).

Triton's side is the project's reference, ``tools/triton_reference.py`` (installed on first
use), or a launcher given by ``--triton-launcher`` / ``$TRITON_REFERENCE_SCRIPT``
(``triton-reference.sh REPO HTTP GRPC METRICS [flags]``, printing the server's pid, its log in
``$TRITON_VENV/triton.log``).

    python tools/triton_qa.py --list
    python tools/triton_qa.py --server-git DIR                    # repokit
    python tools/triton_qa.py --server-git DIR --target both      # table: test, triton, repokit
    python tools/triton_qa.py --server-git DIR -k lifecycle -k bls
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

from repokit.parent_death import popen_tied
from tools.triton_git import extract
from tools.triton_qa_suites import (
    NOT_APPLICABLE,
    QA_PATHS,
    HttpCall,
    KillChildren,
    LogCheck,
    PytestRun,
    Scenario,
    ScriptRun,
    scenarios,
)
from tools.triton_reference import ReferenceUnavailable, install

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REF = "v2.51.0"
HTTP, GRPC, METRICS = 8000, 8001, 8002
NETNS_MARK = "TRITON_QA_IN_NETNS"
TIMEOUT_READY = 120.0
TIMEOUT_RUN = 900.0


@dataclass
class Outcome:
    test: str
    result: str  # PASS / FAIL / ERROR / SKIP
    detail: str = ""


@dataclass
class Target:
    """How to start one kind of server; ``workdir`` holds its logs."""

    kind: str  # "repokit" | "triton"
    workdir: Path
    launcher: Path | None = None
    pid: int = 0
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = field(default_factory=Path)
    extra_env: dict[str, str] = field(default_factory=dict)

    def start(
        self, repository: Path, flags: list[str], log_name: str, cwd: Path | None = None
    ) -> None:
        """Start the server (in ``cwd`` when given: test.sh's folder, for relative paths)."""
        env = {**os.environ, **self.extra_env}
        if self.kind == "repokit":
            self.log_path = self.workdir / f"{log_name}.log"
            command = [
                sys.executable,
                "-m",
                "repokit",
                "serve",
                "--model-repository",
                str(repository),
                f"--http-port={HTTP}",
                f"--grpc-port={GRPC}",
                f"--metrics-port={METRICS}",
                *flags,
            ]
            with self.log_path.open("wb") as log:
                self.proc = popen_tied(
                    command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    cwd=cwd,
                )
            self.pid = self.proc.pid
            return
        if self.launcher is None:  # the project's own reference (tools/triton_reference.py)
            installation = install(progress=sys.stderr)
            self.log_path = self.workdir / f"{log_name}.triton.log"
            command = installation.command(repository, HTTP, GRPC, METRICS, flags)
            with self.log_path.open("wb") as log:
                self.proc = popen_tied(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=installation.environment(env),
                    start_new_session=True,
                    cwd=cwd,
                )
            self.pid = self.proc.pid
            return
        venv = private_venv(self.workdir / f"venv-{log_name}")
        env["TRITON_VENV"] = str(venv)
        self.log_path = venv / "triton.log"
        out = subprocess.run(
            [str(self.launcher), str(repository), str(HTTP), str(GRPC), str(METRICS), *flags],
            check=True,
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
        )
        self.pid = int(out.stdout.strip().splitlines()[-1])
        self.proc = None

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state not in ("Z", "X")

    def exit_code(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def stop(self, timeout: float = 60.0) -> None:
        if not self.pid:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        self.pid = 0

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


def private_venv(directory: Path) -> Path:
    """A symlink farm over the launcher's venv ($TRITON_VENV), so each server gets its own log."""
    if not os.environ.get("TRITON_VENV"):
        raise SystemExit("--triton-launcher needs $TRITON_VENV: the venv that launcher uses")
    shared = Path(os.environ["TRITON_VENV"])
    directory.mkdir(parents=True, exist_ok=True)
    for entry in ("bin", "lib", "lib64", "include", "pyvenv.cfg", "triton-backends"):
        source = shared / entry
        if source.exists() and not (directory / entry).exists():
            (directory / entry).symlink_to(source)
    return directory


# --- network namespace ---------------------------------------------------------------------
def loopback_up() -> None:
    """``ip link set lo up`` without the ip tool (SIOCGIFFLAGS / SIOCSIFFLAGS)."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH14x", b"lo", flags | iff_up))


def reexec_in_netns(argv: list[str]) -> int:
    unshare = shutil.which("unshare")
    if unshare is None:
        sys.exit("triton_qa: 'unshare' is missing; run with --no-netns and ports 8000-8002 free")
    env = {**os.environ, NETNS_MARK: "1"}
    command = [unshare, "--user", "--map-root-user", "--net", sys.executable, *argv]
    child = popen_tied(command, env=env)

    def forward(signum: int, _frame: object) -> None:  # let the inner run stop its servers
        child.send_signal(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, forward)
    return child.wait()


def exit_on_signal(signum: int, _frame: object) -> None:
    """SIGTERM ends the run through ``finally`` blocks, so no server is left behind."""
    raise SystemExit(128 + signum)


def ports_free() -> list[int]:
    busy = []
    for port in (HTTP, GRPC, METRICS):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                busy.append(port)
    return busy


# --- qa tree -------------------------------------------------------------------------------
def extract_qa(git_dir: Path, ref: str, into: Path) -> Path:
    extract(git_dir, ref, QA_PATHS, into)
    return into / "qa"


def http_ready(timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{HTTP}/v2/health/ready", timeout=timeout
        ) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def wait_ready(target: Target, timeout: float) -> bool:
    """As qa/common/util.sh's run_server: ready within the timeout, or the server died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not target.alive():
            return False
        if http_ready():
            return True
        time.sleep(0.5)
    return False


def wait_exit(target: Target, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not target.alive():
            return True
        time.sleep(0.3)
    return False


def child_pids(pid: int) -> list[int]:
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                children.append(int(stat.parent.name))
    return children


def http_call(call: HttpCall) -> tuple[int, str]:
    data = call.body.encode() if call.body is not None else None
    request = urllib.request.Request(
        f"http://127.0.0.1:{HTTP}{call.path}", data=data, method=call.method
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


def junit_outcomes(xml_path: Path, prefix: str, suffix: str) -> list[Outcome]:
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError):
        return []
    outcomes = []
    for case in root.iter("testcase"):
        classname = case.get("classname", "").rsplit(".", 1)[-1]
        name = case.get("name", "")
        label = f"{prefix}::{classname}::{name}" if classname else f"{prefix}::{name}"
        result, detail = "PASS", ""
        for tag, verdict in (("failure", "FAIL"), ("error", "ERROR"), ("skipped", "SKIP")):
            element = case.find(tag)
            if element is not None:
                result = verdict
                detail = (element.get("message") or element.text or "").strip()
                break
        outcomes.append(
            Outcome(label + suffix, result, detail.splitlines()[0][:200] if detail else "")
        )
    return outcomes


# Runs one test file with unittest's runner and writes each test's verdict as JSON lines
# (argv: the file, the output path).
UNITTEST_RUNNER = """
import importlib, json, sys, unittest
target, out = sys.argv[1], sys.argv[2]
sys.argv = [target.partition("::")[0]]
sys.path.insert(0, ".")
file, _, name = target.partition("::")
if not hasattr(unittest.TestCase, "_feedErrorsToResult"):
    # Python >= 3.11 dropped what tests written for 3.10 read in tearDown
    # (self._feedErrorsToResult(result, self._outcome.errors)); give them this test's
    # errors and failures from the running result, as 3.10's fed them.
    def _feed_errors(self, result, errors):
        running = self._outcome.result
        result.errors.extend(e for e in running.errors if e[0] is self)
        result.failures.extend(f for f in running.failures if f[0] is self)
    unittest.TestCase._feedErrorsToResult = _feed_errors
    unittest.case._Outcome.errors = property(lambda outcome: [])
module = importlib.import_module(file[:-3])
loader = unittest.defaultTestLoader
if name:
    suite = loader.loadTestsFromName(name.replace("::", "."), module)
else:
    suite = loader.loadTestsFromModule(module)
rows = []
class Result(unittest.TextTestResult):
    def addSuccess(self, test):
        super().addSuccess(test); rows.append((test.id(), "PASS", ""))
    def addFailure(self, test, err):
        super().addFailure(test, err); rows.append((test.id(), "FAIL", str(err[1])))
    def addError(self, test, err):
        super().addError(test, err); rows.append((test.id(), "ERROR", str(err[1])))
    def addSkip(self, test, reason):
        super().addSkip(test, reason); rows.append((test.id(), "SKIP", reason))
    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            rows.append((test.id(), "FAIL", str(subtest) + ": " + str(err[1])))
unittest.TextTestRunner(resultclass=Result, verbosity=2).run(suite)
with open(out, "w") as handle:
    for row in rows:
        handle.write(json.dumps(row) + "\\n")
"""


def unittest_outcomes(path: Path, prefix: str, suffix: str) -> list[Outcome]:
    """One outcome per test (a test with a failed subtest and its own pass: the failure)."""
    verdicts: dict[str, tuple[str, str]] = {}
    if not path.exists():
        return []
    for line in path.read_text().splitlines():
        test_id, verdict, detail = json.loads(line)
        if test_id not in verdicts or verdicts[test_id][0] == "PASS":
            verdicts[test_id] = (verdict, detail)
    outcomes = []
    for test_id, (verdict, detail) in verdicts.items():
        _module, classname, name = test_id.rsplit(".", 2)
        first = detail.strip().splitlines()[0][:200] if detail.strip() else ""
        outcomes.append(Outcome(f"{prefix}::{classname}::{name}{suffix}", verdict, first))
    return outcomes


def run_pytest(
    run: PytestRun, cwd: Path, label: str, workdir: Path, env: dict[str, str]
) -> list[Outcome]:
    if run.runner == "unittest":
        return run_unittest(run, cwd, label, workdir, env)
    xml_path = workdir / f"junit-{abs(hash((label, run.target, tuple(run.env.items()))))}.xml"
    with contextlib.suppress(FileNotFoundError):
        xml_path.unlink()
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        f"--junitxml={xml_path}",
        "--timeout=300",
    ]
    command.append(run.target)
    return _client_outcomes(
        run, command, cwd, label, workdir, env, lambda prefix: junit_outcomes(xml_path, *prefix)
    )


def _client_outcomes(
    run: PytestRun,
    command: list[str],
    cwd: Path,
    label: str,
    workdir: Path,
    env: dict[str, str],
    read: Callable[[tuple[str, str]], list[Outcome]],
) -> list[Outcome]:
    """Run a test client (its output appended to the scenario's client log) and ``read`` its
    results with (label prefix, suffix); one ERROR line when it timed out or gave none."""
    log_path = workdir / f"{label.replace('/', '_')}.client.log"
    with log_path.open("ab") as log:
        try:
            subprocess.run(
                command,
                cwd=cwd,
                env={**env, **run.env},
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=run.timeout or TIMEOUT_RUN,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return [Outcome(f"{label}/{run.target}{run.suffix()}", "ERROR", "client timed out")]
    outcomes = read((f"{label}/{run.target.split('::')[0]}", run.suffix()))
    if not outcomes:
        return [
            Outcome(f"{label}/{run.target}{run.suffix()}", "ERROR", f"no results (see {log_path})")
        ]
    return outcomes


def run_unittest(
    run: PytestRun, cwd: Path, label: str, workdir: Path, env: dict[str, str]
) -> list[Outcome]:
    out = workdir / f"unittest-{abs(hash((label, run.target, tuple(run.env.items()))))}.jsonl"
    out.unlink(missing_ok=True)
    command = [sys.executable, "-c", UNITTEST_RUNNER, run.target, str(out)]
    return _client_outcomes(
        run, command, cwd, label, workdir, env, lambda prefix: unittest_outcomes(out, *prefix)
    )


def collected(run: PytestRun, cwd: Path, env: dict[str, str]) -> list[str]:
    """The test ids pytest would run (to name them when the server never came up: some qa
    tests wait forever for a stream that a missing server never answers)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--collect-only",
         run.target],
        cwd=cwd, env={**env, **run.env}, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    return [line for line in done.stdout.splitlines() if "::" in line]


def not_run(
    step: PytestRun | ScriptRun, cwd: Path, label: str, env: dict[str, str]
) -> list[Outcome]:
    reason = "not run: the server did not become ready"
    if isinstance(step, ScriptRun):
        return [Outcome(f"{label}::{step.name}", "FAIL", reason)]
    ids = collected(step, cwd, env)
    if not ids:
        return [Outcome(f"{label}/{step.target}{step.suffix()}", "FAIL", reason)]
    return [Outcome(f"{label}/{test_id}{step.suffix()}", "FAIL", reason) for test_id in ids]


def run_script(
    run: ScriptRun, cwd: Path, label: str, workdir: Path, env: dict[str, str]
) -> Outcome:
    log_path = workdir / f"{label.replace('/', '_')}.client.log"
    with log_path.open("ab") as log:
        try:
            done = subprocess.run(
                [sys.executable, *run.argv],
                cwd=cwd,
                env={**env, **run.env},
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=TIMEOUT_RUN,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Outcome(f"{label}::{run.name}", "ERROR", "client timed out")
    if done.returncode == 0:
        return Outcome(f"{label}::{run.name}", "PASS")
    tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or [""]
    return Outcome(f"{label}::{run.name}", "FAIL", f"exit {done.returncode}: {tail[0][:200]}")


def log_check(check: LogCheck, text: str, label: str) -> Outcome:
    count = len(re.findall(check.pattern, text, flags=re.MULTILINE))
    ok = count >= check.at_least if check.exactly is None else count == check.exactly
    wanted = f"== {check.exactly}" if check.exactly is not None else f">= {check.at_least}"
    detail = "" if ok else f"log has {count} of {check.pattern!r}, wanted {wanted}"
    return Outcome(f"{label}::{check.name}", "PASS" if ok else "FAIL", detail)


def placed(text: str, qa: Path, cwd: Path) -> str:
    """A scenario's flag or environment value with ``{qa}`` and ``{cwd}`` replaced by the
    absolute paths of the qa tree and the test's folder (test.sh's `pwd`)."""
    return text.replace("{qa}", str(qa)).replace("{cwd}", str(cwd))


def run_scenario(scenario: Scenario, qa: Path, target: Target, workdir: Path) -> list[Outcome]:
    label = scenario.label
    cwd = qa / scenario.cwd
    repository = cwd / scenario.repo_dir
    if scenario.layout is not None:
        if not scenario.keep_existing:
            shutil.rmtree(repository, ignore_errors=True)
        repository.mkdir(parents=True, exist_ok=True)
        scenario.layout(qa, repository)
    scenario_env = {name: placed(value, qa, cwd) for name, value in scenario.env.items()}
    env = {
        **os.environ,
        **scenario_env,
        "TRITONSERVER_IPADDR": "localhost",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    # test.sh exports TRITON_DIR (where qa/ lives; models such as init_args read it)
    env["TRITON_DIR"] = str(qa.parent)
    target.extra_env = {**scenario_env, "TRITON_DIR": str(qa.parent)}
    log_name = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
    env["SERVER_LOG"] = str(workdir / f"{log_name}.log")  # some tests read it; filled below
    outcomes: list[Outcome] = []
    try:
        flags = [placed(flag, qa, cwd) for flag in scenario.flags_for(target.kind)]
        target.start(repository, flags, log_name, cwd if scenario.server_in_cwd else None)
    except (subprocess.CalledProcessError, OSError, ValueError) as exc:
        return [Outcome(f"{label}::server", "ERROR", f"could not start: {exc}")]
    env["SERVER_LOG"] = str(target.log_path)
    env["SERVER_PID"] = str(target.pid)  # tests that stop the server themselves read it
    if scenario.server_log:
        named = cwd / scenario.server_log
        named.unlink(missing_ok=True)
        named.symlink_to(target.log_path)
    try:
        if not scenario.expect_start:
            exited = wait_exit(target, scenario.start_timeout or TIMEOUT_READY)
            ready = http_ready()
            detail = "" if exited else "server still running"
            if exited and target.exit_code() == 0:
                exited, detail = False, "server exited with status 0"
            outcomes.append(
                Outcome(
                    f"{label}::refuses_to_start", "PASS" if exited and not ready else "FAIL", detail
                )
            )
        elif not wait_ready(target, scenario.start_timeout or TIMEOUT_READY):
            tail = target.log_text().strip().splitlines()[-3:]
            outcomes.append(Outcome(f"{label}::server_ready", "FAIL", " | ".join(tail)[:300]))
            for step in scenario.steps:
                if isinstance(step, (PytestRun, ScriptRun)):
                    outcomes.extend(not_run(step, cwd, label, env))
        else:
            if scenario.report_ready:
                outcomes.append(Outcome(f"{label}::server_ready", "PASS"))
            for step in scenario.steps:
                if isinstance(step, HttpCall):
                    status, body = http_call(step)
                    if status != step.expect:
                        outcomes.append(
                            Outcome(f"{label}::{step.name}", "FAIL", f"{status} {body[:200]}")
                        )
                elif isinstance(step, KillChildren):
                    for pid in child_pids(target.pid):
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.kill(pid, signal.SIGKILL)
                elif isinstance(step, PytestRun):
                    outcomes.extend(run_pytest(step, cwd, label, workdir, env))
                elif isinstance(step, ScriptRun):
                    outcomes.append(run_script(step, cwd, label, workdir, env))
    finally:
        target.stop()
    text = target.log_text()
    for check in scenario.log_checks:
        if check.expected_file:
            lines = (cwd / check.expected_file).read_text().splitlines()
            pattern = "|".join(rf"^E\d{{4}}.*{line}" for line in lines if line)
            check = dataclasses.replace(check, pattern=pattern)
        checked = text
        if check.log_file:  # the server's --log-file, not its output
            path = cwd / check.log_file
            checked = path.read_text(errors="replace") if path.exists() else ""
        outcomes.append(log_check(check, checked, label))
    return outcomes


SHM_MONITOR_SHIM = '''"""Stand-in for the python backend's triton_shm_monitor (a C++ module).
qa/common/shm_util.py probes Triton's own shared-memory regions for leaks; the regions are an
implementation detail of Triton's stub IPC, so the probe reads a constant on both servers."""


class SharedMemoryManager:
    def __init__(self, name):
        self.name = name

    def free_memory(self):
        return 0
'''


def shim_path(workdir: Path) -> str:
    shim = workdir / "shim"
    shim.mkdir(exist_ok=True)
    (shim / "triton_shm_monitor.py").write_text(SHM_MONITOR_SHIM)
    return os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH", "")) if p)


def run_all(
    selected: list[Scenario], qa_source: Path, kind: str, args: argparse.Namespace
) -> list[Outcome]:
    workdir = Path(tempfile.mkdtemp(prefix=f"triton-qa-{kind}-", dir=args.workdir))
    os.environ["PYTHONPATH"] = shim_path(workdir)
    qa_copy = workdir / "qa"
    shutil.copytree(qa_source, qa_copy, symlinks=True)
    for other in qa_source.parent.iterdir():  # QA_PATHS outside qa/ (docs/...), beside it
        if other.is_dir() and other.name != "qa":
            shutil.copytree(other, workdir / other.name, symlinks=True)
    target = Target(kind=kind, workdir=workdir, launcher=args.launcher)
    outcomes: list[Outcome] = []
    for scenario in selected:
        found = run_scenario(scenario, qa_copy, target, workdir)
        for outcome in found:
            if not args.quiet:
                print(format_line(outcome, args.verbose), flush=True)
        outcomes.extend(found)
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"# {kind} logs kept in {workdir}", flush=True)
    return outcomes


def format_line(outcome: Outcome, verbose: bool) -> str:
    line = f"{outcome.test}  {outcome.result}"
    if verbose and outcome.detail:
        line += f"  ({outcome.detail})"
    return line


def print_table(triton: list[Outcome], repokit: list[Outcome]) -> None:
    left = {o.test: o.result for o in triton}
    right = {o.test: o.result for o in repokit}
    names = list(dict.fromkeys([*(o.test for o in triton), *(o.test for o in repokit)]))
    width = max((len(n) for n in names), default=10)
    print(f"{'test':<{width}}  {'triton-2.51':<11}  repokit")
    for name in names:
        a, b = left.get(name, "-"), right.get(name, "-")
        mark = "  <<" if a == "PASS" and b != "PASS" else ""
        print(f"{name:<{width}}  {a:<11}  {b}{mark}")
    both = sum(1 for n in names if left.get(n) == "PASS" and right.get(n) == "PASS")
    ref = sum(1 for n in names if left.get(n) == "PASS")
    ours = sum(1 for n in names if right.get(n) == "PASS")
    print(f"# {len(names)} tests: triton passes {ref}, repokit passes {ours}, both {both}")


def compare_saved(triton_json: Path, repokit_json: Path) -> int:
    """The table of a Triton run and a repokit run saved with ``--json``."""
    runs = []
    for path, kind in ((triton_json, "triton"), (repokit_json, "repokit")):
        try:
            saved = json.loads(path.read_text())[kind]
        except (OSError, ValueError, KeyError) as exc:
            print(f"triton_qa: {path} holds no {kind} run ({exc})", file=sys.stderr)
            return 2
        runs.append([Outcome(**item) for item in saved])
    print_table(runs[0], runs[1])
    return 0


def select(all_scenarios: list[Scenario], patterns: list[str]) -> list[Scenario]:
    """The scenarios whose label contains a pattern; without patterns every scenario but the
    heavy ones (those run only when a pattern names them)."""
    if not patterns:
        return [s for s in all_scenarios if not s.heavy]
    return [s for s in all_scenarios if any(p in s.label for p in patterns)]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--server-git",
        type=Path,
        default=os.environ.get("TRITON_SERVER_GIT"),
        help="git dir of triton-inference-server/server ($TRITON_SERVER_GIT)",
    )
    parser.add_argument("--ref", default=DEFAULT_REF, help=f"tag or commit (default {DEFAULT_REF})")
    parser.add_argument("--target", choices=("repokit", "triton", "both"), default="repokit")
    parser.add_argument(
        "--triton-launcher",
        dest="launcher",
        type=Path,
        default=os.environ.get("TRITON_REFERENCE_SCRIPT"),
        help="a triton-reference.sh-style launcher instead of tools/triton_reference.py"
        " ($TRITON_REFERENCE_SCRIPT)",
    )
    parser.add_argument(
        "-k",
        dest="patterns",
        action="append",
        default=[],
        help="only scenarios whose label contains this (repeatable)",
    )
    parser.add_argument("--list", action="store_true", help="list scenarios and exclusions")
    parser.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("TRITON_JSON", "REPOKIT_JSON"),
        help="print the table of two runs saved with --json (one per --target)",
    )
    parser.add_argument(
        "--no-netns",
        action="store_true",
        help="use the machine's network (ports 8000-8002 must be free)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="where temp dirs go")
    parser.add_argument("--keep", action="store_true", help="keep model repositories and logs")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("-v", "--verbose", action="store_true", help="show why a test failed")
    parser.add_argument("-q", "--quiet", action="store_true", help="only the final table")
    return parser.parse_args(argv)


@contextlib.contextmanager
def qa_tree(args: argparse.Namespace) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="triton-qa-src-", dir=args.workdir) as tmp:
        yield extract_qa(args.server_git, args.ref, Path(tmp))


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    all_scenarios = scenarios()
    if args.list:
        for scenario in all_scenarios:
            print(scenario.label)
        print("\n# not covered here:")
        for name, reason in NOT_APPLICABLE.items():
            print(f"{name}: {reason}")
        return 0
    if args.compare:
        return compare_saved(*args.compare)
    if args.server_git is None:
        print("triton_qa: give --server-git or $TRITON_SERVER_GIT", file=sys.stderr)
        return 2
    if args.target in ("triton", "both"):
        if args.launcher is not None and not args.launcher.exists():
            print(f"triton_qa: no launcher {args.launcher}", file=sys.stderr)
            return 2
        if args.launcher is None:
            try:
                install(progress=sys.stderr)  # before the network namespace: it may download
            except ReferenceUnavailable as exc:
                print(f"triton_qa: the Triton reference cannot run here: {exc}", file=sys.stderr)
                return 2
    if not args.no_netns and not os.environ.get(NETNS_MARK):
        return reexec_in_netns([str(Path(__file__).resolve()), *argv])
    signal.signal(signal.SIGTERM, exit_on_signal)
    if os.environ.get(NETNS_MARK):
        loopback_up()
    busy = ports_free()
    if busy:
        print(f"triton_qa: ports {busy} are in use", file=sys.stderr)
        return 2
    selected = select(all_scenarios, args.patterns)
    results: dict[str, list[Outcome]] = {}
    with qa_tree(args) as qa:
        kinds = ["triton", "repokit"] if args.target == "both" else [args.target]
        for kind in kinds:
            print(f"# {kind}", flush=True)
            results[kind] = run_all(selected, qa, kind, args)
    if args.target == "both":
        print_table(results["triton"], results["repokit"])
    else:
        outcomes = results[args.target]
        passed = sum(1 for o in outcomes if o.result == "PASS")
        print(f"# {passed} passed, {len(outcomes) - passed} not passed")
    if args.json:
        args.json.write_text(
            json.dumps({k: [o.__dict__ for o in v] for k, v in results.items()}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
