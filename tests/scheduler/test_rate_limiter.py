"""The rate limiter's rules without a server: flags, resource counts, devices, turns."""

from __future__ import annotations

import asyncio
import logging

import pytest
from google.protobuf import text_format

from repokit.errors import Code, RepokitError
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.scheduler.rate_limiter import (
    GLOBAL,
    PER_DEVICE,
    InstanceNeeds,
    InstanceSlot,
    RateLimiter,
    ResourceLimit,
    instance_needs,
    parse_rate_limit,
    parse_resource_flag,
    parse_resource_flags,
)


def needs(*items: tuple[int, str, int], priority: int = 0) -> InstanceNeeds:
    return InstanceNeeds(tuple(((pool, name), count) for pool, name, count in items), priority)


def config(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


# --- flags ---------------------------------------------------------------------------------
def test_flag_forms() -> None:
    assert parse_resource_flag("R1:4") == ResourceLimit("R1", 4, PER_DEVICE)
    assert parse_resource_flag("R1:4:1") == ResourceLimit("R1", 4, 1)
    assert parse_resource_flag("R1:4:-1") == ResourceLimit("R1", 4, PER_DEVICE)
    assert parse_rate_limit("execution_count") == "execution_count"
    # a name given twice for one device keeps the first, as tritonserver does
    assert parse_resource_flags(["R:2", "R:5", "R:3:0"]) == (
        ResourceLimit("R", 2),
        ResourceLimit("R", 3, 0),
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("R1", "--rate-limit-resource option format is '<resource_name>:<count>:<device>' or"),
        ("R1:2:0:1", "--rate-limit-resource option format is .* Got R1:2:0:1"),
        ("R1:x", "--rate-limit-resource: invalid count 'x' in 'R1:x'"),
        ("R1:2:gpu", "--rate-limit-resource: invalid device 'gpu'"),
        ("R1:-1", "--rate-limit-resource: the count must not be negative"),
        ("R1:1:-2", "--rate-limit-resource: the device must be -1"),
        (":2", "--rate-limit-resource: the resource name is empty"),
    ],
)
def test_bad_flags_name_the_flag(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message):
        parse_resource_flag(spec)


def test_bad_mode() -> None:
    with pytest.raises(ValueError, match="invalid argument for --rate-limit: 'bogus'"):
        parse_rate_limit("bogus")


# --- needs from the config -----------------------------------------------------------------
def test_needs_per_instance_and_device() -> None:
    cfg = config(
        'instance_group [ { kind: KIND_CPU count: 2 rate_limiter { resources [ { name: "R" '
        'count: 2 }, { name: "G" global: true count: 1 }, { name: "R" count: 3 } ] '
        "priority: 4 } }, { kind: KIND_CPU count: 1 } ]"
    )
    laid_out = instance_needs(cfg, 3)
    assert laid_out[0] == laid_out[1] == needs((0, "R", 3), (GLOBAL, "G", 1), priority=4)
    assert laid_out[2] is None  # no rate_limiter: not limited
    gpu = config(
        'instance_group [ { kind: KIND_GPU gpus: [0, 1] rate_limiter { resources [ { name: "R" '
        "count: 1 } ] } } ]"
    )
    assert [n.needs if n else None for n in instance_needs(gpu, 2)] == [
        (((0, "R"), 1),),
        (((1, "R"), 1),),
    ]


# --- counts --------------------------------------------------------------------------------
def test_counts_default_to_the_largest_need() -> None:
    # the docs' example: A [R1: 4, R2: 4], B [R2: 5, R3: 10, R4: 5], C [R1: 1, R3: 7, R4: 2]
    limiter = RateLimiter()
    limiter.register([needs((0, "R1", 4), (0, "R2", 4))])
    limiter.register([needs((0, "R2", 5), (0, "R3", 10), (0, "R4", 5))])
    c = limiter.register([needs((0, "R1", 1), (0, "R3", 7), (0, "R4", 2))])
    assert limiter.limits == {(0, "R1"): 4, (0, "R2"): 5, (0, "R3"): 10, (0, "R4"): 5}
    limiter.unregister(c)
    assert limiter.limits[(0, "R1")] == 4


def test_verbose_log_shows_the_counts_each_time_they_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Triton's --log-verbose 1 "Max Resource Map" (qa/L0_model_update greps its lines)
    limiter = RateLimiter()
    with caplog.at_level(logging.DEBUG, logger="repokit.scheduler.rate_limiter"):
        four = limiter.register([needs((0, "R1", 4), (GLOBAL, "G", 2))])
        limiter.register([needs((0, "R1", 3))])
        limiter.unregister(four)
    maps = [r.getMessage() for r in caplog.records if "Max Resource Map" in r.getMessage()]
    assert maps == [
        "\nMax Resource Map===>\n\tDevice: GLOBAL\n\t\tResource: G\t Count: 2\n"
        "\tDevice: 0\n\t\tResource: R1\t Count: 4\n",
        "\nMax Resource Map===>\n\tDevice: GLOBAL\n\t\tResource: G\t Count: 2\n"
        "\tDevice: 0\n\t\tResource: R1\t Count: 4\n",
        "\nMax Resource Map===>\n\tDevice: 0\n\t\tResource: R1\t Count: 3\n",
    ]


def test_explicit_counts_per_device_and_global() -> None:
    # the docs' example on two devices; R3 is global in a loaded model
    flags = parse_resource_flags(["R1:10", "R2:5:0", "R2:8:1", "R3:2"])
    limiter = RateLimiter(flags)
    limiter.register([needs((0, "R1", 1), (0, "R2", 1)), needs((1, "R1", 1), (1, "R2", 1))])
    limiter.register([needs((GLOBAL, "R3", 1))])
    assert limiter.limits == {
        (0, "R1"): 10,
        (1, "R1"): 10,
        (0, "R2"): 5,
        (1, "R2"): 8,
        (GLOBAL, "R3"): 2,
    }


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["R1:1"], 'Resource count for "R1" is limited to 1 which will prevent'),
        (["R1:10:1"], 'Resource count for "R1" is limited to 0 which'),  # device 1 only
        (["Z:3"], 'Resource count for "R1" is limited to 0 which'),  # R1 named by no flag
    ],
)
def test_a_count_that_cannot_serve_an_instance_fails_its_load(
    flags: list[str], message: str
) -> None:
    limiter = RateLimiter(parse_resource_flags(flags))
    with pytest.raises(RepokitError) as caught:
        limiter.register([needs((0, "R1", 2))])
    assert caught.value.code == Code.INVALID_ARG
    assert caught.value.message.startswith(message)
    assert caught.value.message.endswith(
        "prevent scheduling of one or more model instances, the minimum required count is 2"
    )
    assert limiter.limits == {}  # the failed version does not count


def test_global_and_per_device_names_conflict() -> None:
    limiter = RateLimiter()
    limiter.register([needs((GLOBAL, "R", 1))])
    with pytest.raises(RepokitError, match='Resource "R" is present as both global and device'):
        limiter.register([needs((0, "R", 1))])


# --- turns ---------------------------------------------------------------------------------
def _grants(limiter: RateLimiter, *slots: InstanceSlot) -> list[int]:
    order: list[int] = []
    for index, slot in enumerate(slots):
        slot.request(lambda index=index: order.append(index))
    return order


def test_a_slot_waits_while_the_resource_is_taken() -> None:
    limiter = RateLimiter()
    model = limiter.register([needs((0, "R", 1)), needs((0, "R", 1))])
    first, second = model.slot(0), model.slot(1)
    assert first is not None and second is not None
    order = _grants(limiter, first, second)
    assert order == [0] and first.holding and second.waiting
    first.release()  # no loop running: the next turn is given at once
    assert order == [0, 1] and second.holding and not first.holding
    second.release()
    assert limiter.limits == {(0, "R"): 1}


def test_global_resource_is_shared_across_devices_and_per_device_is_not() -> None:
    limiter = RateLimiter()
    per_device = limiter.register([needs((0, "D", 1)), needs((1, "D", 1))])
    shared = limiter.register([needs((GLOBAL, "G", 1)), needs((GLOBAL, "G", 1))])
    d0, d1, g0, g1 = (per_device.slot(0), per_device.slot(1), shared.slot(0), shared.slot(1))
    assert d0 and d1 and g0 and g1
    assert _grants(limiter, d0, d1) == [0, 1]  # one D on each device
    assert _grants(limiter, g0, g1) == [0]  # one G for both devices
    g0.release()
    assert g1.holding


def test_turns_go_by_executions_times_priority() -> None:
    limiter = RateLimiter(parse_resource_flags(["R:1"]))
    model = limiter.register(
        [needs((0, "R", 1)), needs((0, "R", 1), priority=1), needs((0, "R", 1), priority=2)]
    )
    holder, high, low = model.slot(0), model.slot(1), model.slot(2)
    assert holder and high and low
    ran: list[str] = []

    def wait(slot: InstanceSlot, name: str) -> None:
        slot.request(lambda: ran.append(name))

    async def scenario() -> None:
        holder.request(lambda: None)
        wait(low, "b")
        wait(high, "a")  # queued later, but (0 + 1) x 1 < (0 + 1) x 2
        for _ in range(9):
            current = holder if holder.holding else high if high.holding else low
            current.release()  # the next turn is given on the loop's next round ...
            if current is not holder:  # ... after the instance queued again for more work
                wait(current, "a" if current is high else "b")
            await asyncio.sleep(0)

    asyncio.run(scenario())
    # priority 1 gets twice the turns of priority 2 (lower executions x priority first)
    assert "".join(ran) == "aabaabaab"


def test_the_first_waiting_instance_is_not_overtaken() -> None:
    limiter = RateLimiter(parse_resource_flags(["R:2"]))
    model = limiter.register([needs((0, "R", 1)), needs((0, "R", 2)), needs((0, "R", 1))])
    small, big, late = model.slot(0), model.slot(1), model.slot(2)
    assert small and big and late
    assert _grants(limiter, small, big, late) == [0]  # late fits, but big waits before it
    small.release()
    assert big.holding and late.waiting
    big.release()
    assert late.holding


def test_withdrawn_and_cancelled_waits_leave_nothing_held() -> None:
    limiter = RateLimiter()
    model = limiter.register([needs((0, "R", 1)), needs((0, "R", 1)), needs((0, "R", 1))])
    first, second, third = model.slot(0), model.slot(1), model.slot(2)
    assert first and second and third

    async def scenario() -> None:
        await first.acquire()
        waiter = asyncio.ensure_future(second.acquire())
        await asyncio.sleep(0)
        assert second.waiting
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert not second.waiting and not second.holding
        third_turn = asyncio.ensure_future(third.acquire())
        await asyncio.sleep(0)
        first.release()
        await asyncio.wait_for(third_turn, 5)
        assert third.holding
        third.release()

    asyncio.run(scenario())


def test_unregistering_a_version_frees_what_its_instances_held() -> None:
    limiter = RateLimiter()
    gone = limiter.register([needs((0, "R", 1))])
    stays = limiter.register([needs((0, "R", 1))])
    holder, other = gone.slot(0), stays.slot(0)
    assert holder and other
    assert _grants(limiter, holder, other) == [0]
    limiter.unregister(gone)
    assert other.holding
