"""Where definitions come from besides rabbitmqctl: the management API's GET /api/definitions (served
here by a small HTTP server standing in for the plugin, with its basic auth) and files."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ferrymq.migrate.definitions import DefinitionsError, from_file, from_management, queues_to_drain

DOC = {
    "vhosts": [{"name": "/"}, {"name": "other"}],
    "queues": [
        {"name": "orders", "vhost": "/", "type": "classic", "arguments": {}},
        {"name": "events", "vhost": "/", "type": "stream", "arguments": {"x-queue-type": "stream"}},
        {"name": "elsewhere", "vhost": "other", "arguments": {}},
    ],
}


class _Management(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        expected = "Basic " + base64.b64encode(b"admin:pw").decode()
        if self.headers.get("Authorization") != expected:
            self.send_response(401, "Unauthorized")
            self.end_headers()
            return
        body = json.dumps(DOC).encode() if self.path == "/api/definitions" else b"{}"
        self.send_response(200 if self.path == "/api/definitions" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args) -> None:
        pass


@pytest.fixture
def management() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Management)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


def test_definitions_from_the_management_api(management: str) -> None:
    assert from_management(management, "admin", "pw") == DOC


def test_management_api_refusal_and_absence_are_clear_errors(management: str) -> None:
    with pytest.raises(DefinitionsError, match="HTTP 401"):
        from_management(management, "admin", "wrong")
    with pytest.raises(DefinitionsError, match="cannot reach"):
        from_management("http://127.0.0.1:1", "admin", "pw")


def test_queues_of_the_vhost_are_drained_and_streams_left(tmp_path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps(DOC))
    drain, left = queues_to_drain(from_file(path), "/")
    assert drain == ["orders"]
    assert left == ["queue 'events' is a stream: not drained (read it by offset)"]


def test_a_file_that_is_not_definitions(tmp_path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"hello": 1}))
    with pytest.raises(DefinitionsError, match="not RabbitMQ definitions"):
        from_file(path)
    with pytest.raises(DefinitionsError, match="cannot read"):
        from_file(tmp_path / "missing.json")
