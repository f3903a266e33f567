"""The Redis ACL users of docs/security.md ("Redis ACL users"), on a redis-server of the test's own
with the ``default`` user off, as the page says: workers run as the worker user, and the whole
documented client surface runs as the client user: every ``tandem`` command, the readiness probe,
the Python client (``submit`` and ``JobHandle``, asyncio too, a cancel before any worker), and
``tandem api`` driven by ``tandem.Client``. The client user is refused what it must not do (a step
message on a role queue, a job's Celery result, broadcasts, administration); a step it pushes on
the intake queue is refused by the worker that takes it; a user lacking a permission a command
needs is told which, never that Redis does not answer. The ACL lines are read from the docs page,
so the page is what is tested. (A Redis of its own: the shared one keeps its ``default`` user.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kombu.exceptions import OperationalError
from redis import Redis
from redis.exceptions import NoPermissionError

from tandem import Client
from tandem.broker_config import Settings
from tandem.broker_config.acl_refusals import refused_error
from tandem.tasks.app import create_app
from tandem.workers import exit_codes
from tandem.workers.embedded import WorkerGroup
from tests.integration.chaos import OwnRedis
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _cluster_on
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_api import ApiProcess
from tests.integration.test_cli_exits import spawn, tandem
from tests.integration.tools import ARTIFACT_TEXT
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.md"
PASSWORDS = {"CLIENT_PASSWORD": "client-pw-0123456789", "WORKER_PASSWORD": "worker-pw-0123456789"}
ADMIN, ADMIN_PASSWORD = "tandem-test-admin", "admin-pw-0123456789"
"""The test's own administrator, made before the page's lines turn ``default`` off."""

ADD = [[{"name": "add", "args": {"a": 2, "b": 3}}]]
APPROVE = [[{"name": "notify", "args": {"to": "ops"}}]]
ASK = [[{"name": "book_trip", "args": {}}]]
REPORT = [[{"name": "report", "args": {}}]]
FOREVER = "NEVER_DONE: keep thinking"
"""A goal the mono model never delivers: the job runs until cancelled."""


def acl_lines() -> list[str]:
    """The ``ACL SETUSER`` lines of docs/security.md, with the test's passwords."""
    lines = [line.strip() for line in DOCS.read_text().splitlines() if line.strip().startswith("ACL SETUSER")]
    assert [line.split()[2] for line in lines] == ["tandem-client", "tandem-worker", "default"], lines
    for name, value in PASSWORDS.items():
        lines = [line.replace(name, value) for line in lines]
    return lines


def _url(server: OwnRedis, user: str, password: str) -> str:
    return server.base.replace("redis://", f"redis://{user}:{password}@") + "/0"


def _as(url: str) -> dict[str, str]:
    return {"TANDEM_BROKER_URL": url, "TANDEM_RESULT_BACKEND": url, "TANDEM_REDIS_URL": url}


@dataclass
class AclSetup:
    """Workers as the worker user, ``tandem api`` as the client user, and the settings of each."""

    server: OwnRedis
    cluster: Cluster
    workers: WorkerGroup
    admin: Redis
    client_url: str
    client_env: dict[str, str]
    worker_env: dict[str, str]
    api: ApiProcess

    def state(self, job_id: str) -> tuple[str, str | None]:
        """The job's state and pause kind, read as the administrator."""
        status = self.cluster.store.status(job_id)
        assert status is not None, f"job {job_id} has no record"
        return status.state, status.pause_kind

    def wait_state(self, job_id: str, state: str, pause_kind: str | None = None) -> None:
        """Wait until the job is in ``state`` (and ``pause_kind``); fail after ``EVENT_SECONDS``."""
        deadline = time.monotonic() + EVENT_SECONDS
        seen: tuple[str, str | None] | None = None
        while time.monotonic() < deadline:
            if self.cluster.store.status(job_id) is not None:
                seen = self.state(job_id)
                if seen[0] == state and (pause_kind is None or seen[1] == pause_kind):
                    return
            time.sleep(0.1)
        raise AssertionError(f"job {job_id} never reached {state} ({pause_kind}); last seen {seen}")


@pytest.fixture(scope="module")
def acl() -> Iterator[AclSetup]:
    server = OwnRedis(appendonly=False).start()
    api: ApiProcess | None = None
    hosts: Iterator[tuple[Cluster, OpenAIServer, OpenAIServer]] | None = None
    try:
        Redis.from_url(f"{server.base}/0").execute_command(
            "ACL", "SETUSER", ADMIN, "on", f">{ADMIN_PASSWORD}", "~*", "&*", "+@all"
        )
        admin_url = _url(server, ADMIN, ADMIN_PASSWORD)
        admin = Redis.from_url(admin_url)
        for line in acl_lines():
            assert admin.execute_command(*line.split()) in (b"OK", "OK", True), line
        hosts = _cluster_on(
            admin_url,
            TANDEM_TOOLKIT="tests.integration.tools:client_surface_toolkit",
            TANDEM_ACTOR_MAX_IN_FLIGHT="8",  # what `tandem hosts` shows
        )
        cluster, _, _ = next(hosts)
        worker_url = _url(server, "tandem-worker", PASSWORDS["WORKER_PASSWORD"])
        client_url = _url(server, "tandem-client", PASSWORDS["CLIENT_PASSWORD"])
        workers = cluster.start("thinker", "actor", "tools", **_as(worker_url))
        client_env = {**cluster.env, **_as(client_url)}
        api = ApiProcess(client_env)  # the API as the client user
        yield AclSetup(
            server, cluster, workers, admin, client_url, client_env, {**cluster.env, **_as(worker_url)}, api
        )
    finally:
        if api is not None:
            api.stop()
        if hosts is not None:
            hosts.close()  # stops the workers; every tandem key must have had a TTL
        server.stop()


def _ok(done: subprocess.CompletedProcess[str], code: int = exit_codes.OK) -> str:
    assert done.returncode == code, (
        f"exit {done.returncode}\nstdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}"
    )
    assert "Traceback" not in done.stderr and "NOPERM" not in done.stderr, done.stderr[-3000:]
    return done.stdout


def _submitted(proc: subprocess.Popen[str]) -> str:
    """The job id ``tandem run`` (started with ``spawn``) prints first."""
    assert proc.stdout is not None
    first = proc.stdout.readline()
    found = re.match(r"job (\S+) submitted", first)
    assert found, f"not a submission: {first!r} (stderr: {proc.stderr.read() if proc.stderr else ''})"
    return found.group(1)


def _ended(proc: subprocess.Popen[str], code: int) -> None:
    out, err = proc.communicate(timeout=RESULT_SECONDS)
    assert proc.returncode == code, f"exit {proc.returncode}\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
    assert "Traceback" not in err and "NOPERM" not in err, err[-3000:]


def test_the_readiness_probe_answers_for_the_client_and_the_worker_user(acl: AclSetup) -> None:
    for env in (acl.client_env, acl.worker_env):
        out = _ok(tandem("health", env=env))
        assert out.startswith("tandem health: ok: ") and "thinker 0, actor 0, tools 0)" in out, out


def test_every_command_runs_as_the_client_user(acl: AclSetup) -> None:
    env = acl.client_env
    run = _ok(
        tandem(
            "run", goal_with_plan("cli", ADD), "--reasoner", "mono", "--json", env=env, timeout=RESULT_SECONDS
        )
    )
    job_id = re.match(r"job (\S+) submitted", run).group(1)  # type: ignore[union-attr]
    assert '"status": "completed"' in run and '"deliverable": "mono plan done"' in run
    assert '"state": "completed"' in _ok(tandem("status", job_id, env=env))
    assert "mono plan done" in _ok(tandem("watch", job_id, "--no-tokens", env=env))
    [host] = json.loads(_ok(tandem("hosts", "--json", env=env)))
    assert host["limits"]["max_in_flight"] == 8 and host["in_flight"] == 0, host
    assert "in flight" in _ok(tandem("hosts", env=env))
    assert json.loads(_ok(tandem("tenants", "--json", env=env)))["tenants"] == []  # none configured

    fork = _ok(tandem("fork", job_id, "--round", "1", "--json", env=env, timeout=RESULT_SECONDS))
    assert f"forked from {job_id}" in fork and '"status": "completed"' in fork
    follow = _ok(tandem("follow-up", job_id, "and then?", "--json", env=env, timeout=RESULT_SECONDS))
    assert f"follows up on {job_id} (thread {job_id})" in follow and '"status": "completed"' in follow

    approving = spawn("run", goal_with_plan("approve", APPROVE), "--reasoner", "mono", "--no-tokens", env=env)
    approval_job = _submitted(approving)
    acl.wait_state(approval_job, "awaiting_approval", "approval")
    said = _ok(tandem("message", approval_job, "use the ops channel", "--key", "m1", env=env))
    assert f"job {approval_job}: message" in said
    assert "call 1: approved" in _ok(tandem("approve", approval_job, env=env))
    _ended(approving, exit_codes.OK)

    asking = spawn("run", goal_with_plan("ask", ASK), "--reasoner", "mono", "--no-tokens", env=env)
    asked_job = _submitted(asking)
    acl.wait_state(asked_job, "awaiting_approval", "question")
    assert 'answered {"city": "Oslo"}' in _ok(tandem("answer", asked_job, '{"city": "Oslo"}', env=env))
    _ended(asking, exit_codes.OK)

    forever = spawn("run", FOREVER, "--reasoner", "mono", "--max-rounds", "500", "--no-tokens", env=env)
    endless = _submitted(forever)
    acl.wait_state(endless, "running")
    assert "cancellation requested" in _ok(tandem("cancel", endless, env=env))
    _ended(forever, exit_codes.JOB_CANCELLED)
    resumed = _ok(tandem("resume", endless, "--detach", env=env))
    assert f"job {endless} resumed" in resumed
    acl.wait_state(endless, "running")
    _ok(tandem("cancel", endless, env=env))
    acl.wait_state(endless, "cancelled")


PYTHON_CLIENT = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from tandem.tasks import submit, job
    from tandem.tasks.app import app
    from tandem.client.submission import submit_async
    from tandem.tasks.app import create_app, settings

    add, approve, ask, report, forever = (json.loads(a) for a in sys.argv[1:6])
    out = {}

    def wait(handle, state, pause=None):
        deadline = time.monotonic() + 120
        while not (handle.status().state == state and handle.status().pause_kind == pause):
            assert time.monotonic() < deadline, handle.status()
            time.sleep(0.1)

    first = submit({"goal": add, "reasoner": "mono", "max_rounds": 4})
    out["result"] = first.result(timeout=300).status
    out["events"] = [e.type for e in first.events(timeout=30)]
    out["status"] = job(first.id).status().state
    out["fork"] = first.fork(1).result(timeout=300).status
    out["follow_up"] = first.follow_up("and then?").result(timeout=300).status

    approval = submit({"goal": approve, "reasoner": "mono"})
    wait(approval, "awaiting_approval", "approval")
    out["message"] = bool(approval.message("use the ops channel", idempotency_key="m1"))
    out["approved"] = [d.approve for d in approval.approve()]
    out["approval"] = approval.result(timeout=300).status

    asked = submit({"goal": ask, "reasoner": "mono"})
    wait(asked, "awaiting_approval", "question")
    out["answered"] = asked.answer({"city": "Oslo"})
    out["asked"] = asked.result(timeout=300).status

    reported = submit({"goal": report, "reasoner": "mono"})
    out["reported"] = reported.result(timeout=300).status
    [kept] = [e.artifact.handle for e in reported.events(timeout=30) if e.type == "tool_result"]
    out["artifact_chars"] = len(reported.artifact(kept))

    endless = submit({"goal": forever, "reasoner": "mono", "max_rounds": 500})
    wait(endless, "running")
    endless.cancel()
    out["cancelled"] = endless.result(timeout=300).status
    endless.resume()
    endless.cancel()
    wait(endless, "cancelled")
    out["resumed_then_cancelled"] = True

    async def aio():
        handle = await submit_async({"goal": add, "reasoner": "mono", "max_rounds": 4})
        result = await handle.aresult(timeout=300)
        kinds = [e.type async for e in handle.aevents(timeout=30)]
        return result.status, kinds[-1], (await handle.astatus()).state

    out["async"] = list(asyncio.run(aio()))

    # A cancel before any worker took the job: its intake message is never sent here, so the job
    # stays queued; the client ends it, and the workers store the Celery result it may not write.
    silent = create_app(settings)
    silent.send_task = lambda *args, **kwargs: None
    queued = submit({"goal": add, "reasoner": "mono"}, app=silent)
    queued._app = app
    queued.cancel()
    out["queued_cancel"] = queued.result(timeout=30).status
    out["celery_result"] = app.AsyncResult(queued.id).get(timeout=120)["status"]
    print(json.dumps(out))
    """
)


def test_the_python_client_runs_as_the_client_user(acl: AclSetup) -> None:
    plans = [goal_with_plan("py", ADD), goal_with_plan("py", APPROVE), goal_with_plan("py", ASK)]
    argv = [*plans, goal_with_plan("py", REPORT), FOREVER]
    done = subprocess.run(
        [sys.executable, "-c", PYTHON_CLIENT, *(json.dumps(a) for a in argv)],
        env={**{k: v for k, v in os.environ.items() if not k.startswith("TANDEM_")}, **acl.client_env},
        capture_output=True,
        text=True,
        timeout=RESULT_SECONDS,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["result"] == out["fork"] == out["follow_up"] == out["approval"] == "completed", out
    assert out["events"][0] == "job_started" and out["events"][-1] == "final" and out["status"] == "completed"
    assert out["message"] is True and out["approved"] == [True]
    assert out["answered"] == {"city": "Oslo"} and out["asked"] == "completed"
    assert out["reported"] == "completed" and out["artifact_chars"] == len(ARTIFACT_TEXT)
    assert out["cancelled"] == "cancelled" and out["resumed_then_cancelled"] is True
    assert out["async"] == ["completed", "final", "completed"]
    assert out["queued_cancel"] == out["celery_result"] == "cancelled"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


def test_the_api_runs_as_the_client_user(acl: AclSetup) -> None:
    with Client(acl.api.url) as api:
        assert api.health()
        first = api.submit(goal=goal_with_plan("api", REPORT), reasoner="mono", max_rounds=4)
        assert api.result(first, timeout=RESULT_SECONDS).status == "completed"
        [handle] = [e.artifact.handle for e in api.events(first) if e.type == "tool_result" and e.artifact]
        assert api.artifact(first, handle) == ARTIFACT_TEXT
        assert api.status(first).state == "completed"
        assert first.id in [j.job_id for j in api.jobs()]
        forked = api.fork(first, 1)
        assert api.result(forked, timeout=RESULT_SECONDS).status == "completed"
        follow = api.follow_up(first, "and then?")
        assert api.result(follow, timeout=RESULT_SECONDS).status == "completed"
        assert [j.job_id for j in api.thread(first.id)] == [first.id, follow.id]  # the thread of the first

        approval = api.submit(goal=goal_with_plan("api", APPROVE), reasoner="mono")
        acl.wait_state(approval.id, "awaiting_approval", "approval")
        assert api.message(approval, "use the ops channel", idempotency_key="m1")
        api.approve(approval)
        assert api.result(approval, timeout=RESULT_SECONDS).status == "completed"

        asked = api.submit(goal=goal_with_plan("api", ASK), reasoner="mono")
        acl.wait_state(asked.id, "awaiting_approval", "question")
        api.answer(asked, {"city": "Oslo"})
        assert api.result(asked, timeout=RESULT_SECONDS).status == "completed"

        endless = api.submit(goal=FOREVER, reasoner="mono", max_rounds=500)
        acl.wait_state(endless.id, "running")
        api.cancel(endless)
        assert api.result(endless, timeout=RESULT_SECONDS).status == "cancelled"
        api.resume(endless)
        acl.wait_state(endless.id, "running")
        api.cancel(endless)
        acl.wait_state(endless.id, "cancelled")
    assert "NOPERM" not in acl.api.log.read_text()


def test_the_client_user_cannot_forge_steps_nor_results(acl: AclSetup) -> None:
    client = Redis.from_url(acl.client_url)
    job_id = str(uuid.uuid4())
    step = json.dumps({"body": "", "headers": {"task": "tandem.run_tool", "id": job_id}, "properties": {}})
    refused = {
        "a step message on a role queue": lambda: client.lpush("tools", step),
        "one on a role queue's priority list": lambda: client.lpush("thinker\x06\x163", step),
        "a job's Celery result": lambda: client.set(f"celery-task-meta-{job_id}", '{"status": "SUCCESS"}'),
        "deleting one": lambda: client.delete(f"celery-task-meta-{job_id}"),
        "its tenant's daily usage (docs/tenants.md)": lambda: client.hset(
            "tandem:tenants:{fair}:usage:default:2026-11-29", "tokens", 0
        ),
        "freeing its tenant's running slots": lambda: client.zrem(
            "tandem:tenants:{fair}:running:default", job_id
        ),
        "a binding that routes the intake exchange to a role queue": lambda: client.sadd(
            "_kombu.binding.thinker", "celery\x06\x16\x06\x16celery"
        ),
        "a broadcast to the workers": lambda: client.publish("/0.celery.pidbox", "{}"),
        "reading a role queue's messages": lambda: client.lrange("tools", 0, -1),
        "another service's key": lambda: client.get("someone-else:key"),
        "killing a worker's connection": lambda: client.client_kill_filter(_type="normal"),
        "pausing Redis": lambda: client.client_pause(1000),
        "listing keys": lambda: client.keys("*"),
        "configuration": lambda: client.config_get("*"),
        "flushing": lambda: client.flushall(),
    }
    for what, attempt in refused.items():
        with pytest.raises(NoPermissionError):
            attempt()
            pytest.fail(f"the client user may do this: {what}")

    app = create_app(Settings.from_env(acl.client_env))
    try:
        with pytest.raises(OperationalError) as raised:  # routed to its role queue, as tandem routes it
            app.send_task("tandem.run_tool", args=[job_id, 0, 1])
        assert isinstance(refused_error(raised.value), NoPermissionError), raised.value
        forged = app.send_task("tandem.run_tool", args=[job_id, 0, 1], queue="celery")
    finally:
        app.close()
    line = (
        f"message refused, nothing done: tandem.run_tool (task id {forged.id}) arrived on the intake "
        "queue 'celery': a step runs only from its role queue 'tools'"
    )
    logs = [acl.workers.log_dir / f"{role}.log" for role in acl.workers.roles]
    deadline = time.monotonic() + EVENT_SECONDS
    while not any(line in log.read_text(errors="replace") for log in logs):
        assert time.monotonic() < deadline, f"no worker refused the forged step: {line!r} in none of {logs}"
        time.sleep(0.1)
    for log in logs:
        assert f"tandem.run_tool[{forged.id}] received" not in log.read_text(errors="replace")


def test_the_page_grants_the_client_only_what_it_lists(acl: AclSetup) -> None:
    def dryrun(*command: str) -> str:
        said = acl.admin.execute_command("ACL", "DRYRUN", "tandem-client", *command)
        return said.decode() if isinstance(said, bytes) else str(said)

    allowed = [
        ("LPUSH", "celery", "m"),
        ("LPUSH", "celery\x06\x169", "m"),
        ("LPUSH", "celery.lane3\x06\x164", "m"),  # an intake lane (TANDEM_INTAKE_LANES), as submit sends
        ("LLEN", "celery.lane0"),
        ("SADD", "_kombu.binding.celery", "b"),
        ("SADD", "_kombu.binding_permanent.celery", "b"),
        ("GET", "celery-task-meta-1"),
        ("SUBSCRIBE", "celery-task-meta-1"),
        ("LLEN", "thinker\x06\x163"),
        ("ZCOUNT", "tandem:cap:{h}:slots", "0", "1"),
        ("HSET", "tandem:{j}:state", "a", "b"),
        ("SET", "tandem:{j}:cancel", "1", "EX", "60"),
        ("XADD", "tandem:{j}:events", "*", "type", "final"),
        ("HSETNX", "tandem:{j}:decisions", "k", "a"),
        ("ZRANGE", "tandem:{j}:children", "0", "-1"),
        ("GET", "tandem:{j}:spec"),
        ("ZADD", "tandem:live:3", "1", "j"),
        ("LPUSH", "tandem:live:wake", "1"),  # a cancel wakes a reconciler
        ("EXPIRE", "tandem:live:wake", "60"),
        ("ZADD", "tandem:recent-of:team-a:1", "1", "j"),
    ]
    for command in allowed:
        assert dryrun(*command) == "OK", command
    refused = [
        ("LPUSH", "actor", "m"),
        ("SET", "celery-task-meta-1", "x"),
        ("PUBLISH", "celery-task-meta-1", "x"),
        ("HSET", "tandem:cap:hosts", "h", "x"),
        ("ZADD", "tandem:{j}:children", "1", "c"),  # a job's children index is the workers'
        ("SET", "tandem:{j}:spec", "{}"),
        ("HSET", "tandem:{j}:calls", "1", "x"),
        ("EXPIRE", "tandem:{j}:memory", "1"),
        ("LPUSH", "tandem:dead-letters", "x"),
        ("ZADD", "tandem:webhooks:1", "1", "j"),
        ("CLIENT", "LIST"),
        ("CLIENT", "KILL", "ID", "1"),
        ("SCRIPT", "FLUSH"),
        ("DEBUG", "SLEEP", "0"),
    ]
    for command in refused:
        assert dryrun(*command) != "OK", command
    assert "off" in acl.admin.acl_getuser("default")["flags"]  # and no one logs in without a user


@pytest.fixture
def partial_user(acl: AclSetup) -> Iterator[dict[str, str]]:
    """A user with the client line but for the role queues' ``LLEN`` and ``ZCOUNT`` (the client
    line this page gave before)."""
    name, password = f"tandem-test-partial-{uuid.uuid4().hex[:8]}", "partial-pw-0123456789"
    [client_line] = [line for line in acl_lines() if line.split()[2] == "tandem-client"]
    line = client_line.replace("tandem-client", name).replace(PASSWORDS["CLIENT_PASSWORD"], password)
    line = line.replace(" %R~thinker* %R~actor* %R~tools*", "").replace(" +zcount", "")
    acl.admin.execute_command(*line.split())
    try:
        yield {**acl.client_env, **_as(_url(acl.server, name, password))}
    finally:
        acl.admin.execute_command("ACL", "DELUSER", name)


def test_a_user_lacking_a_permission_is_told_which_not_that_redis_is_down(
    acl: AclSetup, partial_user: dict[str, str]
) -> None:
    user = partial_user["TANDEM_REDIS_URL"].split("//", 1)[1].split(":", 1)[0]
    probe = tandem("health", env=partial_user)
    assert probe.returncode == exit_codes.USAGE, probe
    [said] = probe.stderr.splitlines()
    assert said.startswith(f"tandem health: the broker (redis://{user}:**@127.0.0.1:")
    assert f"refused: user {user!r} may not read the queue depths (LLEN of the lists of the queues" in said
    assert (
        "(LLEN thinker) of pipeline caused error" in said
        and "docs/security.md, section 'Redis ACL users'" in said
    )
    assert "Redis (" in said and "answered in" in said  # the job store answered: only the broker refused

    run = tandem("run", goal_with_plan("denied", ADD), "--reasoner", "mono", env=partial_user)
    assert run.returncode == exit_codes.USAGE, run
    [said] = run.stderr.splitlines()
    assert said.startswith(f"tandem: the broker at redis://{user}:**@127.0.0.1:") and " refuses: " in said
    assert "does not answer" not in said and "start redis-server" not in said

    hosts = tandem("hosts", env=partial_user)
    assert hosts.returncode == exit_codes.USAGE, hosts
    [said] = hosts.stderr.splitlines()
    assert said.startswith(f"tandem: Redis refuses user {user!r} a command `tandem hosts` needs (NOPERM: ")
    assert "(ZCOUNT tandem:cap:" in said and "no permissions to run the 'zcount' command" in said
    assert said.endswith(
        "give the user the client line of docs/security.md, section 'Redis ACL users', which grants every "
        "client command what it needs (workers need the worker line)"
    )

    wrong = {**partial_user, **_as(_url(acl.server, user, "not-the-password-0123"))}
    probe = tandem("health", env=wrong)
    assert probe.returncode == exit_codes.USAGE, probe
    assert f"Redis refuses user {user!r}: " in probe.stderr and "does not answer" not in probe.stderr
