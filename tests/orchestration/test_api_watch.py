"""The API watch stops a run when its server is gone, not when a busy machine answers slowly."""

from __future__ import annotations

import http.server
import socket
import threading
import time

from calibflow.flows import server as srv


class _Slow(http.server.BaseHTTPRequestHandler):
    delay = 0.0

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        time.sleep(self.delay)
        try:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"true")
        except OSError:  # the watch gave up on this request long ago (it is the point of the test)
            pass

    def log_message(self, *args) -> None:
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    """A slow handler outlives its test (it sleeps past ``shutdown``); whatever it hits then must not
    print a traceback into the next test's captured output (CI: a CliRunner test in the same worker saw
    socketserver's "Exception occurred during processing of request" in its command's output)."""

    def handle_error(self, request, client_address) -> None:
        pass


def _serve(delay: float) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = type("H", (_Slow,), {"delay": delay})
    httpd = _QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


def _watch(url: str, seconds: float, **kw) -> list[str]:
    gone: list[str] = []
    stop = srv.watch_api(url, gone.append, every=0.2, **kw)
    deadline = time.monotonic() + seconds
    while not gone and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    return gone


def test_a_slow_server_is_not_declared_dead():
    httpd, url = _serve(delay=3.0)  # every health check times out (2 s), for longer than three probes
    try:
        assert _watch(url, 8.0, slow_for=30.0) == []
    finally:
        httpd.shutdown()


def test_a_server_that_stays_silent_past_the_limit_is_declared_dead():
    httpd, url = _serve(delay=10.0)
    try:
        gone = _watch(url, 20.0, slow_for=3.0)
    finally:
        httpd.shutdown()
    assert gone and "stopped answering" in gone[0]


def test_a_closed_port_is_declared_dead_within_seconds():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    gone = _watch(f"http://127.0.0.1:{port}", 10.0)
    assert gone and "stopped answering" in gone[0]
    assert time.monotonic() - t0 < 5.0


def test_a_server_that_will_not_start_is_one_line_without_a_traceback(monkeypatch):
    from typer.testing import CliRunner

    from calibflow.cli import main as cli

    def slow(port: int, ui: bool = True) -> str:
        raise srv.ServerFailed(f"prefect server did not become healthy on port {port} within 60 s")

    monkeypatch.setattr(srv, "start", slow)
    res = CliRunner().invoke(cli.app, ["server", "start", "--port", "4299"])
    assert res.exit_code == 1
    out = res.output.strip().splitlines()
    assert out == ["error: prefect server did not become healthy on port 4299 within 60 s"], res.output
