"""Pods without a cluster, for ``tests/integration/test_breaking_image.py``.

- ``build_image``: the Dockerfile read and carried out in a fresh virtual environment: its
  ``COPY`` lines (what ``docker build`` sends, less ``.dockerignore``'s patterns), its ``ENV`` and its
  install line (pip's cache instead of ``--no-cache-dir``: the same packages, without a download
  per run), once per test session (``tests/integration/installs.py``: test_image.py makes the same).
- ``Pods``: each process started as a pod of the manifests starts: a mount namespace of its own
  whose root file system is read-only, with an empty tmpfs on ``/tmp`` (the pod's emptyDir) and an
  ``/etc/hosts`` that resolves the Service names the manifests' URLs use (``tandem-redis``,
  ``redis``, a collector) to a loopback address of the test's own. The network is the machine's:
  pods that would each own port 9808 get a free port each.
- ``DataStore``: a ``redis-server`` of the test's own on that address, port 6379 (the port the
  URLs name), with the append-only file on, as the quick start and compose run it.
"""

from __future__ import annotations

import os
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path

from redis import Redis

from tests.integration import installs
from tests.integration.otlp_receiver import OtlpReceiver

REPO = Path(__file__).resolve().parents[2]
WORK_ROOT = Path("/var/tmp")
"""Where the image and the logs live: not under /tmp, which each pod covers with its own tmpfs,
and on the root file system, which each pod sees read-only."""
POD = (
    'mount --bind "$1" /etc/hosts && mount -o remount,bind,ro /etc/hosts && '
    "mount -o remount,bind,ro / && mount -t tmpfs -o size=512m,mode=1777 tmpfs /tmp && "
    'shift && exec "$@"'
)


@dataclass
class Image:
    """The image's file system: ``app`` (its WORKDIR) and the environment its install made."""

    app: Path
    venv: Path
    env: dict[str, str]
    cmd: list[str]

    def environment(self, extra: Mapping[str, str]) -> dict[str, str]:
        """A container's environment: the image's ``ENV``, its ``PATH`` and ``HOME``, then ``extra``."""
        return {
            "PATH": f"{self.venv}/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/home/tandem",
            **self.env,
            **extra,
        }


def build_image(dest: Path) -> Image:
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11", text, flags=re.M), "the image is not Python 3.11's"
    env = dict(
        pair.split("=", 1) for line in re.findall(r"^ENV (.+)$", text, flags=re.M) for pair in line.split()
    )
    (workdir,) = re.findall(r"^WORKDIR (\S+)$", text, flags=re.M)
    assert workdir == "/app"
    app = dest / "app"
    app.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    for line in re.findall(r"^COPY (.+)$", text, flags=re.M):
        *sources, target = line.split()
        for source in sources:
            where = app / (source if target == "./" else target)
            if (REPO / source).is_dir():
                shutil.copytree(REPO / source, where, symlinks=True, ignore=ignore)
            else:
                shutil.copy2(REPO / source, where)
    (run,) = re.findall(r"^RUN (.+)$", text, flags=re.M)
    install = next(part for part in run.split("&&") if "pip install" in part)
    words = [w for w in shlex.split(install) if w != "--no-cache-dir"]
    assert words[:2] == ["pip", "install"], words
    # once per test session for these files and this line (test_image.py runs the same)
    installed, done = installs.image(app, words[2:])
    assert done.returncode == 0, f"the Dockerfile's install line failed: {done.log[-6000:]}"
    (cmd,) = re.findall(r"^CMD (\[.+\])$", text, flags=re.M)
    import json

    return Image(installed, done.venv, env, json.loads(cmd))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def loopback_address() -> str:
    """A 127.x.y.z address with nothing on 6379 or 4318: the test's own datastore's and collector's."""
    for _ in range(100):
        address = f"127.{random.randint(100, 250)}.{random.randint(1, 250)}.{random.randint(2, 250)}"
        try:
            for port in (6379, 4318):
                with socket.socket() as s:
                    s.bind((address, port))
        except OSError:
            continue
        return address
    raise RuntimeError("no free loopback address for the test's Redis")


class DataStore:
    """``redis-server`` on ``address:6379`` (AOF on, ``everysec``), with a password if given."""

    def __init__(self, address: str, workdir: Path, password: str | None = None) -> None:
        self.address, self.password = address, password
        self.dir = workdir / f"redis-{address}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def client(self) -> Redis:
        return Redis(host=self.address, port=6379, password=self.password, socket_timeout=5)

    def start(self) -> DataStore:
        cmd = ["redis-server", "--bind", self.address, "--port", "6379", "--save", "", "--appendonly", "yes"]
        cmd += ["--appendfsync", "everysec", "--dir", str(self.dir), "--loglevel", "warning"]
        cmd += ["--requirepass", self.password] if self.password else []
        self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.client.ping():
                    return self
            except Exception:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on {self.address}:6379") from None
            time.sleep(0.05)

    def pause(self) -> None:
        """SIGSTOP: connections open, no answer (a hung Redis, the harder case for a probe)."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.terminate()
            self.process.wait(30)


class Collector(OtlpReceiver):
    """The OTLP receiver of the tests, listening at ``address:4318`` (a collector's port)."""

    def __init__(self, address: str) -> None:
        super().__init__()
        handler = self.server.RequestHandlerClass
        self.server.server_close()
        self.server = ThreadingHTTPServer((address, 4318), handler)
        import threading

        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@dataclass
class Pods:
    """Processes started as pods; each is stopped by its pid (``stop``)."""

    image: Image
    workdir: Path
    hosts: Mapping[str, str]
    started: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    stopped: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.hosts_file = self.workdir / f"hosts-{len(self.hosts)}-{id(self)}"
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost"]
        lines += [f"{address} {name}" for name, address in self.hosts.items()]
        self.hosts_file.write_text("\n".join(lines) + "\n")

    def command(self, cmd: Sequence[str]) -> list[str]:
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            POD,
            "pod",
            str(self.hosts_file),
            *cmd,
        ]

    def log(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def start(self, name: str, cmd: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        """Start ``cmd`` as the pod ``name``: its pid is the command's (``unshare`` and ``sh`` exec)."""
        with self.log(name).open("wb") as log:
            proc = subprocess.Popen(
                self.command(cmd), env=self.image.environment(env), cwd=self.image.app, stdout=log, stderr=log
            )
        self.started[name] = proc
        return proc

    def run(
        self, cmd: Sequence[str], env: Mapping[str, str], timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl exec`` into a pod: ``cmd`` with the pod's environment, to its end."""
        return subprocess.run(
            self.command(cmd), env=self.image.environment(env), cwd=self.image.app, capture_output=True,
            text=True, timeout=timeout,
        )  # fmt: skip

    def exited(self) -> list[str]:
        """The pods whose process ended by itself, with the end of its log."""
        return [
            f"{name} (pid {proc.pid}) exited with {proc.returncode}: {self.log(name).read_text()[-2000:]}"
            for name, proc in self.started.items()
            if proc.poll() is not None and proc.pid not in self.stopped
        ]

    def stop(self, name: str, sig: int = signal.SIGTERM, wait: float = 60) -> int:
        """Stop one pod as the kubelet does (SIGTERM, then SIGKILL after ``wait``); its exit code."""
        proc = self.started[name]
        self.stopped.add(proc.pid)
        if proc.poll() is None:
            os.kill(proc.pid, sig)
            try:
                proc.wait(wait)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(30)
        return int(proc.returncode)

    def stop_all(self) -> list[str]:
        """Stop every pod; what had exited by itself before."""
        gone = self.exited()
        for name in list(self.started):
            self.stop(name)
        return gone
