"""ModelManager: loads, reloads and unloads model versions; answers version selection.

Control modes as tritonserver (§5.4): ``none`` loads every model directory at start,
``explicit`` only ``--load-model`` names (``*`` = all) and then the load/unload API, ``poll``
loads all and rescans every ``repository_poll_secs`` (``poll_once`` does one rescan).

Per-version states are Triton's (UNKNOWN/READY/UNAVAILABLE/LOADING/UNLOADING) with reasons;
an explicitly unloaded version is UNAVAILABLE with reason ``unloaded``. A model whose config
cannot be read or validated is not loaded and carries a model-level reason. A reload builds
the new versions first and swaps them in only when they all loaded: a failed reload keeps the
old versions serving. Unloading (and replacing) a version waits for its in-flight requests.
One model failing never touches another. A READY version whose backend is restarting an
instance shows as LOADING with the reason in the index (and is not ready); one whose backend
gives up (``Backend.on_failed``: a python model that keeps dying) becomes UNAVAILABLE with the
reason and is unloaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from repokit.backends.base import Backend, BackendRequest, ModelContext
from repokit.backends.instance_log import log_instance_failure
from repokit.backends.server_api import ServerApi
from repokit.config.ensemble_dependencies import (
    CYCLE_PREFIX,
    StepModelState,
    cycle,
    first_problem,
)
from repokit.config.onnx_io import DEFAULT_MAX_BATCH_SIZE
from repokit.config.override_paths import override_path_problem
from repokit.config.parse import ConfigParseError, parse_json
from repokit.core.config_json import config_to_json
from repokit.core.dispatch import run_composing
from repokit.core.instance_update import without_instances
from repokit.core.latency_summary import LatencySummaries
from repokit.core.load_stage import version_stage_status
from repokit.core.loaded_model import (
    BackendFactory,
    LoadedVersion,
    SchedulerFactory,
    default_scheduler_factory,
    read_labels,
)
from repokit.core.model_source import (
    ModelDefinition,
    ModelLoadError,
    fingerprint,
    model_directories,
    read_model,
    version_stamps,
)
from repokit.core.request_checks import ModelIO
from repokit.core.response_cache import ResponseCache
from repokit.core.scheduling import StepRunner
from repokit.core.settings import ServerSettings
from repokit.core.statistics import ModelStats
from repokit.errors import (
    CODE_TEXT,
    Code,
    RepokitError,
    internal,
    invalid_arg,
    not_found,
    unavailable,
)
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.protocol.model_version import parse_model_version
from repokit.scheduler.base import ScheduledResult
from repokit.scheduler.ensemble import StepModel
from repokit.scheduler.rate_limiter import RateLimiter

log = logging.getLogger(__name__)

READY, UNAVAILABLE, LOADING, UNLOADING = "READY", "UNAVAILABLE", "LOADING", "UNLOADING"
UNLOADED_REASON = "unloaded"
NOT_EXPLICIT = "explicit model load / unload is not allowed if polling is enabled"
DUPLICATE_REASON = "model appears in two or more repositories"
# --model-namespacing: a model's record key is "<name><NAMESPACE_SEP><repository>" (Triton's
# ModelIdentifier); requests name models by name alone
NAMESPACE_SEP = "\0"
WARMUP_RULES = "warmup-"  # the checks of warmup samples (Triton runs them on an instance)


def public_name(key: str) -> str:
    """The model name of a record key (see NAMESPACE_SEP)."""
    return key.partition(NAMESPACE_SEP)[0]


def _identifier_order(key: str) -> tuple[str, str]:
    """Triton's ModelIdentifier order: by namespace (repository), then by name."""
    name, _, namespace = key.partition(NAMESPACE_SEP)
    return namespace, name


def _identifier_text(key: str) -> str:
    """A record key as Triton prints its ModelIdentifier: the name, "<namespace>::<name>"
    with --model-namespacing."""
    name, _, namespace = key.partition(NAMESPACE_SEP)
    return f"{namespace}::{name}" if namespace else name


def _ambiguous(name: str, count: int) -> RepokitError:
    return invalid_arg(
        f"There are {count} identifiers of model '{name}' in global map, model namespace must"
        " be provided to resolve ambiguity."
    )


@dataclass
class VersionStatus:
    version: int
    state: str
    reason: str = ""
    loaded: LoadedVersion | None = None


@dataclass
class ModelRecord:
    name: str
    versions: dict[int, VersionStatus] = field(default_factory=dict)
    known: bool = False  # the config was valid (Triton's lifecycle knows the model)
    reason: str = ""  # model-level failure
    fingerprint: str = ""
    private_dir: Path | None = None  # temp dir holding `file:` load parameters
    dependencies: tuple[str, ...] = ()  # ensemble composing models
    version_stamps: dict[int, str] = field(default_factory=dict)  # of the versions loaded
    graph_error: str = ""  # an ensemble its step models refused (Triton's dependency graph)
    load_error: str = ""  # the last load's failure, as Triton's load status reads

    def ready(self) -> list[VersionStatus]:
        return [s for s in self.versions.values() if s.state == READY and s.loaded is not None]


DEFAULT_MAX_BATCH_SIZE_SETTING = "default-max-batch-size"  # Triton core's one default


def _configured_backend_factory(
    config: dict[str, dict[str, str]], *, auto_complete: bool = True
) -> BackendFactory:
    """Backends from the registry, each given its ``--backend-config`` settings (the global
    ones, then its own over them). As Triton's core, each model's load logs (verbose) whether
    default-max-batch-size was set or takes its default, and each backend's first model the
    settings the backend gets ("backend configuration:")."""
    announced: set[str] = set()

    def create(context: ModelContext) -> Backend:
        from repokit.backends.registry import backend_name, create_backend

        backend = create_backend(context)
        name = backend_name(context.config)
        settings = {**config.get("", {}), **config.get(name, {})}
        size = settings.get(DEFAULT_MAX_BATCH_SIZE_SETTING)
        if size is not None:
            log.debug(
                "Found overwritten default setting: %s,%s", DEFAULT_MAX_BATCH_SIZE_SETTING, size
            )
        else:
            log.debug(
                "Adding default backend config setting: %s,%d",
                DEFAULT_MAX_BATCH_SIZE_SETTING,
                DEFAULT_MAX_BATCH_SIZE,
            )
        if name not in announced and log.isEnabledFor(logging.DEBUG):
            announced.add(name)
            cmdline = {
                "auto-complete-config": "true" if auto_complete else "false",
                DEFAULT_MAX_BATCH_SIZE_SETTING: str(DEFAULT_MAX_BATCH_SIZE),
                **settings,
            }
            log.debug(
                "backend configuration:\n%s",
                json.dumps({"cmdline": cmdline}, separators=(",", ":")),
            )
        if settings:
            try:
                backend.configure(settings)
            except ValueError as exc:
                raise invalid_arg(f"--backend-config: {exc}") from exc
        return backend

    return create


MODEL_NOT_FOUND = "model not found in any model repository."


def check_model_name(name: str) -> None:
    if not name.strip():
        raise invalid_arg("Model name cannot be empty. Please enter a valid name to deploy.")
    if name.strip() == ".." or "/" in name:
        raise invalid_arg(
            f"invalid model name '{name}', model name must not contain path traversal characters"
        )


class LoggedLoadError(RepokitError):
    """A load failure the server log has already told as Triton tells it (its lifecycle
    lines, or the poll failure): a start or a poll does not log it again."""


def _poll_failure(name: str, reason: str = "") -> RepokitError:
    """Triton's INTERNAL ``failed to load '<name>', failed to poll from model repository``,
    with the reason after it; the server log says the reason as Triton's does."""
    tail = f": {reason}" if reason else ""
    message = f"failed to load '{name}', failed to poll from model repository{tail}"
    if not reason:
        return internal(message)
    log.error("Poll failed for model directory '%s': %s", name, reason)
    return LoggedLoadError(Code.INTERNAL, message)


def check_file_keys(files: dict[str, bytes]) -> None:
    """A NUL byte in a ``file:`` key is the client's mistake (400); Triton 2.51 answers 500,
    its JSON reader stopping at the NUL."""
    for key in files:
        if "\0" in key:
            shown = key.replace("\0", "\\0")
            raise invalid_arg(
                f"Invalid file parameter '{shown}': a file path must not contain a NUL byte"
            )


def write_private_files(name: str, files: dict[str, bytes]) -> Path:
    """A temp model directory holding only the ``file:<path>`` parameters (as Triton)."""
    root = Path(tempfile.mkdtemp(prefix="repokit-load-"))
    target = root / name
    target.mkdir()
    try:
        for key, content in files.items():
            relative = key[len("file:") :] if key.startswith("file:") else key
            normalized = os.path.normpath(relative) if relative else ""
            if (
                not normalized
                or os.path.isabs(relative)
                or normalized in (".", "..")
                or normalized.startswith("../")
            ):
                raise invalid_arg(
                    f"Invalid file parameter '{key}' with normalized path '{normalized}' must "
                    "stay within model directory."
                )
            _write_file(key, target / normalized, content)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return target


def _write_file(key: str, path: Path, content: bytes) -> None:
    """One ``file:`` parameter; the file system's refusals said in Triton's terms."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise invalid_arg(
            f"Invalid file parameter '{key}', directory has been created as a file"
        ) from None
    except OSError as exc:  # e.g. a path component longer than the file system allows
        raise invalid_arg(f"Invalid file parameter '{key}': {exc.strerror}") from None
    try:
        path.write_bytes(content)
    except IsADirectoryError:
        raise invalid_arg(
            f"Invalid file parameter '{key}', file has been created as a directory"
        ) from None
    except OSError as exc:
        raise invalid_arg(f"Invalid file parameter '{key}': {exc.strerror}") from None


class ModelManager:
    def __init__(
        self,
        settings: ServerSettings,
        backend_factory: BackendFactory | None = None,
        scheduler_factory: SchedulerFactory | None = None,
    ) -> None:
        self._settings = settings
        factory = backend_factory or _configured_backend_factory(
            settings.backend_config, auto_complete=not settings.strict_model_config
        )
        timeout = settings.python_execute_timeout_secs
        self._backend_factory: BackendFactory = (
            factory
            if timeout <= 0
            else lambda context: factory(dataclasses.replace(context, execute_timeout_s=timeout))
        )
        self._retiring: set[asyncio.Task[None]] = set()  # versions whose backend gave up
        self._stopping = False  # shutdown asked every model to unload
        self._scheduler_factory = scheduler_factory or default_scheduler_factory
        self._records: dict[str, ModelRecord] = {}
        # --model-namespacing: the record keys of each model name (rebuilt when records change)
        self._keys_by_name: dict[str, list[str]] | None = None
        self._locks: dict[str, asyncio.Lock] = {}
        self._poll_task: asyncio.Task[None] | None = None
        self._load_slots: asyncio.Semaphore | None = None  # created in the running loop
        # --load-model names found in no repository when the server started
        self.unknown_startup_models: list[str] = []
        self.server: ServerApi | None = None  # handed to backends (set by the service)
        # the server's response cache, shared by every model that enables it
        cache = settings.response_cache
        self.response_cache = ResponseCache(cache.size) if cache is not None else None
        # --rate-limit execution_count: every loaded instance's resources (None: off)
        self.rate_limiter: RateLimiter | None = (
            RateLimiter(settings.rate_limit_resources)
            if settings.rate_limit == "execution_count"
            else None
        )

    # --- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        mode = self._settings.model_control_mode
        directories = self._directories()
        names = list(directories)
        if mode == "explicit" and "*" not in self._settings.load_models:
            wanted = dict.fromkeys(self._settings.load_models)
            names = [key for name in wanted for key in self._keys_named(name)]
            # tritonserver polls each --load-model first: one in no repository is logged
            # and left out (the others load), and the start fails (--exit-on-error)
            self.unknown_startup_models = sorted(n for n in names if n not in directories)
            for name in self.unknown_startup_models:
                log.error("failed to poll model '%s': %s", public_name(name), MODEL_NOT_FOUND)
            names = [name for name in names if name in directories]
        await asyncio.gather(*(self._load_quietly(name) for name in names))
        if mode == "poll" and self._settings.repository_poll_secs > 0:
            self._poll_task = asyncio.create_task(self._poll_forever())

    def unload_all(self, deadline: float | None = None) -> asyncio.Future[None]:
        """:meth:`stop` as a task, every model unloading from now on (as Triton's
        UnloadAllModels marks them UNLOADING at once: see :meth:`live_model_states`)."""
        self._stopping = True
        return asyncio.ensure_future(self.stop(deadline))

    async def stop(self, deadline: float | None = None) -> None:
        """Unload every model (shutdown); ``deadline`` (time.monotonic()) bounds the wait for
        in-flight requests and finalize (see LoadedVersion.stop)."""
        self._stopping = True
        if self._poll_task is not None:
            self._poll_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poll_task
            self._poll_task = None
        await asyncio.gather(
            *(
                self._unload(name, dependents=False, deadline=deadline)
                for name in list(self._records)
            )
        )
        if self._retiring:
            await asyncio.gather(*list(self._retiring), return_exceptions=True)

    def live_model_states(self) -> dict[str, dict[int, str]]:
        """Triton's LiveModelStates (shutdown counts them): each model with a version READY,
        LOADING or UNLOADING, and those versions' states, in Triton's order; a model is named
        as Triton prints its identifier ("<repository>::<name>" with --model-namespacing).
        Once the shutdown asked every model to unload, a version still READY (its unload
        has not started yet) is UNLOADING, as Triton's UnloadAllModels marks each at once."""
        ready = UNLOADING if self._stopping else READY
        live: dict[str, dict[int, str]] = {}
        for key in sorted(self._records, key=_identifier_order):
            versions = {
                number: ready if status.state == READY else status.state
                for number, status in sorted(self._records[key].versions.items())
                if status.state in (READY, LOADING, UNLOADING)
            }
            if versions:
                live[_identifier_text(key)] = versions
        return live

    def background_models_size(self) -> int:
        """Triton's BackgroundModelsSize: versions still stopping off the record (a backend
        that gave up)."""
        return len(self._retiring)

    def failed_models(self) -> dict[str, str]:
        """Models (or versions) that failed to load, with their reasons (for --exit-on-error)."""
        failed: dict[str, str] = {}
        for record in self._records.values():
            name = public_name(record.name)
            if record.reason and not record.ready():
                failed[name] = record.reason
            for status in record.versions.values():
                if status.state == UNAVAILABLE and status.reason != UNLOADED_REASON:
                    failed[name] = f"version {status.version}: {status.reason}"
        return failed

    # --- version selection -----------------------------------------------------------------
    def get(self, name: str, version: str = "") -> LoadedVersion:
        """The version a request runs on, with Triton's errors (§0.2)."""
        record = self._records.get(name)
        if record is None and self._settings.model_namespacing:
            record = self._records.get(self._key_of(name))
        if record is None or (not record.known and not record.versions):
            raise not_found(f"Request for unknown model: '{name}' is not found")
        if not version:  # the highest READY version (one pass: this runs per request)
            best: LoadedVersion | None = None
            best_version = 0
            for candidate in record.versions.values():
                found = candidate.loaded
                if (
                    candidate.state == READY
                    and found is not None
                    and (best is None or candidate.version > best_version)
                ):
                    best, best_version = found, candidate.version
            if best is None:
                raise not_found(f"Request for unknown model: '{name}' has no available versions")
            return best
        number = int(parse_model_version(version))
        status = record.versions.get(number)
        if status is None:
            raise not_found(f"Request for unknown model: '{name}' version {number} is not found")
        if status.state != READY or status.loaded is None:
            raise unavailable(
                f"Request for unknown model: '{name}' version {number} is not at ready state"
            )
        return status.loaded

    def _key_of(self, name: str) -> str:
        """--model-namespacing: the record key of the one model of that name (``name`` when
        there is none); Triton's error when several repositories' models have it."""
        index = self._keys_by_name
        if index is None:
            index = {}
            for key in self._records:
                index.setdefault(public_name(key), []).append(key)
            self._keys_by_name = index
        keys = index.get(name, ())
        if len(keys) > 1:
            raise _ambiguous(name, len(keys))
        return keys[0] if keys else name

    def _record(self, key: str) -> ModelRecord:
        record = self._records.get(key)
        if record is None:
            record = self._records[key] = ModelRecord(key)
            self._keys_by_name = None
        return record

    def _forget(self, key: str) -> None:
        if self._records.pop(key, None) is not None:
            self._keys_by_name = None

    def _keys_named(self, name: str) -> list[str]:
        """The repository keys of a model name (--model-namespacing; else the name)."""
        directories = self._directories()
        if not self._settings.model_namespacing or name in directories:
            return [name]
        return [key for key in directories if public_name(key) == name] or [name]

    def _key_in(self, name: str, namespace: str) -> str:
        """The key a step ``name`` of an ensemble in repository ``namespace`` runs on: the
        model of that name in the same repository, else the one model of that name."""
        own = f"{name}{NAMESPACE_SEP}{namespace}"
        if own in self._records or own in self._directories():
            return own
        keys = self._keys_named(name)
        return keys[0] if len(keys) == 1 else name

    def _step_runner(self, directory: Path) -> StepRunner:
        """The step runner of an ensemble loaded from ``directory``: with --model-namespacing
        its steps run the models of its own repository when they are loaded, else the one
        loaded model of that name."""
        if not self._settings.model_namespacing:
            return self.run_step
        namespace = str(directory.parent)

        async def run(name: str, version: int, request: BackendRequest) -> ScheduledResult:
            own = f"{name}{NAMESPACE_SEP}{namespace}"
            return await self.run_step(own if own in self._records else name, version, request)

        return run

    async def run_step(self, name: str, version: int, request: BackendRequest) -> ScheduledResult:
        """An ensemble step on a composing model (``version`` -1 = the latest READY one):
        the composing model's own checks, scheduler and statistics."""
        loaded = self.get(name, "" if version < 0 else str(version))
        return await run_composing(loaded, request)

    def describe_step(self, name: str, version: int) -> StepModel | None:
        """A composing model as an ensemble hands it tensors (batching, input dims); None when
        it is not ready (the step then fails in ``run_step``)."""
        try:
            config = self.get(name, "" if version < 0 else str(version)).config
        except RepokitError:
            return None
        return StepModel(
            config.max_batch_size > 0,
            {i.name: tuple(i.dims) for i in config.input},
            config.model_transaction_policy.decoupled,
        )

    def ready_versions(self, name: str) -> list[LoadedVersion]:
        record = self._records.get(name)
        if record is None and self._settings.model_namespacing:
            with contextlib.suppress(RepokitError):  # an ambiguous name: none
                record = self._records.get(self._key_of(name))
        if record is None:
            return []
        return [s.loaded for s in sorted(record.ready(), key=lambda s: s.version) if s.loaded]

    def all_ready(self) -> list[LoadedVersion]:
        return [v for name in sorted(self._records) for v in self.ready_versions(name)]

    def server_ready(self, strict: bool) -> bool:
        if not strict:
            return True
        for record in self._records.values():
            if not record.versions:
                return False
            for status in record.versions.values():
                if status.state == READY and status.loaded is not None:
                    if not status.loaded.healthy():
                        return False
                elif not (status.state == UNAVAILABLE and status.reason == UNLOADED_REASON):
                    return False
        return True

    def index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = []
        for key in sorted(self._directories()):
            record = self._records.get(key)
            name = public_name(key)
            if record is None:
                if not ready_only:
                    entries.append({"name": name})
                continue
            if not record.versions:
                if not ready_only and record.reason:
                    entries.append({"name": name, "state": UNAVAILABLE, "reason": record.reason})
                continue
            for number in sorted(record.versions):
                status = record.versions[number]
                if ready_only and status.state != READY:
                    continue
                entry: dict[str, Any] = {"name": name, "version": str(number)}
                entry["state"] = status.state
                if status.reason:
                    entry["reason"] = status.reason
                elif status.state == READY and status.loaded is not None:
                    problem = status.loaded.problem()
                    if problem:  # an instance restarts: not ready until it is back
                        entry["state"], entry["reason"] = LOADING, problem
                entries.append(entry)
        return entries

    # --- load / unload API -----------------------------------------------------------------
    async def load(
        self, name: str, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        if self._settings.model_control_mode != "explicit":
            raise unavailable(NOT_EXPLICIT)
        check_model_name(name)
        override: mc.ModelConfig | None = None
        if files and config_json is None:
            raise _poll_failure(
                name, "Load parameter 'config' must be specified for model file override"
            )
        if config_json is not None:
            try:
                override = parse_json(config_json)
            except ConfigParseError as exc:
                raise _poll_failure(name, f"Invalid config override: {exc.message}") from exc
            problem = override_path_problem(override)
            if problem is not None:
                raise invalid_arg(f"load failed for model '{name}': {problem}")
        private: Path | None = None
        if files:
            check_file_keys(files)
            try:
                private = write_private_files(name, files)
            except RepokitError as exc:
                raise _poll_failure(name, exc.message) from exc
        keys = self._keys_named(name) if private is None else [name]
        for key in keys:  # with --model-namespacing: the model of that name in each repository
            await self._load(key, override=override, private=private, force=override is not None)

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        if self._settings.model_control_mode != "explicit":
            raise unavailable(NOT_EXPLICIT)
        check_model_name(name)
        keys = [name]
        if self._settings.model_namespacing and name not in self._records:
            keys = [k for k in list(self._records) if public_name(k) == name] or keys
        for key in keys:
            await self._unload(key, dependents=unload_dependents)

    # --- poll mode -------------------------------------------------------------------------
    async def poll_once(self) -> None:
        """Rescan the repositories: load new and changed models, unload removed ones."""
        directories = self._directories()
        for name, paths in directories.items():
            record = self._records.get(name)
            if record is None or record.private_dir is not None:
                if record is None:
                    await self._load_quietly(name)
                continue
            current = fingerprint(paths[0]) if len(paths) == 1 else DUPLICATE_REASON
            if current != record.fingerprint:
                await self._load_quietly(name, force=True)
        for name in list(self._records):
            record = self._records[name]
            if name not in directories and record.private_dir is None:
                await self._unload(name, dependents=False)
                self._forget(name)

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self._settings.repository_poll_secs)
            try:
                await self.poll_once()
            except Exception:  # keep polling whatever one scan hit
                log.exception("repository poll failed")

    # --- internals ---------------------------------------------------------------------------
    def _directories(self) -> dict[str, list[Path]]:
        found = model_directories(self._settings.repositories)
        if not self._settings.model_namespacing:
            return found
        return {f"{n}{NAMESPACE_SEP}{p.parent}": [p] for n, ps in found.items() for p in ps}

    def _lock(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    async def _load_quietly(self, name: str, force: bool = False) -> None:
        try:
            await self._load(name, force=force)
        except LoggedLoadError:
            pass  # its lines are in the log already, as Triton's
        except RepokitError as exc:
            log.error("failed to load '%s': %s", name, exc.message)

    def _resolve(
        self, name: str, override: mc.ModelConfig | None, private: Path | None
    ) -> tuple[ModelDefinition, str]:
        paths = self._directories().get(name, [])
        if len(paths) > 1:
            record = self._record(name)
            record.reason, record.fingerprint = DUPLICATE_REASON, DUPLICATE_REASON
            raise _poll_failure(name, DUPLICATE_REASON)
        if private is None and not paths:
            raise _poll_failure(public_name(name))
        directory = private if private is not None else paths[0]
        stamp = fingerprint(directory)
        try:
            definition = read_model(
                public_name(name),
                directory,
                override=override,
                config_name=self._settings.model_config_name,
                strict=self._settings.strict_model_config,
            )
        except ModelLoadError as exc:
            record = self._record(name)
            record.fingerprint, record.graph_error = stamp, ""
            refused = self._update_refused(record, directory, exc)
            if refused is not None:
                raise refused from exc
            status = version_stage_status(exc.rule)
            if status is not None and exc.config is not None and exc.versions:
                # Triton finds these when it creates the versions (their instances, inputs
                # and outputs, files): each version fails with the reason (the serving
                # ones, if any, serve on)
                reason = f"{status}: {exc.reason}"
                self._log_failed_load(
                    public_name(name),
                    dict.fromkeys(exc.versions, reason),
                    instance=exc.reason if exc.rule.startswith(WARMUP_RULES) else "",
                )
                if not record.ready():
                    record.reason, record.known = "", True
                    record.versions = {
                        v: VersionStatus(v, UNAVAILABLE, reason) for v in exc.versions
                    }
                raise _load_failed(public_name(name), dict.fromkeys(exc.versions, reason)) from exc
            if not record.ready():
                record.reason, record.known = exc.reason, exc.config_ok
                self._drop_versions(record)
            shown = public_name(name)
            if exc.config_ok:
                raise invalid_arg(f"load failed for model '{shown}': {exc.reason}\n") from exc
            raise _poll_failure(shown, exc.reason) from exc
        return definition, stamp

    def _update_refused(
        self, record: ModelRecord, directory: Path, exc: ModelLoadError
    ) -> RepokitError | None:
        """A new config whose instance groups are invalid, for serving versions it would
        update in place: Triton's update fails on them and they serve on as they are, READY
        with the reason in the index until a later load succeeds."""
        if not exc.rule.startswith("instance-group-") or exc.config is None:
            return None
        if record.private_dir is not None:
            return None
        stamps = version_stamps(directory, self._config_entry(directory))
        wanted = without_instances(exc.config)
        refused: list[VersionStatus] = []
        for number in exc.versions:
            status = record.versions.get(number)
            loaded = status.loaded if status is not None and status.state == READY else None
            if status is None or loaded is None or loaded.is_ensemble:
                continue
            if not stamps.get(number) or record.version_stamps.get(number) != stamps[number]:
                continue
            if without_instances(loaded.source_config or loaded.config) == wanted:
                refused.append(status)
        if not refused:
            return None
        reason = f"Invalid argument: {exc.reason}"
        for status in refused:
            status.reason = reason
        shown = public_name(record.name)
        for status in refused:  # an update: Triton logs no version failure for it
            log.info("loading: %s:%d", shown, status.version)
        log.info("failed to load '%s'", shown)
        text = "".join(f"version {s.version} is at READY state: {reason};" for s in refused)
        return LoggedLoadError(Code.INVALID_ARG, f"load failed for model '{shown}': {text}\n")

    def _log_failed_load(self, name: str, failures: dict[int, str], instance: str = "") -> None:
        """The lines Triton logs for a load whose versions all fail when it creates them:
        ``loading`` for each version, each failed attempt (it retries
        --model-load-retry-count times; ``instance``: the failure of the instance's warmup
        it logs first), then ``failed to load '<name>'``."""
        for number in failures:
            log.info("loading: %s:%d", name, number)
        for number, reason in failures.items():
            for _attempt in range(self._settings.model_load_retry_count + 1):
                if instance:
                    log_instance_failure(instance)
                log.error("failed to load '%s' version %d: %s", name, number, reason)
        log.info("failed to load '%s'", name)

    @staticmethod
    def _drop_versions(record: ModelRecord) -> None:
        record.versions = {v: s for v, s in record.versions.items() if s.loaded is not None}

    async def _load(
        self,
        name: str,
        *,
        override: mc.ModelConfig | None = None,
        private: Path | None = None,
        force: bool = False,
        chain: tuple[str, ...] = (),
        retry_failed: bool = True,
    ) -> None:
        """Load (or reload) one model; its failure is kept as Triton's load status reads, for
        the ensembles that use it."""
        try:
            await self._load_model(
                name,
                override=override,
                private=private,
                force=force,
                chain=chain,
                retry_failed=retry_failed,
            )
        except RepokitError as exc:
            record = self._records.get(name)
            if record is not None:
                record.load_error = load_status(public_name(name), exc.message)
            raise
        record = self._records.get(name)
        if record is not None and record.ready():
            record.load_error = ""

    async def _load_model(
        self,
        name: str,
        *,
        override: mc.ModelConfig | None,
        private: Path | None,
        force: bool,
        chain: tuple[str, ...],
        retry_failed: bool,
    ) -> None:
        if name in chain:
            raise invalid_arg(cycle(public_name(name), public_name(chain[-1])))
        try:
            definition, stamp = self._resolve(name, override, private)
        except BaseException:
            if private is not None:
                shutil.rmtree(private.parent, ignore_errors=True)
            raise
        steps = definition.config.ensemble_scheduling.step
        dependencies = tuple(dict.fromkeys(s.model_name for s in steps))
        if self._settings.model_namespacing and private is None:
            namespace = str(definition.directory.parent)
            dependencies = tuple(self._key_in(d, namespace) for d in dependencies)
        if not force and self._unchanged(name, stamp, private, retry_failed):
            if self._settings.model_namespacing and dependencies:  # Triton re-resolves them
                await self._load_dependencies(dependencies, (*chain, name))
            return
        problem = await self._check_dependencies(name, definition.config, dependencies, chain)
        if problem:
            if private is not None:
                shutil.rmtree(private.parent, ignore_errors=True)
            await self._refuse_ensemble(name, stamp, dependencies, problem)
        dependency_error = ""
        if definition.config.response_cache.enable:
            dependency_error = self._cache_refusal(name, dependencies)
        if dependencies and any(self._decoupled(d, ()) for d in dependencies):
            # Triton sets an ensemble with a decoupled model in its steps decoupled at load
            # (ensemble_utils.cc ValidateEnsembleConfig): it streams its responses
            definition.config.model_transaction_policy.decoupled = True
        async with self._lock(name):
            if not force and self._unchanged(name, stamp, private, retry_failed):
                return  # loaded meanwhile by a concurrent request (e.g. for an ensemble)
            await self._install(
                name,
                definition,
                stamp,
                private,
                dependencies,
                dependency_error,
                reusable=private is None,
            )

    def _unchanged(
        self, name: str, stamp: str, private: Path | None, retry_failed: bool = True
    ) -> bool:
        """Loaded from the same files already: a plain load is then a no-op (as Triton).
        With ``retry_failed`` False (ensemble dependencies) a failed attempt counts too."""
        record = self._records.get(name)
        return (
            record is not None
            and (bool(record.ready()) or (not retry_failed and record.known))
            and record.fingerprint == stamp
            and record.private_dir is None
            and private is None
        )

    def _cache_refusal(self, name: str, dependencies: tuple[str, ...]) -> str:
        """An ensemble with a decoupled model in its steps is decoupled itself (Triton sets its
        transaction policy at load), so it cannot use the response cache: Triton's reason."""
        if any(self._decoupled(dependency, ()) for dependency in dependencies):
            return (
                f"Invalid argument: Response Cache does not currently support model {name} "
                "with 'decoupled' transaction policy. Please disable the response cache."
            )
        return ""

    def _decoupled(self, name: str, seen: tuple[str, ...]) -> bool:
        for loaded in self.ready_versions(name):
            if loaded.decoupled:
                return True
            steps = loaded.config.ensemble_scheduling.step if loaded.is_ensemble else ()
            if any(
                step.model_name not in seen and self._decoupled(step.model_name, (*seen, name))
                for step in steps
            ):
                return True
        return False

    async def _check_dependencies(
        self,
        name: str,
        config: mc.ModelConfig,
        dependencies: tuple[str, ...],
        chain: tuple[str, ...],
    ) -> str:
        """Load an ensemble's step models; Triton's reason to refuse the ensemble, or ""."""
        if not dependencies:
            return ""
        steps, cycle_error = await self._load_dependencies(dependencies, (*chain, name))
        if cycle_error:  # the ensemble at the cycle's start is mid-load: no record to look at
            return cycle_error
        named = dict(
            zip(
                dict.fromkeys(s.model_name for s in config.ensemble_scheduling.step),
                steps,
                strict=True,
            )
        )
        return first_problem(public_name(name), config, named)

    async def _load_dependencies(
        self, dependencies: tuple[str, ...], chain: tuple[str, ...]
    ) -> tuple[list[StepModelState], str]:
        """Each step model (by key, in order) after trying to load it, and the cycle Triton
        reports when one leads back to the ensemble ("" when none)."""
        cycle_error = ""
        for dependency in dependencies:
            try:
                await self._load(dependency, chain=chain, retry_failed=False)
            except RepokitError as exc:
                if exc.message.startswith(CYCLE_PREFIX):  # it is this ensemble, mid-load
                    cycle_error = cycle_error or exc.message
            record = self._records.get(dependency)
            if record is not None and record.graph_error.startswith(CYCLE_PREFIX):
                cycle_error = cycle_error or record.graph_error  # Triton marks the whole chain
        return [self._step_state(d) for d in dependencies], cycle_error

    def _step_state(self, key: str) -> StepModelState:
        record = self._records.get(key)
        if record is None:
            return StepModelState(available=False)
        ready = self.ready_versions(key)
        return StepModelState(
            available=record.known or bool(record.graph_error),
            graph_error=record.graph_error,
            load_error=record.load_error,
            versions=tuple(v.version for v in ready),
            config=ready[-1].config if ready else None,
        )

    async def _refuse_ensemble(
        self, name: str, stamp: str, dependencies: tuple[str, ...], problem: str
    ) -> NoReturn:
        """Triton's dependency graph refused the ensemble: it unloads what serves of it (no
        version of it loads) and answers 400 with the reason, which it logs."""
        log.error("%s", f"Invalid argument: {problem}")
        record = self._records.get(name)
        if record is not None and record.ready():
            await self._unload(name, dependents=False)
        record = self._record(name)
        async with self._lock(name):
            record.graph_error, record.fingerprint = problem, stamp
            record.dependencies = dependencies
            if not record.versions:  # never loaded: the index shows why (README, Differences)
                record.reason, record.known = problem, False
        raise invalid_arg(f"load failed for model '{public_name(name)}': {problem}\n")

    def _new_version(self, definition: ModelDefinition, number: int) -> LoadedVersion:
        config = definition.config
        return LoadedVersion(
            name=definition.name,
            version=number,
            directory=definition.directory,
            config=config,
            config_json=config_to_json(config),
            io=ModelIO(config),
            stats=ModelStats(
                definition.name,
                number,
                summaries=LatencySummaries() if self._settings.metrics.summary_latencies else None,
            ),
            labels={},
            source_config=config,
        )

    async def _start_version(self, loaded: LoadedVersion, dependency_error: str) -> str:
        """Load one version; the failure reason, or "" when it is READY. Each failed attempt
        (--model-load-retry-count retries) is logged as Triton's CreateModel logs it."""
        if self._load_slots is None:  # --model-load-thread-count versions load at once
            self._load_slots = asyncio.Semaphore(self._settings.model_load_thread_count)
        async with self._load_slots:
            retries = 0 if dependency_error else self._settings.model_load_retry_count
            for _attempt in range(retries + 1):
                reason = await self._try_start(loaded, dependency_error)
                if not reason:
                    break
                log.error("failed to load '%s' version %d: %s", loaded.name, loaded.version, reason)
        if not reason and log.isEnabledFor(logging.DEBUG):  # --log-verbose 1, as Triton's
            log.debug("model configuration:\n%s", json.dumps(loaded.config_json, indent=4))
        return reason

    async def _try_start(self, loaded: LoadedVersion, dependency_error: str) -> str:
        if dependency_error:
            return dependency_error
        try:
            loaded.labels = read_labels(loaded.directory, loaded.config)
            if loaded.config.platform == "ensemble":
                self._inherit_step_labels(loaded)
            await loaded.start(
                self._backend_factory,
                self._scheduler_factory,
                self._step_runner(loaded.directory),
                self.server,
                cache=self.response_cache,
                rate_limiter=self.rate_limiter,
                describe_step=self.describe_step,
            )
        except RepokitError as exc:
            return triton_reason(exc)
        except Exception as exc:  # a backend bug must not take other models down
            log.exception("loading %s version %d failed", loaded.name, loaded.version)
            return f"Internal: {type(exc).__name__}: {exc}"
        return ""

    def _inherit_step_labels(self, loaded: LoadedVersion) -> None:
        """An ensemble output without a label_filename of its own classifies with the labels of
        the composing model's output it is mapped from, as Triton completes an ensemble's label
        provider when it loads (its steps are loaded by then)."""
        missing = {o.name for o in loaded.config.output if not loaded.labels.get(o.name)}
        namespace = str(loaded.directory.parent)
        for step in loaded.config.ensemble_scheduling.step:
            for key, value in step.output_map.items():
                if value not in missing:
                    continue
                name = step.model_name
                if self._settings.model_namespacing:
                    name = self._key_in(name, namespace)
                version = str(step.model_version) if step.model_version >= 0 else ""
                try:
                    composing = self.get(name, version)
                except RepokitError:
                    continue
                if composing.labels.get(key):
                    loaded.labels[value] = list(composing.labels[key])

    async def _install(
        self,
        name: str,
        definition: ModelDefinition,
        stamp: str,
        private: Path | None,
        dependencies: tuple[str, ...],
        dependency_error: str,
        *,
        reusable: bool = False,
    ) -> None:
        record = self._record(name)
        reloading = bool(record.ready())
        if not reloading:
            record.reason, record.known = "", True
            record.versions = {v: VersionStatus(v, LOADING) for v in definition.versions}
        stamps = version_stamps(definition.directory, self._config_entry(definition.directory))
        kept, updated = (
            self._kept_versions(record, definition, stamps) if reloading and reusable else ({}, {})
        )
        for number in definition.versions:  # Triton logs each version before any loads
            log.info("loading: %s:%d", definition.name, number)
        for loaded in kept.values():
            config = mc.ModelConfig()
            config.CopyFrom(loaded.config)
            config.ClearField("version_policy")  # its new one, as Triton updates it
            if definition.config.HasField("version_policy"):
                config.version_policy.CopyFrom(definition.config.version_policy)
            loaded.config, loaded.config_json = config, config_to_json(config)
            loaded.source_config = definition.config
        fresh = {
            v: self._new_version(definition, v)
            for v in definition.versions
            if v not in kept and v not in updated
        }
        reasons = await asyncio.gather(
            *(self._start_version(loaded, dependency_error) for loaded in fresh.values()),
            *(self._update_version(loaded, definition) for loaded in updated.values()),
        )
        failures = {v: r for v, r in zip(fresh, reasons, strict=False) if r}
        update_failures = {v: r for v, r in zip(updated, reasons[len(fresh) :], strict=True) if r}
        kept.update(updated)
        record.fingerprint = stamp
        for number, reason in update_failures.items():  # READY with the reason (Triton)
            record.versions[number].reason = reason
        if (failures or update_failures) and reloading:
            # a failed reload keeps the versions that serve now (an update that failed left
            # its version as it was)
            await asyncio.gather(*(fresh[v].stop() for v in fresh if v not in failures))
            if private is not None:
                shutil.rmtree(private.parent, ignore_errors=True)
            log.info("failed to load '%s'", definition.name)
            raise _load_failed(name, failures, update_failures)
        if failures:
            # Triton aborts a first load that any version failed: the versions that did load
            # are unloaded again (UNAVAILABLE, "unloaded"), and a later load tries them all
            await asyncio.gather(*(fresh[v].stop() for v in fresh if v not in failures))
        old = record.versions
        old_private = record.private_dir
        record.versions = {
            v: VersionStatus(v, UNAVAILABLE, failures[v])
            if v in failures
            else VersionStatus(v, UNAVAILABLE, UNLOADED_REASON)
            if failures
            else VersionStatus(v, READY, "", kept[v] if v in kept else fresh[v])
            for v in definition.versions
        }
        record.version_stamps = stamps
        record.known, record.reason, record.graph_error = True, "", ""
        for number, loaded in fresh.items():
            if not failures and loaded.backend is not None:
                loaded.backend.on_failed = functools.partial(
                    self._version_failed, name, number, loaded
                )
        record.private_dir = private
        record.dependencies = dependencies
        retired = [
            s.loaded for v, s in old.items() if s.loaded is not None and s.loaded is not kept.get(v)
        ]
        for number in old:
            if number not in record.versions:
                record.versions[number] = VersionStatus(number, UNLOADING)
        await asyncio.gather(*(_stop_version(loaded, None) for loaded in retired))
        for number in old:
            if record.versions[number].state == UNLOADING:
                record.versions[number] = VersionStatus(number, UNAVAILABLE, UNLOADED_REASON)
        if old_private is not None and old_private != private:
            shutil.rmtree(old_private.parent, ignore_errors=True)
        if failures:
            log.info("failed to load '%s'", definition.name)  # as Triton's OnLoadFinal
            raise _load_failed(name, failures)
        log.info(
            "successfully loaded '%s'", definition.name
        )  # once a load, as Triton's OnLoadFinal

    def _config_entry(self, directory: Path) -> str:
        """The model folder's entry that holds the config its load read."""
        custom = self._settings.model_config_name
        if custom and (directory / "configs" / f"{custom}.pbtxt").is_file():
            return "configs"
        return "config.pbtxt"

    def _kept_versions(
        self, record: ModelRecord, definition: ModelDefinition, stamps: dict[int, str]
    ) -> tuple[dict[int, LoadedVersion], dict[int, LoadedVersion]]:
        """The serving versions a reload keeps (not loaded again), as Triton 2.51: not an
        ensemble, the version's files and the model folder's other files unchanged since it
        loaded, and a config (as the repository gave it) that differs at most in
        ``version_policy`` (kept as they are) or also in ``instance_group`` (their instances
        updated in place: :mod:`repokit.core.instance_update`; a version whose backend or
        scheduler cannot, or whose instances have --rate-limit resources, loads again)."""
        if record.private_dir is not None:
            return {}, {}
        wanted = without_instances(definition.config)
        kept: dict[int, LoadedVersion] = {}
        updated: dict[int, LoadedVersion] = {}
        for number in definition.versions:
            status = record.versions.get(number)
            loaded = status.loaded if status is not None and status.state == READY else None
            if loaded is None or loaded.is_ensemble:
                continue
            if not stamps.get(number) or record.version_stamps.get(number) != stamps[number]:
                continue
            source = loaded.source_config or loaded.config
            if without_instances(source) != wanted:
                continue
            if list(source.instance_group) == list(definition.config.instance_group):
                kept[number] = loaded
            elif loaded.updates_instances(self.rate_limiter):
                updated[number] = loaded
        return kept, updated

    async def _update_version(self, loaded: LoadedVersion, definition: ModelDefinition) -> str:
        """Update a serving version's instances in place; the failure reason, or ""."""
        try:
            await loaded.update_instances(definition.config, self.rate_limiter)
        except RepokitError as exc:
            log.error(
                "failed to update '%s' version %d: %s", loaded.name, loaded.version, exc.message
            )
            return exc.message
        except Exception as exc:  # a backend bug must not take other models down
            log.exception("updating %s version %d failed", loaded.name, loaded.version)
            return f"{type(exc).__name__}: {exc}"
        loaded.source_config = definition.config
        return ""

    def _version_failed(self, name: str, number: int, loaded: LoadedVersion, reason: str) -> None:
        """A serving version's backend gave up (its instances keep dying): UNAVAILABLE with
        the reason, and unloaded."""
        record = self._records.get(name)
        status = record.versions.get(number) if record is not None else None
        if status is None or status.loaded is not loaded:
            return
        status.state, status.reason, status.loaded = UNAVAILABLE, reason, None
        task = asyncio.get_running_loop().create_task(loaded.stop())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _unload(self, name: str, *, dependents: bool, deadline: float | None = None) -> None:
        record = self._records.get(name)
        if record is None:
            return
        async with self._lock(name):
            active = [s for s in record.versions.values() if s.loaded is not None]
            for status in active:
                status.state = UNLOADING
            await asyncio.gather(
                *(_stop_version(s.loaded, deadline) for s in active if s.loaded is not None)
            )
            for status in record.versions.values():
                status.state, status.reason, status.loaded = UNAVAILABLE, UNLOADED_REASON, None
            if not record.versions:  # a model that never loaded: forget its failure
                self._forget(name)
            if record.private_dir is not None:
                shutil.rmtree(record.private_dir.parent, ignore_errors=True)
                record.private_dir = None
            dependencies = record.dependencies
        if dependents:
            for dependency in dependencies:
                await self._unload(dependency, dependents=True)

    def records(self) -> Iterator[ModelRecord]:
        return iter(list(self._records.values()))


async def _stop_version(loaded: LoadedVersion, deadline: float | None) -> None:
    await loaded.stop(deadline)
    log.info("successfully unloaded '%s' version %d", loaded.name, loaded.version)


def triton_reason(exc: RepokitError) -> str:
    """A version's load failure as Triton states it: its code's name, then the message
    (``Status::AsString()``); messages already written that way stay as they are."""
    prefix = CODE_TEXT[exc.code] + ": "
    return exc.message if exc.message.startswith(prefix) else prefix + exc.message


def load_status(name: str, message: str) -> str:
    """The status Triton keeps for a model's failed load: its load error without the
    ``load failed for model '<name>': `` frame."""
    return message.removeprefix(f"load failed for model '{name}': ").removesuffix("\n")


def _load_failed(
    name: str, failures: dict[int, str], update_failures: dict[int, str] | None = None
) -> RepokitError:
    """Triton's load error: each failed version with its state (an update that failed
    leaves its version READY)."""
    states = {v: ("UNAVAILABLE", r) for v, r in failures.items()}
    states.update({v: ("READY", r) for v, r in (update_failures or {}).items()})
    text = "".join(f"version {v} is at {s} state: {r};" for v, (s, r) in sorted(states.items()))
    return LoggedLoadError(Code.INVALID_ARG, f"load failed for model '{name}': {text}\n")
