"""A real Prometheus server for the canary-analysis tests, and the exporter it scrapes.

``prometheus`` starts Debian's ``prometheus`` binary (``tools.prometheus``, the same server the
demo watches its canary with) on a free loopback port: one job scraping the test's own
``exporter`` (the business-signal contract, served by prometheus-client from this process) every
second, storage in the test's temporary directory. Without the binary the tests that use it skip,
saying how to install it.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import start_http_server

from gates.canary.contract import OutcomeExporter
from tools.prometheus import PrometheusServer, prometheus_binary, start_prometheus

__all__ = ["Exporter", "PrometheusServer", "exporter", "free_port", "prometheus"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Exporter:
    """The contract's metrics on a private registry, served at ``http://127.0.0.1:{port}/metrics``."""

    signals: OutcomeExporter
    port: int


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    signals = OutcomeExporter()
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=signals.registry)
    yield Exporter(signals, port)
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture
def prometheus(exporter: Exporter, tmp_path: Path) -> Iterator[PrometheusServer]:
    if prometheus_binary() is None:
        pytest.skip("the prometheus binary is missing: run scripts/install-prometheus.sh as root")
    server = start_prometheus(targets=[f"127.0.0.1:{exporter.port}"], data_dir=tmp_path / "prometheus")
    try:
        yield server
    finally:
        server.stop()
