"""One loaded model version: config, backend, scheduler, statistics, labels, in-flight count."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from repokit.backends.base import Backend, ModelContext
from repokit.backends.instance_log import log_instance_failure
from repokit.backends.server_api import ServerApi
from repokit.config.normalize import normalize_instance_groups, normalize_model_config
from repokit.config.parse import ConfigParseError, parse_json
from repokit.core.config_json import config_to_json
from repokit.core.instance_update import (
    InstanceSpec,
    instance_specs,
    log_created,
    log_reused,
    plan_update,
    with_groups_of,
)
from repokit.core.model_source import io_problem
from repokit.core.request_checks import ModelIO
from repokit.core.response_cache import ModelCache, ResponseCache
from repokit.core.scheduling import (
    StepRunner,
    config_scheduler_factory,
    ensemble_scheduler,
    warm_up,
    warm_up_instances,
)
from repokit.core.statistics import ModelStats
from repokit.core.wire_lane import WireLane, wire_lane_for
from repokit.errors import RepokitError, internal, invalid_arg
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.scheduler.base import Scheduler
from repokit.scheduler.ensemble import DescribeCallable
from repokit.scheduler.rate_limiter import ModelSlots, RateLimiter, instance_needs

log = logging.getLogger(__name__)

BackendFactory = Callable[[ModelContext], Backend]
SchedulerFactory = Callable[[Backend, ModelStats], Scheduler]


def default_scheduler_factory(backend: Backend, stats: ModelStats) -> Scheduler:
    """The scheduler the model's config asks for (default, dynamic or sequence batcher)."""
    return config_scheduler_factory(backend, stats)


def read_labels(model_dir: Path, config: mc.ModelConfig) -> dict[str, list[str]]:
    """Label files by output name, one label per line, relative to the model directory."""
    labels: dict[str, list[str]] = {}
    for output in config.output:
        if not output.label_filename:
            continue
        path = model_dir / output.label_filename
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise internal(
                f"failed to open text file for read {path}: {exc.strerror or exc}"
            ) from exc
        labels[output.name] = text.split("\n")
        if labels[output.name] and labels[output.name][-1] == "":
            labels[output.name].pop()
    return labels


@dataclass(eq=False)
class LoadedVersion:
    name: str
    version: int
    directory: Path
    config: mc.ModelConfig
    config_json: dict[str, object]
    io: ModelIO
    stats: ModelStats
    labels: dict[str, list[str]]
    backend: Backend | None = None  # None for ensembles
    scheduler: Scheduler | None = None
    inflight: int = 0
    _idle: asyncio.Event | None = field(default=None, repr=False)
    version_text: str = field(init=False, repr=False)  # str(version), for every response
    # facts of the config every request asks for, read once (protobuf fields cost a lookup
    # each time): the config's platform is "ensemble", its transaction policy is decoupled
    is_ensemble: bool = field(init=False, repr=False)
    decoupled: bool = field(init=False, repr=False)
    # plain requests as wire bytes to the instance process (set once started, when eligible)
    wire_lane: WireLane | None = field(default=None, init=False, repr=False)
    # the server's response cache, when it has one and the config enables it (set once started)
    response_cache: ModelCache | None = field(default=None, init=False, repr=False)
    # --rate-limit: the instances' places at the rate limiter (None: not limited)
    _rate: tuple[RateLimiter, ModelSlots] | None = field(default=None, init=False, repr=False)
    # the config the repository gave this version (before the model completed it): what a
    # later load compares with (repokit.core.instance_update)
    source_config: mc.ModelConfig | None = field(default=None, repr=False)
    # the serving instances (backend id, spec) in config order; empty: cannot be updated
    instance_layout: list[tuple[int, InstanceSpec]] = field(
        default_factory=list, init=False, repr=False
    )
    # removed instances that still finish their sequences before they are finalized
    _lingering: set[asyncio.Task[None]] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        self.version_text = str(self.version)
        self._read_facts()

    def _read_facts(self) -> None:
        """The config's facts kept as attributes (again whenever the config changes)."""
        self.is_ensemble = self.config.platform == "ensemble"
        self.decoupled = self.config.model_transaction_policy.decoupled

    def healthy(self) -> bool:
        return self.backend.health() if self.backend is not None else True

    def problem(self) -> str:
        """Why the version does not serve normally right now ("" when it does)."""
        return self.backend.problem() if self.backend is not None else ""

    def shutdown_inflight(self) -> int:
        """What a shutdown waits for, as Triton's InflightStatus counts it: a sequence batcher's
        open sequences (a sequence holds the server until it ends or idles out), else the
        requests in flight."""
        scheduler = self.scheduler
        sequences = scheduler.open_sequences if scheduler is not None else None
        return self.inflight if sequences is None else max(sequences, self.inflight)

    def begin(self) -> None:
        self.inflight += 1
        if self._idle is not None:
            self._idle.clear()

    def end(self) -> None:
        self.inflight -= 1
        if self.inflight == 0 and self._idle is not None:
            self._idle.set()

    async def drain(self) -> None:
        """Wait until no request of this version is in flight."""
        if self.inflight == 0:
            return
        if self._idle is None:
            self._idle = asyncio.Event()
        await self._idle.wait()

    async def start(
        self,
        backend_factory: BackendFactory,
        scheduler_factory: SchedulerFactory,
        run_step: StepRunner | None = None,
        server: ServerApi | None = None,
        auto_complete: bool = True,
        cache: ResponseCache | None = None,
        rate_limiter: RateLimiter | None = None,
        describe_step: DescribeCallable | None = None,
    ) -> None:
        """Load the backend, warm every instance up, start the scheduler. Ensembles get an
        ensemble scheduler whose steps go through ``run_step`` (the core's composing-model
        entry point). With the server's ``cache`` and ``response_cache { enable: true }`` the
        version's requests are looked up in it (:mod:`repokit.core.dispatch`)."""
        began = time.perf_counter()
        if self.is_ensemble:
            if run_step is None:
                raise internal(f"ensemble '{self.name}' needs a step runner to be scheduled")
            ensemble = ensemble_scheduler(self.config, run_step, describe_step)
            await ensemble.start()
            self.scheduler = ensemble
            self._use_cache(cache)
        else:
            context = ModelContext(
                name=self.name,
                version=self.version,
                model_dir=self.directory,
                version_dir=self.directory / str(self.version),
                repository=self.directory.parent,
                config=self.config,
                config_json=json.dumps(self.config_json),
                server=server,
            )
            backend = backend_factory(context)
            if auto_complete:
                backend.on_config_completed = self._adopt_completed_config
            await backend.load()
            self.backend = backend
            try:
                self._check_io()  # a model without auto_complete_config left its config as is
                if rate_limiter is not None:  # after load: the model may complete its groups
                    self._limit(rate_limiter, backend)
                try:
                    await warm_up(backend)
                except RepokitError as exc:
                    log_instance_failure(exc.message)
                    raise
                scheduler = scheduler_factory(backend, self.stats)
                await scheduler.start()
            except BaseException:
                self.backend = None
                await backend.unload()
                self._unlimit()
                raise
            self.scheduler = scheduler
            specs = instance_specs(self.config)
            if len(specs) == backend.instance_count:
                self.instance_layout = list(enumerate(specs))
                log_created(specs)
            self._use_cache(cache)
            self.wire_lane = wire_lane_for(  # declines a version with the cache
                self.name,
                self.version_text,
                self.io,
                scheduler,
                self.decoupled,
                cached=self.response_cache is not None,
            )
        self.stats.load_duration_secs = time.perf_counter() - began

    def updates_instances(self, rate_limiter: RateLimiter | None) -> bool:
        """Whether this version's instances can be updated in place (a backend and scheduler
        that add and remove instances, and no --rate-limit resources on them)."""
        backend, scheduler = self.backend, self.scheduler
        return (
            backend is not None
            and scheduler is not None
            and backend.updates_instances
            and scheduler.updates_instances
            and bool(self.instance_layout)
            and self._rate is None
            and (rate_limiter is None or not _rate_limited(self.config))
        )

    async def update_instances(
        self, source: mc.ModelConfig, rate_limiter: RateLimiter | None = None
    ) -> None:
        """Serve ``source``'s instance groups (and version policy) without loading again
        (:mod:`repokit.core.instance_update`): new instances are created and warmed up while
        the others serve; removed ones get no new work, finish theirs and are finalized.
        RepokitError when a new instance fails: nothing changed then."""
        backend, scheduler = self.backend, self.scheduler
        if backend is None or scheduler is None:
            raise internal(f"model '{self.name}' version {self.version} is not loaded")
        config = with_groups_of(self.config, source)
        if rate_limiter is not None and _rate_limited(config):
            raise internal("instances with --rate-limit resources cannot be updated in place")
        plan = plan_update(self.instance_layout, instance_specs(config))
        old_context = backend.context
        backend.context = dataclasses.replace(
            old_context, config=config, config_json=json.dumps(config_to_json(config))
        )
        created = plan.created
        log_reused([spec for slot, spec in plan.layout if slot is not None])
        try:
            added = await backend.add_instances([spec.name for spec in created]) if created else []
            try:
                await warm_up_instances(backend, added, [spec.name for spec in created])
            except BaseException:
                await backend.remove_instances(added)
                raise
        except BaseException:
            backend.context = old_context
            raise
        log_created(created)
        # as Triton's instance list: the instances kept (in the new config's order), then
        # the new ones (the last of a signature is the one a later update keeps)
        kept = [(slot, spec) for slot, spec in plan.layout if slot is not None]
        self.instance_layout = kept + list(zip(added, created, strict=True))
        self.config = config
        self.config_json = config_to_json(config)
        scheduler.add_instances(
            [slot for slot, spec in zip(added, created, strict=True) if not spec.passive]
        )
        retiring = scheduler.retire_instances(
            [slot for slot, spec in plan.removed if not spec.passive]
        )
        now = [slot for slot, spec in plan.removed if spec.passive]
        for retired in retiring:
            if retired.lingers:
                task = asyncio.get_running_loop().create_task(
                    self._remove_later(retired.instance, retired.done)
                )
                self._lingering.add(task)
                task.add_done_callback(self._lingering.discard)
            else:
                await retired.done
                now.append(retired.instance)
        if now:
            await backend.remove_instances(now)

    async def _remove_later(self, instance: int, done: asyncio.Future[None]) -> None:
        """A removed instance that holds sequences: finalized once they ended."""
        await done
        backend = self.backend
        if backend is not None:
            await backend.remove_instances([instance])

    def _use_cache(self, cache: ResponseCache | None) -> None:
        if cache is not None and self.config.response_cache.enable:
            self.response_cache = ModelCache(cache, self.name, self.version)
            self.stats.cache_enabled = True

    def _limit(self, limiter: RateLimiter, backend: Backend) -> None:
        """Register the instances' resources (a count the server cannot give fails the load
        with Triton's message) and hand the backend its slots."""
        needs = instance_needs(self.config, backend.instance_count)
        if not any(needs):
            return
        try:
            slots = limiter.register(needs)
        except RepokitError as exc:  # Triton's load error carries its status text
            raise invalid_arg(f"Invalid argument: {exc.message}") from None
        self._rate = (limiter, slots)
        backend.rate_slots = slots

    def _unlimit(self) -> None:
        rate, self._rate = self._rate, None
        if rate is not None:
            rate[0].unregister(rate[1])

    def _adopt_completed_config(self, completed_json: str) -> ModelContext:
        """Make the config a model completed (python ``auto_complete_config``) this version's
        config: normalised and checked as a config file would be; /config shows it and the
        request checks use it."""
        try:
            config = parse_json(completed_json)
        except ConfigParseError as exc:
            raise internal(f"auto-complete-config produced an invalid config: {exc}") from exc
        if config.name != self.name or config.backend != self.config.backend:
            raise internal(
                f"auto-complete-config of model '{self.name}' may not change its name or backend"
            )
        if config.max_batch_size < 0:
            raise internal(f"'max_batch_size' must be non-negative value for {self.name}")
        normalize_model_config(config)
        normalize_instance_groups(config)
        self.config = config
        self._read_facts()
        self._check_io()
        self.config_json = config_to_json(config)
        self.io = ModelIO(config)
        return ModelContext(
            name=self.name,
            version=self.version,
            model_dir=self.directory,
            version_dir=self.directory / str(self.version),
            repository=self.directory.parent,
            config=config,
            config_json=json.dumps(self.config_json),
        )

    def _check_io(self) -> None:
        """Inputs and outputs are checked once the backend completed the config (as Triton)."""
        problem = io_problem(self.name, self.directory, self.config)
        if problem:
            raise invalid_arg(problem)

    async def stop(self, deadline: float | None = None) -> None:
        """Drain in-flight requests, stop the scheduler, unload the backend. With a
        ``deadline`` (time.monotonic(), shutdown) the drain and the backend's finalize end
        then: requests still running (a hung model) fail when its instances are stopped."""
        for task in list(self._lingering):  # the unload finalizes those instances
            task.cancel()
        drained = True
        if deadline is None:
            await self.drain()
        else:
            try:
                await asyncio.wait_for(self.drain(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                drained = False
            if self.backend is not None:
                self.backend.unload_deadline = deadline
        if drained:
            await self._stop_scheduler()
            await self._unload_backend()
        else:  # the scheduler's workers wait for executions that end when the backend stops
            await asyncio.gather(self._stop_scheduler(), self._unload_backend())

    async def _stop_scheduler(self) -> None:
        if self.scheduler is not None:
            await self.scheduler.stop()

    async def _unload_backend(self) -> None:
        if self.backend is not None:
            try:
                await self.backend.unload()
            except RepokitError:
                pass  # the version is gone either way; finalize errors are the model's own
            finally:
                self.backend = None
                self._unlimit()


def _rate_limited(config: mc.ModelConfig) -> bool:
    """Whether an instance group names --rate-limit resources."""
    groups = config.instance_group
    return any(g.HasField("rate_limiter") and g.rate_limiter.resources for g in groups)
