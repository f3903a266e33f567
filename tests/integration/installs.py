"""Fresh installs made once per test session and shared by the modules that need the same one.

``test_install``, ``test_breaking_install``, ``test_image`` and ``test_breaking_image`` each run
documented install lines (the README's and ``docs/``'s, the Dockerfile's) in fresh virtual
environments, many of them the same lines. Each distinct install is made here once per session, by
whichever module asks first; a module that asks while another process makes it waits on its lock
(``make test`` runs modules in several xdist processes) and then uses the same environment.

- An entry is keyed by content: the lines of the work tree it installs from (``checkout``: a hash
  of every file git would commit, as they are now) and the line itself. An entry records its
  outcome (``result.json``: exit status, output, ``pip check``) beside its environment, failures
  too: every module that asks sees the same failure.
- The environments are read-only to the tests: one that must change an environment (``pip
  uninstall``), or must be the only user of it (a test that looks for the processes still running
  from it), works on ``private_copy``.
- The session's folder is under ``/var/tmp``, not ``/tmp``: the image's processes run in a mount
  namespace whose ``/tmp`` is an empty tmpfs. ``tests/conftest.py`` names it for the session's
  processes (``start_session``) and removes it when the session ends (``end_session``), and the
  folder of a session whose pytest is gone at the next start.
- pip reads the index through ``index_view``: the index's pages without the wheels it would skip
  here (a quarter of the files: the same install for a third less CPU).
- pip does not byte-compile (``PIP_COMPILE=0``; ``PIP_NO_COMPILE=1`` compiles: pip reads it as
  ``--no-compile`` set to true, which sets ``compile`` true): what is installed is the same, Python
  compiles what it imports into the environment on first use. The image's install compiles, as
  ``docker build`` does: its processes run with ``PYTHONDONTWRITEBYTECODE`` on a read-only root and
  would compile LiteLLM again in every process.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.integration.index_view import IndexView, supported_tags, upstream_index

ROOT = Path(__file__).resolve().parents[2]
SESSION_VARIABLE = "TANDEM_TEST_INSTALLS"
"""The session's folder, set by the first pytest process (xdist's workers inherit it)."""
SESSIONS = Path("/var/tmp")
PREFIX = "tandem-test-installs-"
INSTALL_TIMEOUT = 1200.0
"""One install on a loaded 2-core machine; a bound, not an expectation."""
_owned: Path | None = None
_view: IndexView | None = None
_view_lock = threading.Lock()


# -- the session's folder ----------------------------------------------------------------------------


def start_session() -> None:
    """In the session's first process (not xdist's workers): name the session's folder for every
    process of the session, and remove the folders of sessions whose pytest has ended."""
    global _owned
    if os.environ.get(SESSION_VARIABLE):  # a session around this one named it (it removes it)
        return
    for old in SESSIONS.glob(f"{PREFIX}*"):
        pid = old.name[len(PREFIX) :].split("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            remove_tree(old)
    _owned = SESSIONS / f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    os.environ[SESSION_VARIABLE] = str(_owned)


def end_session() -> None:
    """Remove the session's folder (in the background: ten environments are some 200,000 files)."""
    if _owned is not None and _owned.exists():
        remove_tree(_owned)


def session_root() -> Path:
    """The session's folder (made on first use)."""
    if not os.environ.get(SESSION_VARIABLE):  # no tests/conftest.py hook ran: this process owns it
        start_session()
    root = Path(os.environ[SESSION_VARIABLE])
    root.mkdir(parents=True, exist_ok=True)
    return root


def remove_tree(path: Path) -> None:
    """Remove ``path`` by a process of its own that nothing waits for; renamed first, so nothing
    reads it half-removed (a folder being removed, by a process that may have ended first, is
    removed again as it is)."""
    doomed = path
    if ".removing-" not in path.name:
        doomed = path.with_name(f"{path.name}.removing-{uuid.uuid4().hex[:6]}")
        try:
            path.rename(doomed)
        except OSError:
            return
    subprocess.Popen(
        ["rm", "-rf", str(doomed)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


@contextmanager
def _locked(entry: Path) -> Iterator[None]:
    """``entry``'s lock, held across the session's processes and threads (one open file each)."""
    with open(entry.with_name(entry.name + ".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _digest(parts: Iterator[bytes]) -> str:
    sha = hashlib.sha256()
    for part in parts:
        sha.update(len(part).to_bytes(8, "big") + part)
    return sha.hexdigest()[:16]


def tree_key(folder: Path) -> str:
    """A hash of every file under ``folder``: its path, kind, executable bit and content (a link's
    target)."""

    def parts() -> Iterator[bytes]:
        for path in sorted(folder.rglob("*")):
            yield str(path.relative_to(folder)).encode()
            if path.is_symlink():
                yield b"link:" + os.readlink(path).encode()
            elif path.is_file():
                yield b"x" if path.stat().st_mode & stat.S_IXUSR else b"-"
                yield path.read_bytes()

    return _digest(parts())


# -- the work tree, as a git repository of its own --------------------------------------------------


@dataclass(frozen=True)
class Checkout:
    """A clone of this repository holding the work tree as it is (tracked and new files, not
    ignored ones), its uncommitted changes committed on top of ``HEAD``: the README's lines run in
    it, and its git line installs from it."""

    path: Path
    commit: str
    key: str


def _work_tree_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    names = sorted(set(filter(None, listed.split("\0"))))
    return [n for n in names if (ROOT / n).is_symlink() or (ROOT / n).exists()]  # not deleted, unstaged


def _work_tree_key(names: list[str]) -> str:
    def parts() -> Iterator[bytes]:
        for name in names:
            path = ROOT / name
            yield name.encode()
            if path.is_symlink():
                yield b"link:" + os.readlink(path).encode()
            else:
                yield b"x" if path.stat().st_mode & stat.S_IXUSR else b"-"
                yield path.read_bytes()

    return _digest(parts())


def _git(*args: str, cwd: Path) -> str:
    git = ["git", "-c", "user.name=tandem tests", "-c", "user.email=tests@example.invalid"]
    done = subprocess.run([*git, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"git {' '.join(args)} in {cwd} failed:\n{done.stdout}{done.stderr}"
    return done.stdout


def checkout() -> Checkout:
    """The session's clone of the work tree as it is now (made once per distinct content)."""
    names = _work_tree_files()
    key = _work_tree_key(names)
    entry = session_root() / f"checkout-{key}"
    with _locked(entry):
        if not (entry / "commit").exists():
            shutil.rmtree(entry, ignore_errors=True)
            clone = entry / "clone"
            head = _git("rev-parse", "HEAD", cwd=ROOT).strip()
            _git("clone", "--quiet", "--no-hardlinks", "--no-checkout", str(ROOT), str(clone), cwd=ROOT)
            _git("checkout", "--quiet", "--detach", head, cwd=clone)
            for gone in set(_git("ls-files", "-z", cwd=clone).split("\0")) - {"", *names}:
                (clone / gone).unlink()
            for name in names:
                target = clone / name
                target.parent.mkdir(parents=True, exist_ok=True)
                if target.is_symlink() or target.is_file():
                    target.unlink()
                shutil.copy2(ROOT / name, target, follow_symlinks=False)
            _git("add", "-A", cwd=clone)
            if _git("status", "--porcelain", cwd=clone).strip():
                _git(
                    "commit", "--quiet", "-m", f"the work tree under test (uncommitted, on {head})", cwd=clone
                )
            (entry / "commit").write_text(_git("rev-parse", "HEAD", cwd=clone).strip())
    return Checkout(entry / "clone", (entry / "commit").read_text(), key)


# -- installs ---------------------------------------------------------------------------------------


@dataclass
class Install:
    """One install line run in a fresh virtual environment, and what it gave."""

    line: str
    """As the docs (or the Dockerfile) write it."""
    venv: Path
    cwd: Path
    returncode: int
    log: str
    check_returncode: int | None
    """``pip check``'s exit status after an install that succeeded (None for a build line)."""
    check: str
    seconds: float

    def bin(self, name: str) -> Path:
        return self.venv / "bin" / name


def shell_env(venv: Path, *, compile_bytecode: bool = False) -> dict[str, str]:
    """A user's shell with ``venv`` activated: this machine's settings (pip's index and cache among
    them), none of the tests' (``PYTHON*``, ``TANDEM_*``) or of another environment."""
    drop = (
        "PYTHON",
        "TANDEM_",
        "VIRTUAL_ENV",
        "PIP_REQUIRE_VIRTUALENV",
        "PIP_USER",
        "PIP_NO_COMPILE",
        "PIP_COMPILE",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
        VIRTUAL_ENV=str(venv),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_PROGRESS_BAR="off",
    )
    if not compile_bytecode:  # not PIP_NO_COMPILE=1: pip reads that as --no-compile=true, i.e. compile
        env["PIP_COMPILE"] = "0"
    return env


def _slug(line: str) -> str:
    words = re.findall(r"[a-z0-9]+", line.lower().removeprefix("pip "))
    return "-".join(w for w in words if w not in {"whl", "py3", "none", "any"})[:40]


def install(
    line: str,
    *,
    cwd: Path,
    key: str,
    command: str | None = None,
    compile_bytecode: bool = False,
) -> Install:
    """``line`` run once per session in a fresh virtual environment, from ``cwd``, then ``pip
    check`` (after an install line); the same outcome to every caller after that.

    ``key`` names the content ``cwd`` holds (what else the line's outcome depends on); ``command``
    is what the shell runs if not the line itself (the line with a placeholder filled in)."""
    name = f"{_slug(line)}-{_digest(iter([key.encode(), line.encode(), bytes([compile_bytecode])]))}"
    entry = session_root() / name
    result = entry / "result.json"
    with _locked(entry):
        if not result.exists():
            shutil.rmtree(entry, ignore_errors=True)
            entry.mkdir()
            made = _make(line, command or line, entry / "venv", cwd, compile_bytecode)
            result.write_text(json.dumps(asdict(made), default=str))
    data = json.loads(result.read_text())
    return Install(**{**data, "venv": Path(data["venv"]), "cwd": Path(data["cwd"])})


def _make(line: str, command: str, venv: Path, cwd: Path, compile_bytecode: bool) -> Install:
    started = time.monotonic()
    fresh_venv(venv)
    env = pip_env(venv, compile_bytecode=compile_bytecode)
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
        check=False,
    )
    check_code, check = None, ""
    if done.returncode == 0 and line.startswith("pip install "):
        checked = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "check"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        check_code, check = checked.returncode, checked.stdout + checked.stderr
    log = done.stdout + done.stderr
    return Install(line, venv, cwd, done.returncode, log, check_code, check, time.monotonic() - started)


def image(context: Path, args: list[str]) -> tuple[Path, Install]:
    """The image without Docker: ``pip install *args`` (the Dockerfile's install line) run once per
    session in a fresh environment, from a copy of ``context`` (what the Dockerfile's ``COPY``
    lines put in its ``WORKDIR``, laid out by the caller), byte-compiled as ``docker build`` does.
    Returns that ``WORKDIR`` (the copy, as the install left it) and the install."""
    key = tree_key(context)
    entry = session_root() / f"image-{key}"
    workdir = entry / "app"
    with _locked(entry):
        if not (entry / "copied").exists():
            shutil.rmtree(entry, ignore_errors=True)
            shutil.copytree(context, workdir, symlinks=True)
            (entry / "copied").touch()
    line = shlex.join(["pip", "install", *args])
    return workdir, install(line, cwd=workdir, key=key, compile_bytecode=True)


def fresh_venv(dest: Path) -> Path:
    """A new virtual environment at ``dest``, as ``python -m venv`` makes it (with its pip): a copy
    of one made once per session, its paths rewritten (4 s of CPU less per environment)."""
    template = session_root() / "fresh-venv"
    with _locked(template):
        if not (template / "made").exists():
            shutil.rmtree(template, ignore_errors=True)
            subprocess.run(
                [sys.executable, "-m", "venv", str(template / "venv")],
                capture_output=True,
                timeout=300,
                check=True,
            )
            (template / "made").touch()
    return private_copy(template / "venv", dest, links=False)


def pip_env(venv: Path, *, compile_bytecode: bool = False) -> dict[str, str]:
    """``shell_env`` for a pip that installs: the index read through this process's ``index_view``."""
    return {**shell_env(venv, compile_bytecode=compile_bytecode), "PIP_INDEX_URL": index_view(venv).url}


def index_view(venv: Path) -> IndexView:
    """This process's view of the index (``index_view``), for the pip of ``venv``'s Python (which
    tags it installs: read once per session, like the upstream index's address)."""
    global _view
    with _view_lock:
        if _view is None:
            folder = session_root() / "index"
            with _locked(folder):
                folder.mkdir(exist_ok=True)
                if not (folder / "tags.json").exists():
                    (folder / "upstream").write_text(upstream_index(venv / "bin" / "python"))
                    tags = supported_tags(venv / "bin" / "python")
                    (folder / "tags.json").write_text(json.dumps(tags))
            tags = json.loads((folder / "tags.json").read_text())
            _view = IndexView((folder / "upstream").read_text(), tags, folder / "pages")
        return _view


# -- an environment of a test's own ----------------------------------------------------------------


def private_copy(venv: Path, dest: Path, *, links: bool = True) -> Path:
    """A copy of ``venv`` at ``dest`` that a test may change or run alone, its scripts in ``bin/``
    (and ``pyvenv.cfg``) rewritten to name ``dest``. With ``links``, the files are hard links:
    removing or replacing one (pip, Python writing bytecode) leaves the shared environment as it
    is, and nothing here writes a file in place."""
    copied = subprocess.run(
        ["cp", "-al" if links else "-a", str(venv), str(dest)], capture_output=True, timeout=600, check=False
    )
    if copied.returncode != 0:  # hard links across file systems: a plain copy
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(venv, dest, symlinks=True)
    old, new = str(venv).encode(), str(dest).encode()
    for script in [*(dest / "bin").iterdir(), dest / "pyvenv.cfg"]:
        if script.is_symlink() or not script.is_file():
            continue
        text = script.read_bytes()
        if old in text:
            fresh = script.with_name(script.name + ".rewritten")
            fresh.write_bytes(text.replace(old, new))
            fresh.chmod(script.stat().st_mode)
            fresh.replace(script)  # a new file: the shared one keeps its link
    return dest
