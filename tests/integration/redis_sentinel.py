"""A Redis Sentinel group of this test run: a primary, one replica and three Sentinels on free
loopback ports, in a temporary directory of their own, stopped by pid.

The Sentinels monitor the primary as ``SERVICE`` with a quorum of 2 and decide quickly
(``down-after-milliseconds`` 1000), so that a SIGKILLed primary is replaced within seconds.
``SentinelUnsupported`` when this machine's redis-server cannot run as a Sentinel: the tests skip
then (and fail in CI).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from redis import Redis

from tandem.workers.embedded import free_port, stop_process

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
SERVICE = "svc"
"""The name the Sentinels monitor the primary under."""
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000
START_SECONDS = 30.0


class SentinelUnsupported(RuntimeError):
    """No Sentinel group can be started here (what is missing is in the message)."""


class OwnSentinelGroup:
    """A primary, a replica of it and three Sentinels monitoring it, on 127.0.0.1; with
    ``password`` the data nodes require it, with ``sentinel_password`` the Sentinels require theirs."""

    def __init__(self, password: str | None = None, sentinel_password: str | None = None) -> None:
        self.password = password
        self.sentinel_password = sentinel_password
        self.primary_port = free_port()
        self.replica_port = free_port()
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.dir = Path(tempfile.mkdtemp(prefix="tandem-redis-sentinel-"))
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    def url(self, db: int = 0, scheme: str = "redis+sentinel") -> str:
        """tandem's Sentinel URL of the group's master, database ``db``."""
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        auth = f":{self.password}@" if self.password else ""
        query = f"?sentinel_password={self.sentinel_password}" if self.sentinel_password else ""
        return f"{scheme}://{auth}{hosts}/{SERVICE}/{db}{query}"

    def node(self, port: int) -> Redis:
        """A plain client of one server (data node or Sentinel), with its password."""
        secret = self.sentinel_password if port in self.sentinel_ports else self.password
        return Redis(host="127.0.0.1", port=port, password=secret, socket_timeout=5, socket_connect_timeout=5)

    def master_port(self) -> int | None:
        """The master's port as the first Sentinel that answers says it (``None``: none answers)."""
        for port in self.sentinel_ports:
            try:
                address = self.node(port).execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
            except Exception:
                continue
            if address:
                return int(address[1])
        return None

    def agreed_master(self) -> int | None:
        """The master's port when every live Sentinel names the same one and that server says it is
        a master; ``None`` otherwise (a failover under way)."""
        named = set()
        for port in self.sentinel_ports:
            if self.processes[port].poll() is not None:
                continue
            try:
                address = self.node(port).execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
            except Exception:
                return None
            named.add(int(address[1]) if address else None)
        if len(named) != 1 or None in named:
            return None
        port = named.pop()
        try:
            role = self.node(port).execute_command("ROLE")
        except Exception:
            return None
        return port if role[0] in (b"master", "master") else None

    def start(self) -> OwnSentinelGroup:
        """Start the primary, the replica (waiting until it is in sync) and the Sentinels (waiting
        until each sees the replica and the two other Sentinels)."""
        if not os.path.exists(REDIS_SERVER):
            raise SentinelUnsupported(f"redis-server missing ({REDIS_SERVER})")
        self._server(self.primary_port)
        self._server(self.replica_port, "--replicaof", "127.0.0.1", str(self.primary_port))
        self._wait(self._replica_in_sync, "the replica to sync with the primary")
        for port in self.sentinel_ports:
            self._sentinel(port)
        self._wait(self._sentinels_ready, "the Sentinels to see the replica and each other")
        return self

    def start_pair(self) -> OwnSentinelGroup:
        """Start the primary and its replica only (waiting until it is in sync), no Sentinels: for
        tests of replication itself (``WAIT``)."""
        if not os.path.exists(REDIS_SERVER):
            raise SentinelUnsupported(f"redis-server missing ({REDIS_SERVER})")
        self._server(self.primary_port)
        self._server(self.replica_port, "--replicaof", "127.0.0.1", str(self.primary_port))
        self._wait(self._replica_in_sync, "the replica to sync with the primary")
        return self

    def pause(self, port: int) -> None:
        """SIGSTOP one server (a replica so paused acknowledges nothing)."""
        os.kill(self.processes[port].pid, signal.SIGSTOP)

    def resume(self, port: int) -> None:
        """SIGCONT a server ``pause`` stopped."""
        os.kill(self.processes[port].pid, signal.SIGCONT)

    def _server(self, port: int, *extra: str) -> None:
        auth = ["--requirepass", self.password, "--masterauth", self.password] if self.password else []
        cmd = [
            REDIS_SERVER,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.dir),
            "--dbfilename", f"dump-{port}.rdb",
            "--logfile", str(self.dir / f"redis-{port}.log"),
            *auth,
            *extra,
        ]  # fmt: skip
        self._spawn(port, cmd)

    def _sentinel(self, port: int) -> None:
        conf = self.dir / f"sentinel-{port}.conf"
        conf.write_text(
            f"port {port}\n"
            "bind 127.0.0.1\n"
            f"dir {self.dir}\n"
            f"logfile {self.dir / f'sentinel-{port}.log'}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary_port} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
            + (f"sentinel auth-pass {SERVICE} {self.password}\n" if self.password else "")
            + (
                f"requirepass {self.sentinel_password}\nsentinel sentinel-pass {self.sentinel_password}\n"
                if self.sentinel_password
                else ""
            )
        )
        self._spawn(port, [REDIS_SERVER, str(conf), "--sentinel"])

    def _spawn(self, port: int, cmd: list[str]) -> None:
        process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.processes[port] = process

        def answers() -> bool:
            if process.poll() is not None:
                error = (process.stderr.read() if process.stderr else b"").decode(errors="replace")
                self.stop()
                raise SentinelUnsupported(f"{' '.join(cmd[:2])} did not start: {error[-300:]}")
            try:
                return bool(self.node(port).ping())
            except Exception:
                return False

        self._wait(answers, f"the server on port {port} to answer")

    def _replica_in_sync(self) -> bool:
        info = self.node(self.replica_port).info("replication")
        return info.get("master_link_status") == "up"

    def _sentinels_ready(self) -> bool:
        for port in self.sentinel_ports:
            state = self.node(port).execute_command("SENTINEL", "MASTER", SERVICE)
            fields = dict(zip(state[::2], state[1::2], strict=True)) if isinstance(state, list) else state
            fields = {_text(k): _text(v) for k, v in fields.items()}
            if fields.get("num-slaves") != "1" or fields.get("num-other-sentinels") != "2":
                return False
        return True

    def _wait(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                if ready():
                    return
            except SentinelUnsupported:
                raise
            except Exception:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"timed out waiting for {what} (logs in {self.dir})")
            time.sleep(0.05)

    def kill(self, port: int) -> None:
        """SIGKILL one server."""
        process = self.processes[port]
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)

    def restart(self, port: int) -> None:
        """Start again a data node that was killed, as it was configured (no data: persistence is
        off). The Sentinels make an old master a replica of the master they promoted."""
        self._server(port)

    def stop(self) -> None:
        """Stop every server by pid and remove their files."""
        for process in self.processes.values():
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)  # a paused one would not hear SIGTERM
            stop_process(process, 10)
        shutil.rmtree(self.dir, ignore_errors=True)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
