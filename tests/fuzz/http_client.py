"""A keep-alive HTTP/1.1 client for the fuzz tests: one connection, reopened when the server
closes it, every answer read in full within a timeout (a hang fails the example)."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any

ANSWER_TIMEOUT_S = 10.0


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def error(self) -> str:
        try:
            return str(json.loads(self.body).get("error", ""))
        except (ValueError, AttributeError):
            return ""


class FuzzClient:
    def __init__(self, port: int) -> None:
        self.port = port
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            self._conn = http.client.HTTPConnection(
                "127.0.0.1", self.port, timeout=ANSWER_TIMEOUT_S
            )
        return self._conn

    def request(
        self, method: str, path: str, body: bytes, headers: dict[str, str], chunked: bool = False
    ) -> Answer:
        conn = self._connection()
        try:
            if chunked:
                conn.request(method, path, body=iter([body]), headers=headers, encode_chunked=True)
            else:
                conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
        except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
            self.close()  # the server closed a keep-alive connection: once more on a new one
            conn = self._connection()
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
        if response.will_close:
            self.close()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, data)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> FuzzClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
