"""Real Triton 2.51 as a test fixture (and for the benchmarks): start it on a repository with
free ports, wait until it is live (or until models are ready), load models through the
repository API, read its verdicts, stop it with the python stubs of its process group.

The server comes from the project's launcher, ``tools/triton_reference.py`` (installed on first
use into the user's cache folder); each server logs into ``triton.log`` in its own workdir.
Whether the reference can run here at all is decided once per session, in ``conftest.py``.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.frontends.http.server_thread import Endpoints
from tools.triton_reference import TritonServer, free_ports

__all__ = ["LoadResult", "TritonReference", "free_ports", "running_triton"]

MISSING_BACKEND = "unable to find backend library"
CRASHED = "tritonserver crashed while loading it"
NOT_SENT = "not loaded: tritonserver had crashed before"


@dataclass(frozen=True)
class LoadResult:
    model: str
    ok: bool
    status: int  # HTTP status, 0 when the load timed out
    message: str

    @property
    def backend_missing(self) -> bool:
        """Triton validated the config but has no library for the model's backend."""
        return MISSING_BACKEND in self.message

    @property
    def timed_out(self) -> bool:
        return self.status == 0


class TritonReference(TritonServer):
    """One tritonserver process serving ``repository``, its log in ``workdir``."""

    def __init__(self, repository: Path, workdir: Path, flags: Sequence[str] = ()) -> None:
        super().__init__(repository, workdir / "triton.log", flags)
        self.workdir = workdir

    @property
    def endpoints(self) -> Endpoints:
        return Endpoints(self.url, self.grpc_url, self.metrics_url)

    def load(self, model: str, timeout: float = 60.0) -> LoadResult:
        """Load ``model`` through the repository API. A load that the server's crash cuts off
        fails at once, with status 0 as a timeout (``judge`` retries it after a restart): the
        crashed server can take minutes to die, and answers nothing meanwhile."""
        if self.crashed or not self.running:
            return LoadResult(model, False, 0, NOT_SENT)
        answer: Future[LoadResult] = Future()

        def request() -> None:
            try:
                answer.set_result(self._load(model, timeout))
            except BaseException as exc:
                answer.set_exception(exc)

        threading.Thread(target=request, daemon=True).start()
        deadline = time.monotonic() + timeout + 5.0  # the request times out before this
        while not wait([answer], timeout=0.1).done:
            if self.crashed or not self.running or time.monotonic() > deadline:
                return answer.result() if answer.done() else LoadResult(model, False, 0, CRASHED)
        return answer.result()

    def _load(self, model: str, timeout: float) -> LoadResult:
        quoted = urllib.parse.quote(model, safe="")
        request = urllib.request.Request(
            f"{self.url}/v2/repository/models/{quoted}/load", data=b"", method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return LoadResult(model, True, int(response.status), "")
        except urllib.error.HTTPError as exc:
            body = exc.read()
            try:
                message = str(json.loads(body).get("error", ""))
            except ValueError:
                message = body.decode(errors="replace")
            return LoadResult(model, False, int(exc.code), message.strip())
        except OSError as exc:  # timeout: Triton 2.51 hangs on some python-backend failures
            return LoadResult(model, False, 0, f"load did not finish in {timeout}s ({exc})")

    def model_config(self, model: str) -> dict[str, object]:
        """GET /v2/models/<m>/config as JSON."""
        quoted = urllib.parse.quote(model, safe="")
        with urllib.request.urlopen(f"{self.url}/v2/models/{quoted}/config", timeout=10) as r:
            data: dict[str, object] = json.loads(r.read())
            return data

    def index(self) -> list[dict[str, str]]:
        """POST /v2/repository/index: every model with its state and reason."""
        request = urllib.request.Request(
            f"{self.url}/v2/repository/index", data=b"{}", method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            data: list[dict[str, str]] = json.loads(response.read())
            return data

    def load_all(
        self, models: Sequence[str], timeout: float = 60.0, workers: int = 4
    ) -> dict[str, LoadResult]:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(lambda m: self.load(m, timeout), models))
        return {r.model: r for r in results}

    def judge(
        self, models: Sequence[str], timeout: float = 60.0, workers: int = 4, retries: int = 1
    ) -> dict[str, LoadResult]:
        """Load every model and keep the verdicts, surviving server crashes.

        Triton 2.51 segfaults on a few invalid configs (sometimes only when loads run in
        parallel). When the server dies it is restarted; the models whose loads had not been
        sent yet are judged again as at first, the loads the crash cut off are retried in
        parallel ``retries`` times, then one at a time; a model that kills the server on its
        own gets a failed verdict ("tritonserver crashed while loading it").
        """
        results = self.load_all(models, timeout, workers)
        if self.alive:
            return results
        cut_off = [m for m in models if results[m].timed_out]
        untried = [m for m in cut_off if results[m].message == NOT_SENT]
        cut_off = [m for m in cut_off if results[m].message != NOT_SENT]
        self.restart()
        if untried:  # fewer than ``models``: the first loads were sent before any crash
            results.update(self.judge(untried, timeout, workers, retries))
        if retries > 0:
            results.update(self.judge(cut_off, timeout, workers, retries - 1))
            return results
        for model in cut_off:
            result = self.load(model, timeout)
            if not self.alive:
                result = LoadResult(model, False, 0, CRASHED)
                self.restart()
            results[model] = result
        return results


@contextmanager
def running_triton(
    repository: Path, workdir: Path, flags: Sequence[str] = (), ready: Iterable[str] | None = None
) -> Iterator[TritonReference]:
    """A live Triton serving ``repository`` (its log under ``workdir``), killed on exit.
    ``ready``: None waits for live only, () for server readiness, names for those models'
    readiness."""
    server = TritonReference(repository, workdir, flags)
    server.start()
    try:
        if ready is not None:
            server.wait_ready(ready)
        yield server
    finally:
        server.stop(graceful=False)  # what the tests compare is over; this saves 2 s a server
