"""One HTTP request in, one response out: what a worker of
:class:`progress_control.http_server.BoundedHttpServer` does with a complete request header.

The caller's ``respond`` gets an :class:`HttpRequest` and returns an :class:`HttpResponse`;
:func:`answer` parses the request (``http.server``'s parser, from the bytes the I/O thread read)
and writes the response to the socket. Only ``GET`` is served (others get 501).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import logging
import socket
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.metrics_core import Metric

__all__ = [
    "HttpRequest",
    "HttpResponse",
    "Respond",
    "WithoutCreated",
    "answer",
    "peer",
    "prometheus_metrics",
]

# The server's logger: one name for everything a bounded server logs.
logger = logging.getLogger("progress_control.http_server")


@dataclass(frozen=True)
class HttpRequest:
    """One parsed ``GET`` request."""

    path: str
    """The request target as sent (path and query string)."""
    headers: Message
    client: object
    """The client's socket address, as ``accept()`` returns it."""


@dataclass(frozen=True)
class HttpResponse:
    """What ``respond`` answers: a status, a body and its content type, extra headers."""

    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(
        cls, status: int, body: object, headers: tuple[tuple[str, str], ...] = ()
    ) -> HttpResponse:
        """``body`` as JSON (values JSON cannot hold become strings)."""
        return cls(status, json.dumps(body, default=str).encode(), "application/json", headers)


Respond = Callable[[HttpRequest], HttpResponse]
"""Answers one request; may raise (the client then gets a 500 and the server carries on)."""


class WithoutCreated:
    """A registry's metrics without their ``_created`` samples: a series per counter and
    histogram holding its creation time, which no dashboard or rule of ours reads and which
    doubles what an operator stores (``prometheus_client`` adds it unless the whole process
    turns it off, which a library must not do to its host)."""

    def __init__(self, registry: Any) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            metric.samples = [s for s in metric.samples if not s.name.endswith("_created")]
            yield metric


def prometheus_metrics(registry: CollectorRegistry, request: HttpRequest) -> HttpResponse:
    """``registry`` as ``prometheus_client``'s own server answers a scrape: the text or
    OpenMetrics format the ``Accept`` header asks for, only the ``name[]`` metrics when given,
    gzipped when accepted; no ``_created`` samples."""
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    names = urllib.parse.parse_qs(urllib.parse.urlsplit(request.path).query).get("name[]")
    body = encoder(WithoutCreated(registry.restricted_registry(names) if names else registry))
    if gzip_accepted(request.headers.get("Accept-Encoding", "")):
        return HttpResponse(200, gzip.compress(body), content_type, (("Content-Encoding", "gzip"),))
    return HttpResponse(200, body, content_type)


def peer(address: object) -> str:
    """A socket address as ``host:port`` for logs (a log field is a string, not a tuple)."""
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


def answer(respond: Respond, sock: socket.socket, address: Any, request: bytes, name: str) -> bool:
    """Answer the one request in ``request`` (its header, as read) with ``respond``, on
    ``sock``; whether the connection may be kept for another one. ``name`` prefixes logs."""
    return _RequestHandler(respond, sock, address, request, name).run()


class _RequestHandler(BaseHTTPRequestHandler):
    """Parses exactly one request whose bytes the I/O thread already read and writes what
    ``respond`` answers to the socket."""

    protocol_version = "HTTP/1.1"

    def __init__(
        self, respond: Respond, sock: socket.socket, address: Any, request: bytes, name: str
    ) -> None:
        # Not BaseRequestHandler.__init__: there is no socketserver here, and the request
        # comes from a buffer, the answer goes to the socket.
        self.respond = respond
        self.server_name = name
        self.request = sock
        self.client_address = address
        self.rfile = io.BytesIO(request)
        self.wfile = sock.makefile("wb")
        self.close_connection = True

    def run(self) -> bool:
        """Answer the request; whether the connection may be kept for another one."""
        try:
            self.handle_one_request()
            self.wfile.flush()
        finally:
            with contextlib.suppress(OSError):
                self.wfile.close()
        return not self.close_connection

    def log_message(self, format: str, *args: object) -> None:
        # Debug only: probes and scrapes every few seconds would flood the log.
        logger.debug(
            "%(server)s: %(request_log)s",
            {
                "server": self.server_name,
                "request_log": format % args,
                "client": peer(self.client_address),
            },
        )

    def do_GET(self) -> None:
        request = HttpRequest(self.path, self.headers, self.client_address)
        try:
            response = self.respond(request)
        except Exception as exc:  # never let a request take the server down
            logger.exception("%(server)s: request failed", {"server": self.server_name})
            response = HttpResponse.json(500, {"error": type(exc).__name__, "message": str(exc)})
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in response.headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(response.body)
