"""A request that stops arriving is answered 408 and closed after receive_seconds, measured with raw
sockets against uvicorn serving the server's app on 127.0.0.1 (as seq2seq-serve configures it, with
the stand-in engine of tests/test_serve_routes.py and a deadline of a second), while other clients are
served; a body that keeps coming, however slowly, is not cut."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from pathlib import Path

import pytest

uvicorn = pytest.importorskip("uvicorn", reason="seq2seq-serve needs: pip install -e '.[serve]'")

from test_serve_routes import app_of  # noqa: E402

from seq2seq.serve.slow_requests import uvicorn_config  # noqa: E402

SECONDS = 1.0  # receive_seconds here (the default is ServeConfig's)
HEAD = b"POST /translate HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"


@pytest.fixture
def port(tmp_path: Path):
    app, batcher, _ = app_of(tmp_path)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn_config(app, drain_seconds=0.0, receive_seconds=SECONDS))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield listener.getsockname()[1]
    server.should_exit = True
    thread.join(30)
    batcher.stop()


def connect(port: int) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", port), timeout=SECONDS + 5)
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client


def until_closed(client: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a socket timeout fails the test)."""
    received = b""
    while chunk := client.recv(65536):
        received += chunk
    return received


def one_response(client: socket.socket) -> bytes:
    """One whole answer on a connection that stays open: its head, then Content-Length bytes."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += client.recv(65536) or pytest.fail(f"closed after {received!r}")
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
    while len(body) < length:
        body += client.recv(65536) or pytest.fail(f"closed after {received + body!r}")
    return head + b"\r\n\r\n" + body


def translated(port: int, body: bytes, pieces: int = 1, pause: float = 0.0) -> bytes:
    """A whole request's answer, its body sent in `pieces` with `pause` seconds between them."""
    with connect(port) as client:
        client.sendall(HEAD + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
        step = -(-len(body) // pieces)
        for start in range(0, len(body), step):
            client.sendall(body[start : start + step])
            time.sleep(pause)
        return until_closed(client)


STALLED = {
    "a body short of its Content-Length": HEAD + b'Content-Length: 1000\r\n\r\n{"q": "ab',  # the review's 9 bytes
    "half a head": HEAD + b"Content-Len",
    "nothing at all": b"",
}


@pytest.mark.parametrize("sent", STALLED.values(), ids=STALLED.keys())
def test_a_request_that_stops_arriving_is_answered_408_and_closed(port: int, sent: bytes) -> None:
    with connect(port) as stalled:
        stalled.sendall(sent)
        start = time.monotonic()
        assert b'"AB"' in translated(port, b'{"q": "ab"}'), "another client is served meanwhile"
        answer = until_closed(stalled)
        waited = time.monotonic() - start
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
    error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert error.startswith("the request did not arrive in time: its head must arrive within 1 s"), error
    assert SECONDS - 0.1 <= waited <= SECONDS + 1.5, waited


def test_a_head_that_trickles_in_is_cut_at_the_deadline(port: int) -> None:
    """A byte of the head every 0.2 s would hold the connection for ever under an idle timeout."""
    with connect(port) as client:
        start, answer = time.monotonic(), b""
        for byte in HEAD + b"X-Padding: " + b"x" * 100:
            try:
                client.sendall(bytes([byte]))
            except OSError:  # closed: the answer is waiting to be read
                break
            client.settimeout(0.2)
            try:
                if answer := client.recv(65536):
                    break
            except TimeoutError:
                continue
        client.settimeout(5)
        answer += until_closed(client)
        waited = time.monotonic() - start
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert SECONDS - 0.1 <= waited <= SECONDS + 1.5, waited


def test_a_body_that_keeps_coming_is_not_cut(port: int) -> None:
    """The body's bound is a pause between reads: four pieces 0.4 s apart (1.6 s in all) arrive whole."""
    answer = translated(port, b'{"q": "ab cd"}', pieces=4, pause=0.4 * SECONDS)
    assert answer.startswith(b"HTTP/1.1 200") and b'"AB CD"' in answer, answer


@pytest.mark.parametrize("seconds", [0.0, -1.0, float("inf"), float("nan")])
def test_receive_seconds_must_be_a_positive_finite_time(seconds: float) -> None:
    from seq2seq.config import ConfigValueError, ServeConfig, validate_serve

    with pytest.raises(ConfigValueError, match=r"^config error: receive_seconds=.*: must be positive and finite$"):
        validate_serve(ServeConfig(run="r", receive_seconds=seconds))


def test_a_client_still_sending_reads_its_408(port: int) -> None:
    """A client that sends on after the deadline, not yet reading, must still read its 408. A socket
    closed at once answers what arrives next with a reset, after which the client's next send fails and
    a 408 not yet read can be thrown away (closed with bytes unread, the server's kernel resets at once
    and drops what it had not sent). So the server half-closes and reads on, dropping what it reads."""
    with connect(port) as client:
        client.sendall(HEAD + b"Content-Length: 1000\r\n\r\n")
        time.sleep(SECONDS + 0.5)  # the 408 is written by now, unread
        for _ in range(3):  # still sending its body
            client.sendall(b"x" * 100)
            time.sleep(0.2)  # time for a reset to come back
        answer = until_closed(client)
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer


def test_a_client_silent_after_its_408_is_let_go(port: int) -> None:
    """The reading on after a 408 ends once the client pauses receive_seconds: the connection is closed
    then, and what the client sends after that is refused."""
    with connect(port) as client:
        client.sendall(HEAD)
        assert until_closed(client).startswith(b"HTTP/1.1 408")  # the server has sent all it will
        time.sleep(SECONDS + 0.5)
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            for _ in range(3):
                client.sendall(b"x")
                time.sleep(0.2)


def test_an_idle_connection_outlives_the_clients_pools(port: int) -> None:
    """A connection idle for longer than uvicorn's 5 s (httpx's pool expiry) still takes a request: a
    client pool that reuses it is not reset. (The keep-alive is not receive_seconds: nothing is late.)"""
    body = b'{"q": "ab"}'
    request = HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body
    with connect(port) as client:
        client.sendall(request)
        first = one_response(client)
        time.sleep(6.0)
        client.sendall(request)
        second = one_response(client)
    assert first.startswith(b"HTTP/1.1 200") and second.startswith(b"HTTP/1.1 200"), (first, second)
