"""A Prometheus server of OptGate's own: Debian's ``prometheus`` binary on a free loopback port.

It scrapes the given targets every ``scrape_interval_s`` and keeps its data in a folder of the
caller's; the packaged service is never used (``scripts/install-prometheus.sh`` installs the
binary). The demo watches its canary with one; the canary-analysis tests start one per test.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from evaluators.processes import find_free_port

SCRAPE_INTERVAL_S = 1.0
READY_TIMEOUT_S = 30.0


def prometheus_binary() -> str | None:
    """The ``prometheus`` binary on PATH, or None when it is not installed."""
    return shutil.which("prometheus")


@dataclass
class PrometheusServer:
    """A running server: its base URL, its process and what it scrapes."""

    url: str
    process: subprocess.Popen[bytes]
    targets: list[str]
    log_path: Path
    scrape_interval_s: float = SCRAPE_INTERVAL_S

    @property
    def target(self) -> str:
        return self.targets[0]

    def wait_for_scrapes(self, count: int = 2, target: str | None = None) -> None:
        """Let it take ``count`` more scrapes of ``target`` (the first target by default), waiting
        until it has scraped that target once."""
        target = target or self.target
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            body = httpx.get(f"{self.url}/api/v1/query", params={"query": f'up{{instance="{target}"}}'}).json()
            if body["data"]["result"] and body["data"]["result"][0]["value"][1] == "1":
                break
            time.sleep(0.2)
        else:
            raise RuntimeError(f"Prometheus never scraped {target}")
        time.sleep(count * self.scrape_interval_s + 0.3)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_prometheus(
    *, targets: list[str], data_dir: Path, scrape_interval_s: float = SCRAPE_INTERVAL_S, port: int | None = None
) -> PrometheusServer:
    """Start a server scraping ``targets`` (``host:port``) and return once it answers ``/-/ready``.

    Raises ``RuntimeError`` when the binary is missing, exits or is not ready in time (with its log).
    """
    binary = prometheus_binary()
    if binary is None:
        raise RuntimeError("the prometheus binary is missing: run scripts/install-prometheus.sh as root")
    data_dir.mkdir(parents=True, exist_ok=True)
    interval = f"{scrape_interval_s:g}s"
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [{"job_name": "optgate-signals", "static_configs": [{"targets": targets}]}],
    }
    config_file = data_dir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    port = port or find_free_port()
    log_path = data_dir / "prometheus.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config_file}",
                f"--storage.tsdb.path={data_dir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = PrometheusServer(f"http://127.0.0.1:{port}", process, list(targets), log_path, scrape_interval_s)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"prometheus exited ({process.returncode}): {log_path.read_text()[-2000:]}")
        try:
            if httpx.get(f"{server.url}/-/ready", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"prometheus did not become ready in {READY_TIMEOUT_S:g} s")
        time.sleep(0.1)
