"""The metrics endpoint: `/metrics` for Prometheus, `/healthz` and `/readyz` for whoever checks.

Served on the broker's own event loop (asyncio streams, HTTP/1.0 style: one request per connection),
so a scrape reads the broker between two loop turns, and a loop that is stuck answers no health check
either. `/healthz`: the process and its loop are alive (200). `/readyz`: 200 while the server is active
and accepting clients, 503 otherwise (a passive backup is alive but not ready; so is a broker still
recovering its journal).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from .metrics import BrokerCollector
from .node import Node

log = logging.getLogger("amqp_mirror.ops")

READ_TIMEOUT = 5.0  # seconds for a client to send its request line and headers
MAX_REQUEST = 8192


class MetricsEndpoint:
    def __init__(self, node: Node, collector: BrokerCollector) -> None:
        self.node = node
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        # the standard names generic dashboards read: process_cpu_seconds_total, python_info, ...
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._server: asyncio.AbstractServer | None = None
        self.port = 0

    async def start(self) -> None:
        settings = self.node.config.metrics
        self._server = await asyncio.start_server(self._serve, settings.host, settings.port)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info(
            "AMQ951010: %s: metrics on http://%s:%d/metrics (/healthz, /readyz)",
            self.node.name,
            settings.host,
            self.port,
        )

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            with contextlib.suppress(Exception):
                await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
            status, content_type, body = self.answer(head[:MAX_REQUEST])
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            writer.close()
            return
        header = (
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        with contextlib.suppress(ConnectionError):
            writer.write(header.encode("ascii") + body)
            await writer.drain()
        writer.close()

    def answer(self, head: bytes) -> tuple[str, str, bytes]:
        """(status line, content type, body) for one request head."""
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"GET only\n"
        path = parts[1].split("?", 1)[0]
        if path == "/metrics":
            try:
                return "200 OK", CONTENT_TYPE_LATEST, generate_latest(self.registry)
            except Exception:  # a bug must cost a scrape, not the endpoint
                log.exception("%s: collecting metrics failed", self.node.name)
                return "500 Internal Server Error", "text/plain", b"collecting metrics failed; see the log\n"
        if path == "/healthz":
            return "200 OK", "text/plain", b"alive\n"
        if path == "/readyz":
            if self.node.active():
                return "200 OK", "text/plain", b"active\n"
            return "503 Service Unavailable", "text/plain", f"{self.node.state()}\n".encode()
        return "404 Not Found", "text/plain", b"/metrics, /healthz or /readyz\n"
