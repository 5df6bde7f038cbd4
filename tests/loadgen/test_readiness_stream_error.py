"""The readiness probe against a server that answers HTTP 200 and then sends an error event
in the stream (real HTTP on loopback): the probe records the server's message as the
refusal instead of crashing on it."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from benchcamp.loadgen.readiness import check

MODEL = "m"
MESSAGE = "prompt token ids are not supported by this deployment"


class _Handler(BaseHTTPRequestHandler):
    """/v1/completions: 200, then an error event; /v1/chat/completions: one token and usage."""

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send(200, json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode())
        else:
            self._send(404, b'{"detail": "Not Found"}')

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/v1/completions":
            events = [{"error": {"message": MESSAGE, "type": "invalid_request_error"}}]
        elif self.path == "/v1/chat/completions":
            events = [{"choices": [{"index": 0, "delta": {"content": "hi"}}]},
                      {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}]
        else:
            self._send(404, b'{"detail": "Not Found"}')
            return
        sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        self._send(200, sse.encode(), "text/event-stream")


def test_a_stream_error_event_is_a_refusal_with_the_servers_message():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        caps = check(f"http://127.0.0.1:{srv.server_address[1]}", None, MODEL)
    finally:
        srv.shutdown()
        srv.server_close()
    assert not caps.completions and caps.chat
    assert caps.refused["completions-ids"] == f"stream error event: {MESSAGE}"
    assert caps.refused["completions-text"] == f"stream error event: {MESSAGE}"
