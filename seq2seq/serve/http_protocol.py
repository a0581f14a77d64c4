"""HTTP parsing with a bound on a request's head (its line and headers) and on the time a
request may take to arrive.

uvicorn parses HTTP with httptools where it is installed, and httptools buffers a header of
any size: a client could make the server hold megabytes per connection. h11 takes a bound
(``h11_max_incomplete_event_size``) but only on a head still incomplete, and parses several
times slower. :func:`http_settings` keeps httptools and bounds it
(:class:`BoundedHttpToolsProtocol`), and falls back to a bounded h11 where httptools is
missing. Either way:

- **The head bound holds however the head arrives.** A head still incomplete past
  ``max_header_bytes`` is refused before more of it is buffered, and a complete one is measured
  as it is parsed (its target and each header's name and value, with their separators), so a
  40 KB head sent in one write is refused too. httptools answers 431, h11 400; the connection
  is closed.
- **A request must arrive within ``read_timeout_s``** of the connection being opened or of its
  first byte: its line, headers and body. A client that trickles its head or body, or opens a
  connection and sends nothing, holds a connection no longer than that: a head still
  incomplete is answered 408, a body still incomplete ends with the connection closed (the app
  sees a client that went away). Time the server itself spends on a request does not count,
  and between requests of a keep-alive connection uvicorn's own idle timeout holds.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_HEADER_BYTES", "READ_TIMEOUT_S", "http_settings"]

MAX_HEADER_BYTES = 32 * 1024
"""The most bytes a request's line and headers may take (a larger one is refused before it is
buffered: memory per connection stays bounded)."""

READ_TIMEOUT_S = 30.0
"""The default of ``seq2seq serve --read-timeout``: seconds a request's head and body may take
to arrive."""

_TOO_LARGE = b"Request header fields too large"
_TOO_SLOW = b"Request not received in time"


def _answer(status: bytes, text: bytes) -> bytes:
    return (
        b"HTTP/1.1 " + status + b"\r\ncontent-type: text/plain; charset=utf-8\r\n"
        b"content-length: " + str(len(text)).encode("ascii") + b"\r\n"
        b"connection: close\r\n\r\n" + text
    )


class _ReadTimer:
    """The read timeout both bounded protocols share: a timer armed when a connection opens
    and when a request begins, disarmed once the request has arrived whole; when it fires, the
    connection is closed (after :meth:`_before_close`, which may answer first). Mixed in
    before uvicorn's protocol class, which gives ``loop``, ``transport`` and ``logger``."""

    read_timeout_s: float = READ_TIMEOUT_S
    _deadline: Any = None  # the read timer (asyncio.TimerHandle)

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.read_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        self.logger.info(
            "A request did not arrive within %g s (--read-timeout): connection closed.",
            self.read_timeout_s,
        )
        self._before_close()
        self.transport.close()

    def _before_close(self) -> None:
        """What to send before a timed-out connection closes (nothing)."""

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()  # a connection that sends nothing is a head that never arrives

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def http_settings(
    max_header_bytes: int = MAX_HEADER_BYTES, read_timeout_s: float = READ_TIMEOUT_S
) -> dict[str, Any]:
    """The ``uvicorn.Config`` keywords that bound request heads to ``max_header_bytes`` and the
    arrival of a request to ``read_timeout_s`` seconds.

    Args:
        max_header_bytes: The most bytes a request line and its headers may take.
        read_timeout_s: The most seconds a request's head and body may take to arrive.

    Returns:
        ``{"http": ...}`` (the protocol class) and, for h11, its
        ``h11_max_incomplete_event_size``.
    """
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # no httptools: h11, bounded here too
        return {
            "http": _bounded_h11(max_header_bytes, read_timeout_s),
            "h11_max_incomplete_event_size": max_header_bytes,
        }

    class BoundedHttpToolsProtocol(_ReadTimer, HttpToolsProtocol):
        """httptools that refuses a head longer than ``max_header_bytes`` with 431 and a
        request slower than ``read_timeout_s`` with 408 (or a closed connection)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._in_head = True  # between requests, or reading one's line and headers
            self._head_bytes = 0  # bytes received while in the head (an incomplete head)
            self._parsed = 0  # bytes of the head parsed so far (a complete one too)
            self._refused = False
            self.read_timeout_s = read_timeout_s  # _ReadTimer's

        # -- the read timeout ----------------------------------------------------------------

        def _before_close(self) -> None:
            if self._in_head:  # a head that never arrived whole: 408
                self._refused = True
                self.transport.write(_answer(b"408 Request Timeout", _TOO_SLOW))

        # -- the head bound ------------------------------------------------------------------

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if self._in_head:
                self._head_bytes += len(data)
            super().data_received(data)
            # An incomplete head past the bound (a complete one is measured as it is parsed;
            # body bytes arriving in the same read as the head are not counted against it).
            if self._in_head and self._head_bytes > max_header_bytes:
                self._refuse()

        def _count(self, n: int) -> bool:
            """Count ``n`` parsed head bytes; False once the head is over the bound."""
            self._parsed += n
            if self._parsed > max_header_bytes:
                self._refuse()
            return not self._refused

        def on_message_begin(self) -> None:
            if self._refused:
                return
            self._parsed = 12  # the request line's spaces, version and CRLF
            self._arm()
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            if not self._refused and self._count(len(url)):  # (may come in pieces)
                super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            if not self._refused and self._count(len(name) + len(value) + 4):  # ": ", CRLF
                super().on_header(name, value)

        def on_headers_complete(self) -> None:
            if self._refused:
                return
            self._in_head = False
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if not self._refused:
                super().on_body(body)

        def on_message_complete(self) -> None:
            if self._refused:
                return
            self._disarm()  # the whole request is here: the server's own time starts
            super().on_message_complete()
            self._in_head, self._head_bytes = True, 0

        def _refuse(self) -> None:
            if self._refused or self.transport.is_closing():
                self._refused = True
                return
            self._refused = True
            self._disarm()
            self.logger.warning("Request header fields too large: connection closed.")
            self.transport.write(_answer(b"431 Request Header Fields Too Large", _TOO_LARGE))
            self.transport.close()

    return {"http": BoundedHttpToolsProtocol}


def _bounded_h11(max_header_bytes: int, read_timeout_s: float):
    """uvicorn's h11 protocol with the same two bounds (a head over the bound is h11's 400)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class BoundedH11Protocol(_ReadTimer, H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.read_timeout_s = read_timeout_s  # _ReadTimer's
            next_event = self.conn.next_event

            def checked_next_event():
                event = next_event()
                if isinstance(event, h11.Request):
                    size = len(event.method) + len(event.target) + 12
                    size += sum(len(n) + len(v) + 4 for n, v in event.headers.raw_items())
                    if size > max_header_bytes:
                        raise h11.RemoteProtocolError(
                            "Request header fields too large", error_status_hint=431
                        )
                elif isinstance(event, h11.EndOfMessage):
                    self._disarm()
                return event

            self.conn.next_event = checked_next_event

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE:
                self._arm()  # the first bytes of a new request
            super().data_received(data)

    return BoundedH11Protocol
