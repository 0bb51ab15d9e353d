#!/usr/bin/env python3
"""``repokit validate`` against the load errors Triton's own qa expects (qa/L0_model_config).

Triton's ``L0_model_config/test.sh`` starts tritonserver on one model at a time and greps its
log for the error in the case's ``expected*`` files (any one of them). This tool reads the same
cases from a git dir of triton-inference-server/server (``--server-git`` or
``$TRITON_SERVER_GIT``; nothing of Triton's is in this repository), lays each out as test.sh
does and runs repokit's validation on it with the matching settings:

* ``noautofill_platform/*``: once per platform of test.sh's TRIALS, ``platform: "<trial>"``
  appended to the config, ``--strict-model-config=true`` (``repokit validate --strict``);
* ``special_cases/*`` (``invalid_platform`` with ``--disable-auto-complete-config``);
* ``autofill_noplatform/*/*`` (auto-complete on), but for the cases whose model file test.sh
  copies from Triton's data volume (see ``MODEL_FILE_BACKENDS``); python models' own
  ``auto_complete_config`` runs (``--python-auto-complete``);
* ``autofill_noplatform_success/*/*``, the same backends: these must load (no error);
* with ``--generated``, every ONNX model Triton's qa generators make (``GENERATORS``): these
  load on Triton, so each must validate clean.

A failing case passes when one of repokit's errors for it matches an expected text (test.sh
greps with a basic regular expression). Every case is validated for a GPU server with one GPU
(``--target gpu --gpus 1``), as Triton's qa runs on GPU machines, whose backend directory has
the backends of Triton's qa container (``--backend-directory``, empty library files).

    python tools/triton_model_config.py --server-git DIR [-v] [-k PATTERN] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

from repokit.config.diagnostics import Severity
from repokit.config.report import ValidateOptions
from repokit.config.validate import validate_repository
from tools.triton_git import extract

DEFAULT_REF = "v2.51.0"
# Triton's qa model generators with --onnx (gen_qa_models.py also with --variable): every model
# they make is one Triton's qa loads, so repokit must find nothing wrong with it
GENERATORS = (
    ("gen_qa_models.py",),
    ("gen_qa_models.py", "--variable"),
    ("gen_qa_reshape_models.py",),
    ("gen_qa_identity_models.py",),
    ("gen_qa_sequence_models.py",),
    ("gen_qa_dyna_sequence_models.py",),
    ("gen_qa_ragged_models.py",),
    ("gen_qa_implicit_models.py",),
)
SUITE = "qa/L0_model_config"
AUTO_COMPLETE_MODEL = "qa/python_models/auto_complete/model.py"
TRIALS = (
    "tensorflow_savedmodel",
    "tensorflow_graphdef",
    "tensorrt_plan",
    "onnxruntime_onnx",
    "pytorch_libtorch",
)
# autofill_noplatform folders of backends whose cases need a model file: a case runs when the
# file ships with the test (in its version folder); test.sh copies the others from Triton's data
# volume (or builds them), and those are listed as not run
MODEL_FILE_BACKENDS = (
    "onnx", "openvino", "pytorch", "tensorflow_graphdef", "tensorflow_savedmodel", "tensorrt",
)  # fmt: skip
# the backends of Triton's qa container (its --backend-directory), as empty libraries
QA_BACKENDS = (
    "identity", "onnxruntime", "openvino", "python", "pytorch", "repeat", "square",
    "tensorflow", "tensorrt",
)  # fmt: skip
SPECIAL_STRICT = {"invalid_platform"}  # test.sh: --disable-auto-complete-config
SPECIAL_NOT_RUN = {
    "noautofill_noconfig": "a unittest against a running server (noautofill_test.py)",
}


@dataclass
class Outcome:
    case: str
    result: str  # PASS / FAIL
    expected: list[str]
    errors: list[str]


def prepare(qa: Path) -> None:
    """What test.sh does to the cases before it runs them (for the cases run here): version
    folders, python models copied into them, the runtime-escape scenario's library."""
    suite = qa / "L0_model_config"
    for kind in ("autofill_noplatform", "autofill_noplatform_success"):
        for case in (p for p in (suite / kind / "python").iterdir() if p.is_dir()):
            models = (
                [case]
                if (case / "config.pbtxt").exists()
                else [p for p in case.iterdir() if p.is_dir()]
            )  # a case without a config at its top is a repository
            for model in models:
                (model / "1").mkdir(exist_ok=True)
                own = model / "model.py"  # the case's own model, else the auto_complete one
                shutil.copy(own if own.exists() else qa.parent / AUTO_COMPLETE_MODEL, model / "1")
        for config in (suite / kind / "ensemble").glob("*/*/config.pbtxt"):
            (config.parent / "1").mkdir(exist_ok=True)  # each model of each repository
            if config.parent.name == "repeat_int32":  # test.sh copies its C++ test backend
                (config.parent / "1" / "libtriton_repeat.so").touch()
    for folder in (
        "autofill_noplatform_success/custom/empty_config.identity",
        "autofill_noplatform_success/custom/no_backend.identity",
        "autofill_noplatform/custom/no_delimiter",
        "autofill_noplatform/custom/unknown_backend.unknown",
        # instance groups are checked when the model is created, after the versions
        "noautofill_platform/invalid_cpu",
        "noautofill_platform/invalid_gpu",
        "noautofill_platform/negative_gpu",
        "special_cases/invalid_platform",
        "special_cases/invalid_runtime",
        "special_cases/runtime_escape",
    ):
        (suite / folder / "1").mkdir(parents=True, exist_ok=True)
    escape = suite / "special_cases" / "runtime_escape" / "dummy_runtime"
    escape.mkdir(exist_ok=True)
    (escape / "libtriton_identity.so").touch()


def expected_texts(folder: Path) -> list[str]:
    return [p.read_text().strip() for p in sorted(folder.glob("expected*")) if p.is_file()]


def matches(expected: str, errors: list[str]) -> bool:
    """test.sh's ``grep "$EX"``: a basic regular expression, where ``+ ? ( ) { } |`` are
    literal (the rest reads as in Python's syntax). A leading status name ("Invalid argument:
    ") is how Triton's log renders the status code, which repokit's findings do not carry."""
    text = re.sub(r"^(Invalid argument|Internal|Not found|Unavailable|Unknown): ", "", expected)
    pattern = re.sub(r"([+?(){}|])", r"\\\1", text)
    return any(re.search(pattern, error) for error in errors)


def validate(repo: Path, *, strict: bool) -> list[str]:
    """repokit's errors for the repository, as ``model: message``."""
    backends = repo.parent / "backends"
    for backend in QA_BACKENDS:
        (backends / backend).mkdir(parents=True, exist_ok=True)
        (backends / backend / f"libtriton_{backend}.so").touch()
    # a one-GPU server: the qa's invalid GPU ids (42, -1) are not among its GPUs
    options = ValidateOptions(
        strict=strict,
        target="gpu",
        deep=True,
        gpus=1,
        python_auto_complete=True,
        backend_directory=str(backends),
    )
    report = validate_repository(repo, options)
    return [
        f"{d.model}: {d.message}" if d.model else d.message
        for d in report.all_diagnostics()
        if d.severity is Severity.ERROR
    ]


def run_case(name: str, source: Path, work: Path, *, strict: bool, platform: str = "") -> Outcome:
    """Lay ``source`` out as test.sh does (one model folder, or a whole repository when it
    has neither a config nor a version folder at its top) and validate it."""
    repo = work / "models"
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    is_model = (source / "config.pbtxt").exists() or any(
        p.is_dir() and p.name.isdigit() for p in source.iterdir()
    )
    if is_model or platform:
        target = repo / source.name
        shutil.copytree(source, target)
        expected = expected_texts(target)
        config = target / "config.pbtxt"
        if platform and config.exists():
            lines = [ln for ln in config.read_text().splitlines() if "platform:" not in ln]
            config.write_text("\n".join([*lines, f'platform: "{platform}"', ""]))
    else:
        shutil.copytree(source, repo, dirs_exist_ok=True)
        expected = expected_texts(repo)
    for stale in repo.rglob("expected*"):
        stale.unlink()
    errors = validate(repo, strict=strict)
    # a _success case: test.sh's server starts (and then it compares the configs)
    success = "_success/" in name
    ok = not errors if success else any(matches(text, errors) for text in expected)
    return Outcome(name, "PASS" if ok else "FAIL", expected, errors)


def _ships_model(case: Path) -> bool:
    """Whether a case's version folder holds its model file (in Triton's sources)."""
    return any(f.is_file() for f in case.glob("[0-9]*/**/*"))


def cases(qa: Path, work: Path, selected: list[str], not_run: list[str]) -> list[Outcome]:
    suite = qa / "L0_model_config"
    todo: list[tuple[str, Path, bool, str]] = []
    for target in sorted(p for p in (suite / "special_cases").iterdir() if p.is_dir()):
        if target.name not in SPECIAL_NOT_RUN:
            todo.append((f"special_cases/{target.name}", target, target.name in SPECIAL_STRICT, ""))
    for trial in TRIALS:
        for target in sorted(p for p in (suite / "noautofill_platform").iterdir() if p.is_dir()):
            todo.append((f"noautofill_platform/{target.name}[{trial}]", target, True, trial))
    for kind in ("autofill_noplatform", "autofill_noplatform_success"):
        for backend in sorted(p for p in (suite / kind).iterdir() if p.is_dir()):
            for target in sorted(p for p in backend.iterdir() if p.is_dir()):
                name = f"{kind}/{backend.name}/{target.name}"
                if backend.name in MODEL_FILE_BACKENDS and not _ships_model(target):
                    not_run.append(name)
                    continue
                todo.append((name, target, False, ""))
    found = []
    for name, source, strict, platform in todo:
        if selected and not any(k in name for k in selected):
            continue
        found.append(run_case(name, source, work, strict=strict, platform=platform))
    return found


def generated_cases(qa: Path, work: Path) -> list[Outcome]:
    """Each model of Triton's qa generators (``GENERATORS``, ONNX) must validate clean."""
    found: list[Outcome] = []
    for index, command in enumerate(GENERATORS):
        repo = work / f"generated{index}"
        subprocess.run(
            [sys.executable, command[0], "--onnx", *command[1:], "--models_dir", str(repo)],
            cwd=qa / "common",
            check=True,
            capture_output=True,
        )
        report = validate_repository(repo, ValidateOptions(target="gpu", deep=True))
        label = " ".join(command)
        for name, model in sorted(report.models.items()):
            errors = [d.message for d in model.diagnostics if d.severity is Severity.ERROR]
            found.append(
                Outcome(f"generated/{label}/{name}", "FAIL" if errors else "PASS", [], errors)
            )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-git", default=os.environ.get("TRITON_SERVER_GIT", ""))
    parser.add_argument("--ref", default=DEFAULT_REF)
    parser.add_argument("-k", action="append", default=[], help="only cases containing this")
    parser.add_argument("-v", action="store_true", help="print the errors of failed cases")
    parser.add_argument("--json", type=Path, help="write every outcome here")
    parser.add_argument(
        "--generated",
        action="store_true",
        help="also run Triton's qa model generators (--onnx) and validate what they make",
    )
    args = parser.parse_args(argv)
    if not args.server_git:
        parser.error("--server-git (or $TRITON_SERVER_GIT) is required")
    with tempfile.TemporaryDirectory(prefix="triton-model-config-") as tmp:
        root = Path(tmp)
        paths = [SUITE, AUTO_COMPLETE_MODEL, *(["qa/common"] if args.generated else [])]
        extract(Path(args.server_git), args.ref, paths, root)
        prepare(root / "qa")
        not_run: list[str] = []
        outcomes = cases(root / "qa", root / "work", args.k, not_run)
        if args.generated:
            outcomes += generated_cases(root / "qa", root / "generated")
    for outcome in outcomes:
        print(f"{outcome.case:<72} {outcome.result}")
        if args.v and outcome.result == "FAIL":
            for text in outcome.expected:
                print(f"    expected: {text}")
            for error in outcome.errors or ["(no error: repokit would load it)"]:
                print(f"    repokit:  {error}")
    passed = sum(o.result == "PASS" for o in outcomes)
    print(f"# {len(outcomes)} cases: {passed} pass, {len(outcomes) - passed} fail")
    print(f"# not run (a model file from Triton's data volume): {len(not_run)} cases")
    for name in not_run:
        print(f"#   {name}")
    for name, why in SPECIAL_NOT_RUN.items():
        print(f"# not run: special_cases/{name}: {why}")
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 0 if passed == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
