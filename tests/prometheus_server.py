"""A real Prometheus server for the canary-analysis tests, and the exporter it scrapes.

``prometheus`` starts Debian's ``prometheus`` binary (``scripts/install-prometheus.sh``; never the
packaged service) on a free loopback port with a generated configuration: one job scraping the
test's own ``exporter`` (the business-signal contract, served by prometheus-client from this
process) every second, storage in the test's temporary directory. Without the binary the tests
that use it skip, saying how to install it.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import start_http_server

from gates.canary.contract import OutcomeExporter

SCRAPE_INTERVAL_S = 1.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Exporter:
    """The contract's metrics on a private registry, served at ``http://127.0.0.1:{port}/metrics``."""

    signals: OutcomeExporter
    port: int


@dataclass
class PrometheusServer:
    url: str
    process: subprocess.Popen[bytes]
    target: str

    def wait_for_scrapes(self, count: int = 2) -> None:
        """Let Prometheus take ``count`` more scrapes of the exporter (waiting until it has taken one)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            body = httpx.get(f"{self.url}/api/v1/query", params={"query": f'up{{instance="{self.target}"}}'}).json()
            if body["data"]["result"] and body["data"]["result"][0]["value"][1] == "1":
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"Prometheus never scraped {self.target}")
        time.sleep(count * SCRAPE_INTERVAL_S + 0.3)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


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
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the prometheus binary is missing: run scripts/install-prometheus.sh as root")
    target = f"127.0.0.1:{exporter.port}"
    config: dict[str, Any] = {
        "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S:g}s", "evaluation_interval": f"{SCRAPE_INTERVAL_S:g}s"},
        "scrape_configs": [{"job_name": "optgate-signals", "static_configs": [{"targets": [target]}]}],
    }
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config_file}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = PrometheusServer(f"http://127.0.0.1:{port}", process, target)
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise AssertionError(
                    f"prometheus exited ({process.returncode}): {(tmp_path / 'prometheus.log').read_text()}"
                )
            try:
                if httpx.get(f"{server.url}/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("prometheus did not become ready in 30 s")
            time.sleep(0.1)
        yield server
    finally:
        server.stop()
        log.close()
