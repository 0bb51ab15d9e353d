"""What forwarding a decoded request costs the scheduling process in the `--workers` design
(README, "Serving on every core"): a frontend process sends add_sub's decoded request (two
FP32[1,16] tensors, model, version, id, parameters) to the scheduling process over a Unix
socketpair with repokit's framing (``repokit.backends.python.channel.Channel``, pickle 5,
tensors packed as the python backend packs them) and gets two tensors back; the scheduling
side does nothing else. Run by hand, not a test:

    .venv/bin/python benchmarks/workers_channel.py [--requests 20000] [--concurrency 8]

Prints the CPU each side used per request (time.process_time in each process), to compare
with the server loop's CPU per request today (benchmarks/workers_vs_triton.py, "main").
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import time
from typing import Any

import numpy as np
import uvloop

from repokit.backends.python.channel import Channel
from repokit.backends.python.ipc import pack_array, unpack_array

DTYPES: dict[str, np.dtype[Any]] = {}


def _scheduling_side(sock: socket.socket, out: Any) -> None:
    async def main() -> None:
        done = asyncio.Event()
        channel: Channel | None = None

        def on_message(message: Any) -> None:
            if message[0] == "@stop":
                done.set()
                return
            _, call_id, _model, _version, inputs, _parameters = message
            a = unpack_array(inputs[0][1], DTYPES)
            b = unpack_array(inputs[1][1], DTYPES)
            assert channel is not None
            channel.send(
                ("@reply", call_id, [("OUTPUT0", pack_array(a)), ("OUTPUT1", pack_array(b))])
            )

        channel = Channel(sock, done.set, on_message)
        start = time.process_time()
        await done.wait()
        out.put(time.process_time() - start)
        channel.close()

    uvloop.run(main())


async def _frontend_side(sock: socket.socket, requests: int, concurrency: int) -> float:
    loop = asyncio.get_running_loop()
    waiting: dict[int, asyncio.Future[Any]] = {}

    def on_message(message: Any) -> None:
        waiting.pop(message[1]).set_result(message[2])

    channel = Channel(sock, lambda: None, on_message)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    counter = iter(range(requests))

    async def client() -> None:
        for call_id in counter:
            future: asyncio.Future[Any] = loop.create_future()
            waiting[call_id] = future
            inputs = [("INPUT0", pack_array(a)), ("INPUT1", pack_array(a))]
            channel.send(("@call", call_id, "add_sub", "", inputs, {}))
            outputs = await future
            assert len(outputs) == 2

    start = time.process_time()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    used = time.process_time() - start
    channel.send(("@stop",))
    await asyncio.sleep(0.1)
    channel.close()
    return used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    ours, theirs = socket.socketpair()
    out: Any = multiprocessing.get_context("fork").Queue()
    child = multiprocessing.get_context("fork").Process(target=_scheduling_side, args=(theirs, out))
    child.start()
    theirs.close()
    wall = time.monotonic()
    frontend_cpu = uvloop.run(_frontend_side(ours, args.requests, args.concurrency))
    wall = time.monotonic() - wall
    scheduling_cpu = out.get(timeout=60)
    child.join(timeout=10)
    n = args.requests
    print(f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}; {n} requests at "
          f"concurrency {args.concurrency} in {wall:.2f} s ({n / wall:,.0f}/s)")  # fmt: skip
    print(f"scheduling process: {scheduling_cpu / n * 1e6:.1f} us CPU per request")
    print(f"frontend process:   {frontend_cpu / n * 1e6:.1f} us CPU per request")


if __name__ == "__main__":
    main()
