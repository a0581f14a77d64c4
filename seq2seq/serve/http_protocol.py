"""HTTP parsing with a bound on a request's head (its line and headers).

uvicorn parses HTTP with httptools where it is installed, and httptools buffers a header of
any size: a client could make the server hold megabytes per connection. h11 takes a bound
(``h11_max_incomplete_event_size``) but parses several times slower. :func:`http_settings`
keeps httptools and bounds it (:class:`BoundedHttpToolsProtocol`), and falls back to bounded
h11 where httptools is missing. Either way a head over the bound gets an error status and the
connection is closed before more of it is buffered.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_HEADER_BYTES", "http_settings"]

MAX_HEADER_BYTES = 32 * 1024
"""The most bytes a request's line and headers may take (a larger one is refused before it is
buffered: memory per connection stays bounded)."""

_TOO_LARGE = b"Request header fields too large"


def http_settings(max_header_bytes: int = MAX_HEADER_BYTES) -> dict[str, Any]:
    """The ``uvicorn.Config`` keywords that bound request heads to ``max_header_bytes``.

    Args:
        max_header_bytes: The most bytes a request line and its headers may take.

    Returns:
        ``{"http": ...}`` and, for h11, its ``h11_max_incomplete_event_size``.
    """
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # no httptools: h11 takes the bound itself
        return {"http": "h11", "h11_max_incomplete_event_size": max_header_bytes}

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        """httptools that refuses a head longer than ``max_header_bytes`` with 431."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._in_head = True  # between requests, or reading one's line and headers
            self._head_bytes = 0

        def data_received(self, data: bytes) -> None:
            if self._in_head:
                self._head_bytes += len(data)
            super().data_received(data)
            # Checked after parsing, so a head that completes within a large first read
            # (head and body together) is not refused; one still incomplete past the bound is.
            if self._in_head and self._head_bytes > max_header_bytes:
                if not self.transport.is_closing():
                    self._refuse()

        def on_headers_complete(self) -> None:
            self._in_head = False
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._in_head, self._head_bytes = True, 0

        def _refuse(self) -> None:
            self.logger.warning("Request header fields too large: connection closed.")
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                b"content-type: text/plain; charset=utf-8\r\n"
                b"content-length: " + str(len(_TOO_LARGE)).encode("ascii") + b"\r\n"
                b"connection: close\r\n\r\n" + _TOO_LARGE
            )
            self.transport.close()

    return {"http": BoundedHttpToolsProtocol}
