"""A request that does not arrive in time is answered 408 and its connection closed.

uvicorn bounds only the idle time between two requests (timeout_keep_alive): a client that sent part of
a head, or a body shorter than its Content-Length, held its connection and a task forever (while others
were served). Nor can ASGI middleware help with a head, since the app is called once the head is in.
So uvicorn's HTTP protocol (httptools' where installed, else h11's) is given a deadline: a request's
head must arrive whole within `seconds` of its first byte (of the connection, for its first request),
and its body may pause no longer than `seconds` between two reads. docs/serve.md states the bound.
The 408 is followed by a lingering close, as Apache and nginx close: a socket closed at once answers
the bytes a client is still sending with a reset, which can throw the 408 away before it is read.
`uvicorn_config` is the whole of how the server runs uvicorn, this protocol included.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

log = logging.getLogger("seq2seq.serve")


def timed_out_response(seconds: float) -> bytes:
    """The 408 a late request gets, with the server's JSON error, before its connection is closed."""
    error = (
        f"the request did not arrive in time: its head must arrive within {seconds:g} s and its body may pause "
        f"at most {seconds:g} s (receive_seconds)"
    )
    body = json.dumps({"error": error}).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


# After a 408 the connection reads on (and drops what it reads) for at most this long in all, as
# nginx's lingering_time: a client still sending then reads its answer rather than a reset.
LINGER_SECONDS = 30.0


def with_receive_deadline(seconds: float, protocol: type | None = None) -> type:
    """uvicorn's HTTP protocol class (`protocol`; default: the one uvicorn picks) with the deadline, as
    uvicorn.Config(http=...) takes it. Reads of the protocol: `cycle` (the request whose head is in,
    `more_body` until its body is in, `response_started`, `response_complete`), `flow.read_paused`
    (uvicorn stopped reading, so nothing is late) and `loop`: the same in both of uvicorn's protocols."""
    if protocol is None:
        from uvicorn.protocols.http.auto import AutoHTTPProtocol

        protocol = AutoHTTPProtocol
    answer = timed_out_response(seconds)

    class ReceiveDeadline(protocol):  # type: ignore[misc, valid-type]
        _timer: asyncio.TimerHandle | None = None
        _previous: Any = None  # the request before the one that is arriving: a new `cycle` means its head is in
        _linger_until: float | None = None  # answered 408 and half-closed: reading on until then

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm(after=None)

        def data_received(self, data: bytes) -> None:
            if self._linger_until is not None:  # dropped: a pause of `seconds` or the limit ends it
                self._cancel()
                self._timer = self.loop.call_at(min(self.loop.time() + seconds, self._linger_until), self._close)
                return
            if self._timer is None:  # the first byte of the next request
                self._arm(after=self.cycle)
            super().data_received(data)
            if self._timer is not None and self.cycle is not self._previous:
                self._cancel()
                if self.cycle.more_body:  # the head is in; the body may pause `seconds` from here
                    self._arm(after=self._previous)

        def eof_received(self) -> bool | None:
            if self._linger_until is not None:
                return None  # the client has closed its side: asyncio closes the connection
            return super().eof_received()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel()
            super().connection_lost(exc)

        def _arm(self, after: Any) -> None:
            self._previous = after
            self._timer = self.loop.call_later(seconds, self._expired)

        def _cancel(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _expired(self) -> None:
            self._timer = None
            cycle, head_in = self.cycle, self.cycle is not self._previous
            if self.transport.is_closing() or (head_in and not cycle.more_body):
                return  # gone, or arrived whole (read after a pipelined response, say)
            answering = cycle is not None and cycle.response_started and not cycle.response_complete
            if self.flow.read_paused or (not head_in and answering):  # waiting on the server, not the client
                self._arm(after=self._previous)
                return
            if head_in and cycle.response_started:  # answered without its body: uvicorn's keep-alive closes it
                return
            client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
            log.info("%s: a request did not arrive in %g s: 408, connection closed", client, seconds)
            self.transport.write(answer)
            if not self.transport.can_write_eof():  # TLS: no half-close
                self.transport.close()
                return
            self.transport.write_eof()  # the 408, then the end of what the server sends
            self._linger_until = self.loop.time() + LINGER_SECONDS
            self._timer = self.loop.call_later(seconds, self._close)

        def _close(self) -> None:
            self._timer = None
            self.transport.close()

    return ReceiveDeadline


# How long a connection may sit idle between two requests. uvicorn's own 5 s is httpx's pool expiry
# exactly, and less than aiohttp's (15 s) or urllib3's (none): a client that reuses a connection just as
# the server drops it gets a reset for a request the server never read. nginx keeps them 75 s.
KEEP_ALIVE_SECONDS = 75

# After the drain time, the requests refused then still need their answers written: uvicorn's own
# deadline (after which it cancels what is left, and a client would get no JSON) comes this much later.
ANSWER_SECONDS = 5


def uvicorn_config(app: Any, drain_seconds: float, receive_seconds: float) -> Any:
    """How uvicorn runs the app: our logging, the drain after SIGTERM, how long an idle connection is
    kept, the deadline of a request that arrives too slowly (with_receive_deadline)."""
    import uvicorn

    return uvicorn.Config(
        app,
        http=with_receive_deadline(receive_seconds),
        log_config=None,  # our logging (stderr), not uvicorn's
        access_log=False,  # one line per batch at debug and a summary per minute instead
        timeout_graceful_shutdown=drain_seconds + ANSWER_SECONDS,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        lifespan="on",
        loop="asyncio",  # not uvloop: after a graceful SIGTERM it still ended the process by the signal
    )
