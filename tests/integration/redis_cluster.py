"""A Redis Cluster of this test run: three ``redis-server --cluster-enabled yes`` masters on free
ports (with ``replicas`` > 0, that many replicas of each), joined by ``redis-cli --cluster
create``, stopped by pid.

Persistence is off, but each node's ``nodes-<port>.conf`` stays in the cluster's directory: a
node SIGKILLed (``kill``) and started again (``restart``) rejoins the cluster with no data, as a
replica of the replica promoted in its place.

``ClusterUnsupported`` when this machine's redis-server cannot run in cluster mode or redis-cli is
missing: the tests skip then (and fail in CI).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from redis import Redis
from redis.crc import key_slot

from tandem.broker_config.job_redis import cluster_info
from tandem.workers.embedded import free_port, port_taken, redis_answers, stop_process

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


class PortTaken(RuntimeError):
    """A node's port (or its bus port) was bound by another process between its pick and the node's
    start (tests on other xdist workers pick free ports too)."""


PORT_ATTEMPTS = 5
"""Ports tried for one node before giving up."""


class OwnRedisCluster:
    """``masters`` cluster-enabled redis-servers on 127.0.0.1 and ``replicas`` replicas of each,
    one cluster (``url``)."""

    def __init__(self, masters: int = 3, node_timeout_ms: int = 1000, replicas: int = 0) -> None:
        self.ports = [_port_with_free_bus() for _ in range(masters * (1 + replicas))]
        self.replicas = replicas
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
        for n, port in enumerate(self.ports):
            for _attempt in range(PORT_ATTEMPTS):
                try:
                    self._start_node(port, timeout)
                    break
                except PortTaken:  # another process bound it since it was picked: take another
                    port = self.ports[n] = _port_with_free_bus()
            else:
                self.stop()
                raise RuntimeError(f"no free port for a cluster node after {PORT_ATTEMPTS} tries")
        create = subprocess.run(
            [
                REDIS_CLI,
                "--cluster",
                "create",
                *self.addresses,
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ],
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
        while not (all(self.state(p) == "ok" for p in self.ports) and self._replicas_in_sync()):
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the test Redis Cluster on {self.ports} did not reach cluster_state:ok")
            time.sleep(0.1)
        return self

    def _replicas_in_sync(self) -> bool:
        """Every master has its ``replicas`` replicas, each linked and in sync."""
        try:
            roles = self.roles()
            for port, role in roles.items():
                info = self.node(port).info("replication")
                if role == "master" and int(info.get("connected_slaves", 0)) < self.replicas:
                    return False
                if role == "replica" and info.get("master_link_status") != "up":
                    return False
        except Exception:
            return False
        return True

    def roles(self) -> dict[int, str]:
        """``master`` or ``replica`` for each live node, as the first live node's ``CLUSTER NODES``
        says (a failed node is left out)."""
        for port in self.live():
            try:
                nodes = self.node(port).execute_command("CLUSTER NODES")  # parsed by redis-py
            except Exception:
                continue
            found = {}
            for address, fields in nodes.items():
                flags = str(fields["flags"]).split(",")
                if {"fail", "fail?", "noaddr", "handshake"} & set(flags):
                    continue
                found[int(address.rpartition(":")[2])] = "master" if "master" in flags else "replica"
            return found
        return {}

    def live(self) -> list[int]:
        """The ports of the nodes whose process runs."""
        return [p for p, process in self.processes.items() if process.poll() is None]

    def master_of(self, key: str) -> int:
        """The port of the master serving ``key``'s slot (its hash tag honoured), as a live node's
        ``CLUSTER SLOTS`` says."""
        slot = key_slot(key.encode())
        for port in self.live():
            try:
                ranges = self.node(port).execute_command("CLUSTER SLOTS")
            except Exception:
                continue
            for start, end, master, *_ in ranges:
                if int(start) <= slot <= int(end):
                    return int(master[1])
        raise LookupError(f"no live node of {self.ports} says who serves slot {slot}")

    def replica_of(self, master_port: int) -> int:
        """The port of a replica of the master on ``master_port`` (``INFO replication``)."""
        info = self.node(master_port).info("replication")
        return int(info["slave0"]["port"])

    def slot_range(self, master_port: int) -> set[int]:
        """The slots the master on ``master_port`` serves."""
        ranges = self.node(master_port).execute_command("CLUSTER SLOTS")
        return {
            slot
            for start, end, master, *_ in ranges
            if int(master[1]) == master_port
            for slot in range(int(start), int(end) + 1)
        }

    def _start_node(self, port: int, timeout: float) -> None:
        log = os.path.join(self.dir, f"node-{port}.log")
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
            "--logfile", log,
        ]  # fmt: skip
        process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.processes[port] = process
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                del self.processes[port]
                if port_taken(log):
                    raise PortTaken(port)
                error = (process.stderr.read() if process.stderr else b"").decode(errors="replace")
                with contextlib.suppress(OSError), open(log, errors="replace") as said:
                    error += said.read()
                self.stop()
                raise ClusterUnsupported(f"redis-server --cluster-enabled yes did not start: {error[-300:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {port}")
            if redis_answers(f"redis://127.0.0.1:{port}/0", 1.0, pid=process.pid):  # not another's
                return
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

    def restart(self, port: int, timeout: float = 30.0) -> None:
        """Start again a node ``kill`` stopped, with its ``nodes-<port>.conf`` and no data: it
        rejoins the cluster (a replica of the master that took its slots)."""
        self._start_node(port, timeout)

    def flush(self) -> None:
        """Empty every master (the replicas follow)."""
        roles = self.roles() if self.replicas else dict.fromkeys(self.live(), "master")
        for port, role in roles.items():
            if role == "master":
                self.node(port).flushall()

    def stop(self) -> None:
        """Stop every node by pid and remove their files."""
        for process in self.processes.values():
            stop_process(process, 10)
        shutil.rmtree(self.dir, ignore_errors=True)
