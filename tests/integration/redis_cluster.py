"""A Redis Cluster of this test run: three ``redis-server --cluster-enabled yes`` masters on free
ports, joined by ``redis-cli --cluster create`` (no replicas), stopped by pid.

``ClusterUnsupported`` when this machine's redis-server cannot run in cluster mode or redis-cli is
missing: the tests skip then (and fail in CI).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from redis import Redis

from tandem.broker_config.job_redis import cluster_info
from tandem.workers.embedded import free_port, stop_process

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"


def _port_with_free_bus() -> int:
    """A free port whose cluster bus port (the port + 10000) is free too."""
    while True:
        port = free_port()
        if port + 10000 < 65536:
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            return port


class ClusterUnsupported(RuntimeError):
    """No Redis Cluster can be started here (what is missing is in the message)."""


class OwnRedisCluster:
    """``masters`` cluster-enabled redis-servers on 127.0.0.1, one cluster (``url``)."""

    def __init__(self, masters: int = 3, node_timeout_ms: int = 1000) -> None:
        self.ports = [_port_with_free_bus() for _ in range(masters)]
        self.node_timeout_ms = node_timeout_ms
        self.dir = tempfile.mkdtemp(prefix="tandem-redis-cluster-")
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """The job store's URL for this cluster (every node named)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports) + "/"

    @property
    def addresses(self) -> list[str]:
        """``127.0.0.1:<port>`` of every node."""
        return [f"127.0.0.1:{p}" for p in self.ports]

    def node(self, port: int) -> Redis:
        """A plain client of one node."""
        return Redis(host="127.0.0.1", port=port, socket_timeout=5)

    def nodes(self) -> list[Redis]:
        """A plain client of every node (for ``INFO``: each master's own commands and CPU)."""
        return [self.node(port) for port in self.ports]

    def start(self, timeout: float = 30.0) -> OwnRedisCluster:
        """Start the nodes, join them, wait until every node says ``cluster_state:ok``."""
        if not os.path.exists(REDIS_SERVER) or not os.path.exists(REDIS_CLI):
            raise ClusterUnsupported(f"redis-server or redis-cli missing ({REDIS_SERVER}, {REDIS_CLI})")
        for port in self.ports:
            self._start_node(port, timeout)
        create = subprocess.run(
            [REDIS_CLI, "--cluster", "create", *self.addresses, "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if create.returncode != 0:
            self.stop()
            raise ClusterUnsupported(
                f"redis-cli --cluster create failed: {create.stdout[-300:]} {create.stderr[-300:]}"
            )
        deadline = time.monotonic() + timeout
        while not all(self.state(p) == "ok" for p in self.ports):
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the test Redis Cluster on {self.ports} did not reach cluster_state:ok")
            time.sleep(0.1)
        return self

    def _start_node(self, port: int, timeout: float) -> None:
        cmd = [
            REDIS_SERVER,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--cluster-enabled", "yes",
            "--cluster-config-file", f"nodes-{port}.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--save", "",
            "--appendonly", "no",
            "--dir", self.dir,
            "--loglevel", "warning",
        ]  # fmt: skip
        process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.processes[port] = process
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                error = (process.stderr.read() if process.stderr else b"").decode(errors="replace")
                self.stop()
                raise ClusterUnsupported(f"redis-server --cluster-enabled yes did not start: {error[-300:]}")
            try:
                if self.node(port).ping():
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {port}")
            time.sleep(0.05)

    def state(self, port: int) -> str:
        """The node's ``cluster_state`` (``""`` when it does not answer)."""
        try:
            info = self.node(port).execute_command("CLUSTER INFO")
        except Exception:
            return ""
        return cluster_info(info).get("cluster_state", "")

    def kill(self, port: int) -> None:
        """SIGKILL one node."""
        process = self.processes[port]
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)

    def flush(self) -> None:
        """Empty every node."""
        for port in self.ports:
            if self.processes[port].poll() is None:
                self.node(port).flushall()

    def stop(self) -> None:
        """Stop every node by pid and remove their files."""
        for process in self.processes.values():
            stop_process(process, 10)
        shutil.rmtree(self.dir, ignore_errors=True)
