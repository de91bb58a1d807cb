"""A local HTTP server (127.0.0.1, random port) that speaks enough of the OpenAI and Gemini REST APIs.

Tests script its answers and inspect what clients sent; nothing touches the network.

    with FakeServer() as srv:                      # default: a chat completion echoing a counter
        srv.push(Reply(status=429, headers={"Retry-After": "0"}), Reply.chat("a dog"))
        client = OpenAI(base_url=srv.url, api_key="x")
        ...
        srv.requests[0].json                      # every request body, in arrival order

Answers come from, in order: the scripted queue (``push``), else ``responder(request)`` (a callable
returning a :class:`Reply`), else a default chat completion. ``Reply.delay`` sleeps before
answering (timeouts, latency); ``Reply.body`` sends raw bytes (malformed bodies);
``Reply.drop`` closes the connection without an answer. ``latency`` adds a delay to every reply.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw) if self.raw else None


@dataclass
class Reply:
    status: int = 200
    json: Any = None
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False

    @staticmethod
    def chat(text: str, prompt_tokens: int = 100, completion_tokens: int = 10, model: str = "fake-model",
             finish_reason: str = "stop") -> Reply:
        return Reply(json={
            "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "finish_reason": finish_reason,
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        })

    @staticmethod
    def gemini(text: str, prompt_tokens: int = 100, output_tokens: int = 10) -> Reply:
        return Reply(json={
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": prompt_tokens, "candidatesTokenCount": output_tokens,
                              "totalTokenCount": prompt_tokens + output_tokens},
        })

    @staticmethod
    def error(status: int, message: str = "error", retry_after: str | None = None) -> Reply:
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        return Reply(status=status, json={"error": {"message": message, "type": "fake", "code": status}},
                     headers=headers)


class FakeServer:
    """Threaded server; use as a context manager. ``url`` ends in ``/v1`` (the OpenAI base URL)."""

    def __init__(self, responder: Callable[[RecordedRequest], Reply] | None = None, latency: float = 0.0) -> None:
        self.responder = responder
        self.latency = latency
        self.requests: list[RecordedRequest] = []
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._counter = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- scripting ---------------------------------------------------------------------------
    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def _next_reply(self, req: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(req)
            if self._queue:
                return self._queue.popleft()
        if self.responder is not None:
            return self.responder(req)
        return Reply.chat(f"caption {next(self._counter)}")

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def base(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def url(self) -> str:
        return self.base + "/v1"

    def start(self) -> FakeServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                req = RecordedRequest(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, raw)
                reply = server._next_reply(req)
                wait = reply.delay + server.latency
                if wait:
                    time.sleep(wait)
                if reply.drop:
                    self.close_connection = True
                    self.connection.close()
                    return
                body = reply.body if reply.body is not None else json.dumps(reply.json or {}).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            do_POST = _handle
            do_GET = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    """Serve from a subprocess: ``python tests/fake_openai_server.py --latency 0.2`` prints the URL."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", type=float, default=0.0)
    args = ap.parse_args()
    srv = FakeServer(latency=args.latency).start()
    print(srv.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()


if __name__ == "__main__":
    main()
