"""Security and limits, end to end: real Redis, real workers, Flower, and a hostile client process.

- Secrets planted in settings (model API keys, the secrets key), the toolkit (MCP env and arguments)
  and the spec (``secrets``) never appear in clear in Redis (job store, result backend, events,
  leases, queues) or in the worker logs, after jobs that fail in every way they can.
- A bad-input table (malformed and oversized specs and messages, by name from a bare Celery client
  and through Flower) is answered with a clear error or ignored; no worker crashes, nothing is
  stored for refused specs, no job is left running.
- The tool-call cap, the tool policy, Flower's authentication, message signing and the start-up
  check of a broken toolkit.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from redis import Redis

from tandem.workers.embedded import free_port
from tests.integration import plan_model
from tests.integration.conftest import READY_SECONDS, RESULT_SECONDS, Cluster, _exclusive_db, actor_host
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TOOLKIT_YAML = """
# Careless tools, an MCP group with secrets in its environment and arguments, and a policy.
tools:
  - function: tests.integration.security_tools:add
  - function: tests.integration.security_tools:leak
  - function: tests.integration.security_tools:leak_error
  - function: tests.integration.security_tools:hang
  - function: tests.integration.security_tools:danger
  - function: tests.integration.security_tools:forbidden
groups:
  - name: files
    mcp:
      transport: stdio
      command: {python}
      args: ["-m", "tests.toolkit.mcp_server", "--token=mcp-arg-planted-3"]
      env: {{MCP_TOKEN: mcp-env-planted-2, PYTHONPATH: {root}}}
      prefix: files.
      timeout: 20
actions:
  - name: work
    description: Do the work
    tools: [add, leak, leak_error, hang, danger, forbidden, {{group: files}}]
policy:
  allow: ["*"]
  grant: [danger]
  deny: [forbidden]
"""
THINKER_KEY = "sk-thinker-planted-0001"
ACTOR_KEY = "sk-actor-planted-0002"
JOB_SECRET = "job-secret-planted-4"
SECRETS_KEY = Fernet.generate_key().decode()
FLOWER_AUTH = "ops:flower-pass-planted-6"
PLANTED = [
    THINKER_KEY,
    ACTOR_KEY,
    JOB_SECRET,
    SECRETS_KEY,
    "mcp-env-planted-2",
    "mcp-arg-planted-3",
    "url-pw-planted-5",
    "flower-pass-planted-6",
]


def thinker_host(request: RecordedRequest) -> Reply:
    """The plan's Thinker; for a goal holding HOST_401 it refuses the key, quoting it (as hosts do)."""
    goal = " ".join(str(m.get("content")) for m in request["messages"])
    if "HOST_401" in goal:
        key = request.headers.get("Authorization", "").split()[-1]
        return Reply(status=401, error=f"Incorrect API key provided: {key}")
    if "BIG_REPLY" in goal:  # grows the job's memory past TANDEM_MAX_MEMORY_BYTES in one turn
        return Reply(content="<instruction>go on</instruction>\n<input>" + "y" * 45_000 + "</input>")
    return plan_model.thinker(request)


class SecureCluster(Cluster):
    """A cluster with planted secrets, the security toolkit and small limits, plus Flower."""

    flower_url = ""
    flower: subprocess.Popen[bytes] | None = None

    def start_flower(self) -> None:
        port = free_port()
        self.flower = subprocess.Popen(
            [sys.executable, "-m", "tandem.workers.cli", "flower", "--port", str(port)],
            env={**os.environ, **self.env, "FLOWER_BASIC_AUTH": FLOWER_AUTH},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.flower_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.flower_url + "/healthcheck", timeout=2).close()
                return
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.3)
        raise RuntimeError("Flower did not answer within 60 s")

    def stop(self) -> None:
        if self.flower is not None:
            self.flower.terminate()
            self.flower.wait(10)
        super().stop()

    def hostile(self, cases: list[dict[str, Any]], tmp: Path) -> dict[str, dict[str, Any]]:
        """Run the hostile client process on ``cases``; its answers by case id."""
        path = tmp / "cases.json"
        path.write_text(json.dumps(cases))
        argv = [sys.executable, "-m", "tests.integration.hostile_client", self.url, str(path)]
        if self.flower_url:
            argv += [self.flower_url, FLOWER_AUTH]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=400, cwd=ROOT, check=True)
        lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        return {line["id"]: line for line in lines}

    def workers_alive(self) -> bool:
        return all(p.poll() is None for g in self.groups for p in g.processes.values())

    def logs(self) -> str:
        return "".join(
            path.read_text(errors="replace") for g in self.groups for path in g.log_dir.glob("*.log")
        )


@pytest.fixture(scope="module")
def secure(redis_base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    toolkit = tmp_path_factory.mktemp("security") / "toolkit.yaml"
    toolkit.write_text(TOOLKIT_YAML.format(python=sys.executable, root=ROOT))
    with (
        _exclusive_db() as db,
        OpenAIServer(thinker_host) as thinker,
        OpenAIServer(actor_host) as actor,
    ):
        url = f"{redis_base}/{db}"
        Redis.from_url(url).flushdb()
        env = {
            "TANDEM_BROKER_URL": url,
            "TANDEM_RESULT_BACKEND": url,
            "TANDEM_REDIS_URL": url,
            "TANDEM_TOOLKIT": str(toolkit),
            "TANDEM_THINKER_MODEL": "openai/thinker-model",
            "TANDEM_THINKER_API_BASE": thinker.url,
            "TANDEM_THINKER_API_KEY": THINKER_KEY,
            "TANDEM_ACTOR_MODEL": "openai/actor-model",
            "TANDEM_ACTOR_API_BASE": actor.url,
            "TANDEM_ACTOR_API_KEY": ACTOR_KEY,
            "TANDEM_TOOL_TIMEOUT": "2",
            "TANDEM_SECRETS_KEY": SECRETS_KEY,
            "TANDEM_MAX_TOOL_CALLS": "4",
            "TANDEM_MAX_SPEC_BYTES": "200000",
            "TANDEM_MAX_MEMORY_BYTES": "40000",
            "PYTHONPATH": str(ROOT),
        }
        cluster = SecureCluster(url, env)
        try:
            cluster.start("thinker", "actor", "tools")
            cluster.start_flower()
            yield cluster
        finally:
            cluster.stop()
            Redis.from_url(url).flushdb()


def _redis_dump(redis: Redis) -> bytes:
    """Every key and value in the database, as bytes (strings, hashes, lists, sets, streams)."""
    parts: list[bytes] = []
    for key in redis.scan_iter(count=1000):
        kind = redis.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        parts.append(key)
        if kind == "string":
            parts.append(redis.get(key) or b"")
        elif kind == "hash":
            for k, v in redis.hgetall(key).items():
                parts += [k, v]
        elif kind == "list":
            parts += redis.lrange(key, 0, -1)
        elif kind in ("set", "zset"):
            parts += (
                [m if isinstance(m, bytes) else str(m).encode() for m in redis.zrange(key, 0, -1)]
                if (kind == "zset")
                else list(redis.smembers(key))
            )
        elif kind == "stream":
            for _id, fields in redis.xrange(key):
                for k, v in fields.items():
                    parts += [k, v]
    return b"\n".join(parts)


# -- secrets --------------------------------------------------------------------------------------


def test_planted_secrets_never_appear_in_clear_after_jobs_that_fail_every_way(secure: SecureCluster) -> None:
    secrets = {"tok": JOB_SECRET}
    plan = [
        [
            {"name": "leak", "args": {}},
            {"name": "leak_error", "args": {}},
            {"name": "hang", "args": {"seconds": 5}},
            {"name": "no_such_tool", "args": {}},
        ],
        [
            {"name": "files.fail", "args": {"reason": "mcp failure"}},
            {"name": "files.add", "args": {"a": 1, "b": 2}},
            *[{"name": "add", "args": {"a": i, "b": 1}} for i in range(4)],
        ],
    ]
    tools_job = secure.submit(goal=goal_with_plan("careless tools", plan), max_rounds=5, secrets=secrets)
    host_job = secure.submit(goal="HOST_401 the host refuses the key", secrets=secrets)
    memory_job = secure.submit(goal="BIG_REPLY grows the memory", secrets=secrets)
    refused = secure.submit(goal="g", tools=["forbidden"], secrets=secrets)
    results = {h.id: h.result(timeout=RESULT_SECONDS) for h in (tools_job, host_job, memory_job, refused)}

    done = results[tools_job.id]
    assert done.status == "completed", done
    round0 = secure.store.tool_results(tools_job.id, 0, 4)
    round1 = secure.store.tool_results(tools_job.id, 1, 6)
    assert round0[0] is not None and round0[0].output == "the token is ***"
    assert round0[1] is not None and round0[1].status == "failed" and "***" in round0[1].output
    assert round0[2] is not None and "timed out" in round0[2].output
    assert round0[3] is not None and "There is no tool named 'no_such_tool'" in round0[3].output
    # The cap: four calls ran, the last two were answered with the cap and never became tasks.
    assert [r.status if r else None for r in round1] == ["failed", "succeeded", "succeeded", "succeeded"] + [
        "failed"
    ] * 2
    assert all("TANDEM_MAX_TOOL_CALLS" in r.output for r in round1[4:] if r)
    assert len([c for c in secure.tool_calls() if c["job"] == tools_job.id and c["round"] == 1]) == 2

    failed = results[host_job.id]
    assert failed.status == "failed" and "Incorrect API key provided" in (failed.error or "")
    memory = results[memory_job.id]
    assert memory.status == "failed" and "TANDEM_MAX_MEMORY_BYTES" in (memory.error or "")
    assert len(secure.store.memory(memory_job.id).get_messages()) == 1  # kept (with its TTL)
    assert results[refused.id].status == "failed" and "not permitted" in (results[refused.id].error or "")

    dump = _redis_dump(secure.redis)
    logs = secure.logs()
    assert "leak: the token is ***" in logs  # the tool logged it; the worker's log handler masked it
    for secret in PLANTED:
        assert secret.encode() not in dump, f"{secret!r} is stored in clear in Redis"
        assert secret not in logs, f"{secret!r} is in a worker log"
    started = [e for e in secure.store.events(tools_job.id, timeout=5) if e["type"] == "job_started"]
    assert started and started[0]["data"]["spec"]["secrets"] == {"tok": "***"}


# -- the bad-input table -----------------------------------------------------------------------------


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return value


BAD_SPECS: list[tuple[str, Any, str]] = [
    ("not-an-object", "just text", "must be a JSON object"),
    ("a-list", [1, 2], "must be a JSON object"),
    ("null", None, "must be a JSON object"),
    ("empty", {}, "'goal'"),
    ("blank-goal", {"goal": "   "}, "blank"),
    ("goal-number", {"goal": 5}, "'goal'"),
    ("unknown-field", {"goal": "g", "bogus": 1}, "unknown field"),
    ("bad-reasoner", {"goal": "g", "reasoner": "quad"}, "'reasoner'"),
    ("zero-rounds", {"goal": "g", "max_rounds": 0}, "'max_rounds'"),
    ("huge-rounds", {"goal": "g", "max_rounds": 10**100}, "'max_rounds'"),
    ("threshold", {"goal": "g", "threshold": 2.5}, "'threshold'"),
    ("negative-hops", {"goal": "g", "hops": -1}, "'hops'"),
    ("tools-text", {"goal": "g", "tools": "add"}, "'tools'"),
    ("unknown-tool", {"goal": "g", "tools": ["nope"]}, "unknown tools ['nope']"),
    ("denied-tool", {"goal": "g", "tools": ["forbidden"]}, "not permitted"),
    ("unknown-action", {"goal": "g", "actions": ["nope"]}, "unknown actions ['nope']"),
    ("metadata-deep", {"goal": "g", "metadata": _nested(40)}, "TANDEM_MAX_METADATA_DEPTH"),
    ("metadata-500-deep", {"goal": "g", "metadata": _nested(500)}, "TANDEM_MAX_METADATA_DEPTH"),
    ("metadata-big", {"goal": "g", "metadata": {"x": "m" * 70_000}}, "TANDEM_MAX_METADATA_BYTES"),
    ("goal-long", {"goal": "g" * 150_000}, "TANDEM_MAX_GOAL_CHARS"),
    ("spec-big", {"goal": "g", "context": "c" * 250_000}, "TANDEM_MAX_SPEC_BYTES"),
    ("metadata-list", {"goal": "g", "metadata": [1, 2]}, "'metadata'"),
    ("context-list", {"goal": "g", "context": ["a"]}, "'context'"),
    ("secrets-text", {"goal": "g", "secrets": "x"}, "'secrets'"),
    ("secret-name", {"goal": "g", "secrets": {"bad name": "v"}}, "secret name"),
    ("secret-number", {"goal": "g", "secrets": {"tok": 5}}, "'secrets.tok'"),
]

DEEP = 5000
RAW_DEEP = '[[], {"spec": {"goal": "g", "metadata": ' + '{"a": ' * DEEP + "1" + "}" * DEEP + "}}, {}]"

IGNORED: list[dict[str, Any]] = [
    {"id": "raw-deep-json", "kind": "raw", "body": RAW_DEEP, "content_type": "application/json"},
    {"id": "raw-not-json", "kind": "raw", "body": "{{{ not json", "content_type": "application/json"},
    {
        "id": "raw-pickle",
        "kind": "raw",
        "body": "cos\nsystem\n(S'true'\ntR.",
        "content_type": "application/x-python-serialize",
    },
    {"id": "infer-positional", "kind": "task", "name": "tandem.infer", "args": [1, 2, 3]},
    {"id": "infer-no-spec", "kind": "task", "name": "tandem.infer"},
    {"id": "forged-run-tool", "kind": "task", "name": "tandem.run_tool", "args": ["no-such-job", 0, 1]},
    {"id": "forged-run-tool-types", "kind": "task", "name": "tandem.run_tool", "args": [{"x": 1}, "r", None]},
    {"id": "forged-thinker", "kind": "task", "name": "tandem.thinker_turn", "args": ["no-such-job", 0]},
    {
        "id": "forged-collect",
        "kind": "task",
        "name": "tandem.collect_tools",
        "args": ["no-such-job", 0, 10**6],
    },
    {
        "id": "forged-finalize",
        "kind": "task",
        "name": "tandem.finalize",
        "args": ["no-such-job", "completed"],
    },
    {"id": "unregistered", "kind": "task", "name": "tandem.evil", "args": []},
]


def test_bad_input_table_by_name_and_through_flower(secure: SecureCluster, tmp_path: Path) -> None:
    cases: list[dict[str, Any]] = []
    for via in ("broker", "flower"):
        for case_id, spec, _ in BAD_SPECS:
            cases.append({"id": f"{via}:{case_id}", "via": via, "kind": "spec", "spec": spec})
    cases += [{**c, "via": "broker"} for c in IGNORED]
    clear_secret = {
        "goal": goal_with_plan("bare client", [[{"name": "leak", "args": {}}]]),
        "secrets": {"tok": JOB_SECRET},
    }
    cases.append({"id": "bare-client-clear-secret", "via": "broker", "kind": "spec", "spec": clear_secret})
    cases += [
        {
            "id": "flower-no-auth",
            "kind": "http",
            "method": "GET",
            "path": "/api/workers",
            "auth": False,
            "via": "flower",
        },
        {
            "id": "flower-no-auth-apply",
            "kind": "http",
            "method": "POST",
            "path": "/api/task/async-apply/tandem.infer",
            "body": {"kwargs": {"spec": {"goal": "g"}}},
            "auth": False,
            "via": "flower",
        },
        {
            "id": "flower-workers",
            "kind": "http",
            "method": "GET",
            "path": "/api/workers?refresh=1",
            "auth": True,
            "via": "flower",
        },
    ]
    answers = secure.hostile(cases, tmp_path)

    assert len(BAD_SPECS) >= 25
    for via in ("broker", "flower"):
        for case_id, _, expected in BAD_SPECS:
            answer = answers[f"{via}:{case_id}"]
            result = answer["result"]
            assert result.get("status") == "failed", (case_id, via, answer)
            assert expected in result["error"], (case_id, via, result["error"])
            assert len(result["error"]) < 2000
            job_id = answer["task_id"]
            assert not list(secure.redis.scan_iter(f"tandem:{{{job_id}}}:*")), f"{case_id}: keys were stored"
    assert answers["flower-no-auth"]["status"] == 401
    assert answers["flower-no-auth-apply"]["status"] == 401
    workers = answers["flower-workers"]
    assert workers["status"] == 200
    for secret in PLANTED:
        assert secret not in json.dumps(workers["body"]), f"Flower's workers API shows {secret!r}"

    # A bare client sent a secret in clear: it was sealed at intake, and Flower never shows it.
    bare = answers["bare-client-clear-secret"]
    assert bare["result"]["status"] == "completed", bare
    bare_result = secure.store.tool_result(bare["task_id"], 0, 1)
    assert bare_result is not None and bare_result.output == "the token is ***"
    request = urllib.request.Request(
        secure.flower_url + "/api/tasks?limit=1000",
        headers={"Authorization": "Basic " + base64.b64encode(FLOWER_AUTH.encode()).decode()},
    )
    with urllib.request.urlopen(request, timeout=20) as response:
        tasks_page = response.read().decode()
    assert bare["task_id"] in tasks_page and JOB_SECRET not in tasks_page

    # Ignored messages: nothing stored under the forged job, the workers are alive and still work.
    time.sleep(3)
    assert not list(secure.redis.scan_iter("tandem:{no-such-job}:*"))
    assert secure.workers_alive()
    healthy = secure.submit(goal=goal_with_plan("still works", [[{"name": "add", "args": {"a": 2, "b": 3}}]]))
    assert healthy.result(timeout=RESULT_SECONDS).status == "completed"
    # No job is left running.
    for key in secure.redis.scan_iter("tandem:*:state"):
        state = (secure.redis.hget(key, "state") or b"").decode()
        assert state in ("completed", "failed", "truncated", "cancelled"), (key, state)


def test_a_job_cannot_name_a_tool_beyond_the_policy_but_can_name_a_granted_one(secure: SecureCluster) -> None:
    granted = secure.submit(
        goal=goal_with_plan("granted", [[{"name": "danger", "args": {}}]]), tools=["danger"]
    )
    assert granted.result(timeout=RESULT_SECONDS).status == "completed"
    assert secure.store.tool_result(granted.id, 0, 1).output == "danger ran"  # type: ignore[union-attr]
    default = secure.submit(goal=goal_with_plan("not granted", [[{"name": "danger", "args": {}}]]))
    assert default.result(timeout=RESULT_SECONDS).status == "completed"
    result = secure.store.tool_result(default.id, 0, 1)
    assert (
        result is not None
        and result.status == "failed"
        and "There is no tool named 'danger'" in result.output
    )


def test_status_of_an_unknown_job_says_so(secure: SecureCluster) -> None:
    from tandem.client.handle import JobHandle
    from tandem.tasks.errors import UnknownJobError

    with pytest.raises(UnknownJobError, match="no job 'never-submitted' is known"):
        JobHandle("never-submitted", secure.store, secure.app).status()
    refused = secure.submit(goal="g", tools=["nope"])
    refused.result(timeout=RESULT_SECONDS)
    status = JobHandle(refused.id, secure.store, secure.app).status()
    assert status.state == "failed" and "unknown tools" in (status.error or "")


# -- start-up -----------------------------------------------------------------------------------------


def test_a_broken_mcp_server_fails_the_worker_start_with_a_clear_message(tmp_path: Path) -> None:
    toolkit = tmp_path / "broken.yaml"
    toolkit.write_text(
        "groups:\n  - name: files\n    mcp: {transport: stdio, command: /nonexistent/mcp-server, "
        "args: ['--token=arg-planted-7'], timeout: 10}\n"
    )
    env = {**os.environ, "TANDEM_TOOLKIT": str(toolkit), "TANDEM_BROKER_URL": "redis://127.0.0.1:1/0"}
    for argv in (
        [sys.executable, "-m", "tandem.workers.cli", "worker", "tools"],
        [sys.executable, "-m", "celery", "-A", "tandem.tasks.app", "worker", "-P", "solo"],
    ):
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert out.returncode != 0, argv
        text = out.stderr + out.stdout
        assert "the toolkit" in text and "'files'" in text and "cannot be loaded" in text, text[-2000:]
        assert "arg-planted-7" not in text


# -- message signing --------------------------------------------------------------------------------


def _certificate(tmp: Path, name: str) -> tuple[Path, Path]:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    key_path, cert_path = tmp / f"{name}.key", tmp / f"{name}.pem"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


SIGNED_CLIENT = """
import json, sys
from tandem.tasks.app import app
result = app.send_task("tandem.infer", kwargs={"spec": {"goal": sys.argv[1], "max_rounds": 4}})
print(json.dumps(result.get(timeout=90)))
"""

UNSIGNED_CLIENT = """
import sys, time
from celery import Celery
app = Celery(broker=sys.argv[1], backend=sys.argv[1])
result = app.send_task("tandem.infer", kwargs={"spec": {"goal": "unsigned", "max_rounds": 2}})
time.sleep(8)
print(result.state)
"""


def test_signed_messages_run_and_unsigned_or_forged_ones_are_refused(redis_base: str, tmp_path: Path) -> None:
    store = tmp_path / "trusted"
    store.mkdir()
    key, cert = _certificate(store, "tandem")
    rogue_key, rogue_cert = _certificate(tmp_path, "rogue")  # not in the trusted store
    with (
        _exclusive_db() as db,
        OpenAIServer(plan_model.thinker) as thinker,
        OpenAIServer(actor_host) as actor,
    ):
        url = f"{redis_base}/{db}"
        Redis.from_url(url).flushdb()
        env = {
            "TANDEM_BROKER_URL": url,
            "TANDEM_RESULT_BACKEND": url,
            "TANDEM_REDIS_URL": url,
            "TANDEM_TOOLKIT": "tests.integration.tools:toolkit",
            "TANDEM_THINKER_MODEL": "openai/thinker-model",
            "TANDEM_THINKER_API_BASE": thinker.url,
            "TANDEM_THINKER_API_KEY": "test-key",
            "TANDEM_ACTOR_MODEL": "openai/actor-model",
            "TANDEM_ACTOR_API_BASE": actor.url,
            "TANDEM_ACTOR_API_KEY": "test-key",
            "TANDEM_SIGNING_KEY": str(key),
            "TANDEM_SIGNING_CERT": str(cert),
            "TANDEM_SIGNING_CERT_STORE": str(store / "*.pem"),
            "PYTHONPATH": str(ROOT),
        }
        from tandem.workers.embedded import WorkerGroup

        group = WorkerGroup(("thinker", "actor", "tools"), env={**os.environ, **env}, loglevel="INFO")
        group.start()
        try:
            group.wait_ready(timeout=READY_SECONDS)
            goal = goal_with_plan("signed", [[{"name": "add", "args": {"a": 1, "b": 2}}]])
            signed = subprocess.run(
                [sys.executable, "-c", SIGNED_CLIENT, goal],
                env={**os.environ, **env},
                capture_output=True,
                text=True,
                timeout=120,
                cwd=ROOT,
            )
            assert signed.returncode == 0, signed.stderr[-2000:]
            assert json.loads(signed.stdout.strip().splitlines()[-1])["status"] == "completed"

            unsigned = subprocess.run(
                [sys.executable, "-c", UNSIGNED_CLIENT, url],
                capture_output=True,
                text=True,
                timeout=60,
                cwd="/",
            )
            assert unsigned.stdout.strip() == "PENDING"  # refused by the worker: never run

            forged_env = {
                **os.environ,
                **env,
                "TANDEM_SIGNING_KEY": str(rogue_key),
                "TANDEM_SIGNING_CERT": str(rogue_cert),
            }
            forged = subprocess.run(
                [sys.executable, "-c", SIGNED_CLIENT.replace("timeout=90", "timeout=8"), "forged"],
                env=forged_env,
                capture_output=True,
                text=True,
                timeout=60,
                cwd=ROOT,
            )
            assert forged.returncode != 0  # the worker never ran it: the client times out
            refusal = re.compile(r"(?i)content.*disallow|not.*trusted|certificate|SecurityError")
            deadline = time.monotonic() + RESULT_SECONDS  # the worker logs its refusal when it takes it
            logs = ""
            while not refusal.search(logs):
                assert time.monotonic() < deadline, logs[-3000:]
                time.sleep(0.2)
                logs = "".join(p.read_text(errors="replace") for p in group.log_dir.glob("*.log"))
            assert all(p.poll() is None for p in group.processes.values())
            specs = [Redis.from_url(url).get(k) for k in Redis.from_url(url).scan_iter("tandem:*:spec")]
            assert all(b"unsigned" not in (s or b"") and b"forged" not in (s or b"") for s in specs)
        finally:
            group.stop()
            Redis.from_url(url).flushdb()
