"""Choose and start each model version's scheduler as its config says, and warm it up.

The ``scheduling_choice`` oneof of the config picks the scheduler (Triton §6.1):

* none -> :class:`~repokit.scheduler.default.DefaultScheduler` (each request alone on the next
  free instance);
* ``dynamic_batching`` -> :class:`~repokit.scheduler.dynamic_driver.DynamicBatchScheduler`;
* ``sequence_batching`` -> :class:`~repokit.scheduler.sequence_batch.SequenceBatchScheduler`
  (with ``iterative_sequence`` it becomes the backend's ``on_reschedule`` hook, through which
  python models reschedule requests);
* ``ensemble_scheduling`` -> :class:`~repokit.scheduler.ensemble.EnsembleScheduler`, whose steps
  call back into the core (:data:`StepRunner`) so the composing models run through their own
  schedulers and count their own statistics.

Batching schedulers hand the python backend the list of requests of a batch (as Triton's python
backend receives them); every other backend gets the batch merged into one request per input
(ragged inputs, ``batch_input`` and ``batch_output`` need that).

Instances run in parallel: each active instance has its own worker in the batchers (one free
instance per request in the default scheduler). The python backend runs one stub process per
instance; onnxruntime runs its sessions on a thread pool with one thread per instance
(``session.run`` releases the GIL). More instances scale a model whose own time dominates
almost linearly; for a model that costs microseconds the event loop's HTTP work is the limit
(figures in ``benchmarks/README.md``; ``tests/e2e/test_scheduling.py::
test_two_instances_run_in_parallel`` checks the parallelism itself).

Warmup (Triton §4.9): the ``model_warmup`` samples are built once per version and run on every
instance (all of them in parallel) after the backend loaded and before the scheduler starts, so
the version is never READY before warmup finished; a failing sample fails the load with
``failed to run warmup sample '<name>': <error>``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from repokit.backends.base import Backend, BackendRequest, instance_names
from repokit.backends.registry import backend_name
from repokit.core.statistics import ModelStats
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.scheduler.base import ScheduledResult, Scheduler
from repokit.scheduler.default import DefaultScheduler
from repokit.scheduler.dynamic_driver import DynamicBatchScheduler
from repokit.scheduler.ensemble import DescribeCallable, EnsembleScheduler
from repokit.scheduler.runtime import BACKLOG_DELAY_SCHEDULER_ENV, delay_scheduler_count
from repokit.scheduler.sequence_batch import SequenceBatchScheduler
from repokit.scheduler.warmup import build_warmup_samples, run_warmup

# (model name, version or -1 for the latest READY one, request) -> the composing model's
# scheduled result (its timing is added to the ensemble's statistics)
StepRunner = Callable[[str, int, BackendRequest], Awaitable[ScheduledResult]]

# backends that receive a batch as the list of its requests (Triton's python backend does)
LIST_BATCH_BACKENDS = frozenset({"python"})


def scheduler_kind(config: mc.ModelConfig) -> str:
    """``default``, ``dynamic``, ``sequence`` or ``ensemble``, from ``scheduling_choice``."""
    if config.platform == "ensemble" or config.HasField("ensemble_scheduling"):
        return "ensemble"
    choice = config.WhichOneof("scheduling_choice")
    if choice == "dynamic_batching":
        return "dynamic"
    if choice == "sequence_batching":
        return "sequence"
    return "default"


def config_scheduler_factory(backend: Backend, stats: ModelStats) -> Scheduler:
    """The scheduler a (non-ensemble) model's config asks for, feeding ``stats`` per batch."""
    config = backend.context.config
    merge = backend_name(config) not in LIST_BATCH_BACKENDS
    kind = scheduler_kind(config)
    if kind == "dynamic":
        return DynamicBatchScheduler(
            backend,
            config,
            merge_batches=merge,
            on_execution=stats.record_execution,
            hold_until_queued=delay_scheduler_count(),
        )
    if kind == "sequence":
        sequence = SequenceBatchScheduler(
            backend,
            config,
            merge_batches=merge,
            on_execution=stats.record_execution,
            hold_until_queued=delay_scheduler_count(),
            hold_until_backlog=delay_scheduler_count(BACKLOG_DELAY_SCHEDULER_ENV),
        )
        if config.sequence_batching.iterative_sequence:
            backend.on_reschedule = sequence.reschedule
        return sequence
    return DefaultScheduler(backend, stats.record_execution)


def ensemble_scheduler(
    config: mc.ModelConfig, run_step: StepRunner, describe: DescribeCallable | None = None
) -> Scheduler:
    return EnsembleScheduler(config, run_step, describe)


async def warm_up(backend: Backend) -> None:
    """Run the config's warmup samples on every instance; RepokitError fails the load."""
    context = backend.context
    samples = build_warmup_samples(context.config, context.model_dir)
    if not samples:
        return
    names = instance_names(context)
    await asyncio.gather(
        *(
            run_warmup(
                backend,
                instance,
                samples,
                context.name,
                names[instance] if instance < len(names) else str(instance),
            )
            for instance in range(backend.instance_count)
        )
    )


async def warm_up_instances(backend: Backend, instances: list[int], names: list[str]) -> None:
    """Run the config's warmup samples on instances an update added (as a load does)."""
    context = backend.context
    samples = build_warmup_samples(context.config, context.model_dir)
    if not samples or not instances:
        return
    await asyncio.gather(
        *(
            run_warmup(backend, instance, samples, context.name, name)
            for instance, name in zip(instances, names, strict=True)
        )
    )
