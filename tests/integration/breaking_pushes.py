"""Helpers of ``test_breaking_commit_pushes``: clusters on a database of the shared Redis, a worker
behind a ``SlowLink``, kombu's priority lists of a queue, and one-``MULTI`` snapshots of the jobs'
records with the queues (``watch_commits``) that see any instant a step is current but its
message not queued.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from celery import Celery
from redis import Redis

from tests.integration.breaking import each_event_once, ended
from tests.integration.conftest import Cluster, _cluster_on, _exclusive_db
from tests.integration.slow_link import SlowLink
from tests.integration.test_security import _certificate
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]

SEP = "\x06\x16"
"""kombu's separator between a Redis queue's name and its priority level."""
ONE_ROUND = [[{"name": "add", "args": {"a": 2, "b": 3}}]]
"""One round of tools, then the deliverable: two Thinker and two Actor turns."""
ROLE_QUEUES = ("celery", "thinker", "actor", "tools")
THREE_CALLS = [
    [
        {"name": "add", "args": {"a": 1, "b": 1}},
        {"name": "add", "args": {"a": 2, "b": 2}},
        {"name": "sleep_tool", "args": {"seconds": 0.1}},
    ]
]


@contextmanager
def cluster_on_db(redis_base: str, **env: str) -> Iterator[Hosts]:
    """A cluster (no workers yet) on an exclusive database of the shared Redis, stopped after
    (its teardown fails when a worker exited by itself or a key has no TTL)."""
    with _exclusive_db() as db:
        clusters = _cluster_on(f"{redis_base}/{db}", **env)
        hosts = next(clusters)
        try:
            yield hosts
        finally:
            next(clusters, None)


@contextmanager
def slow_env(cluster: Cluster, delay: float = 0.03) -> Iterator[dict[str, Any]]:
    """The environment of a worker whose every Redis round trip (job state, broker and backend: one
    URL, so the commit pushes) takes ``2 * delay`` longer: a worker that committed and then sent in
    a second call would leave a window of at least that long for ``watch_commits`` to see."""
    url = urlsplit(cluster.url)
    link = SlowLink((url.hostname or "127.0.0.1", url.port or 6379), delay=delay).start()
    slow = f"redis://127.0.0.1:{link.port}{url.path}"
    try:
        yield {"TANDEM_REDIS_URL": slow, "TANDEM_BROKER_URL": slow, "TANDEM_RESULT_BACKEND": slow}
    finally:
        link.stop()


def list_keys(queue: str) -> list[str]:
    """kombu's ten lists of ``queue``: level 0 is ``queue``, level n ``queue\\x06\\x16n``."""
    return [queue if n == 0 else f"{queue}{SEP}{n}" for n in range(10)]


def level_of(priority: int) -> int:
    """The kombu level of a job of ``JobSpec.priority`` ``priority`` on Redis (docs: 9 - p)."""
    return 9 - priority


def job_of(raw: bytes) -> str:
    """The job a step message wakes up (its task id is ``<job>.<...>``)."""
    return str(json.loads(raw)["headers"]["id"]).split(".", 1)[0]


def queued(redis: Redis, queue: str) -> dict[int, list[bytes]]:
    """The messages waiting in ``queue``, by priority level."""
    pipe = redis.pipeline(transaction=True)
    for key in list_keys(queue):
        pipe.lrange(key, 0, -1)
    return dict(enumerate(pipe.execute()))


def messages_of(redis: Redis, queue: str, job: str) -> list[tuple[int, dict[str, Any]]]:
    """``(level, message)`` of every message of ``job`` waiting in ``queue``."""
    return [
        (level, json.loads(raw))
        for level, raws in queued(redis, queue).items()
        for raw in raws
        if job_of(raw) == job
    ]


def snapshot(
    cluster: Cluster, jobs: list[str], queues: tuple[str, ...]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The jobs' records, the first entry of their streams and the queues' lists, read in one
    ``MULTI``: one instant of Redis, between two scripts."""
    pipe = cluster.redis.pipeline(transaction=True)
    for job in jobs:
        pipe.hmget(cluster.store.key(job, "state"), ["state", "kind", "round", "outbox"])
        pipe.xrange(cluster.store.key(job, "events"), count=1)
    for queue in queues:
        for key in list_keys(queue):
            pipe.lrange(key, 0, -1)
    out = pipe.execute()
    records: dict[str, Any] = {}
    for i, job in enumerate(jobs):
        fields = [None if v is None else v.decode() for v in out[2 * i]]
        first = out[2 * i + 1]
        records[job] = (*fields, first[0][1].get(b"type", b"").decode() if first else None)
    lists: dict[str, list[str]] = {q: [] for q in queues}
    rest = out[2 * len(jobs) :]
    for q_index, queue in enumerate(queues):
        for raws in rest[q_index * 10 : (q_index + 1) * 10]:
            lists[queue] += [job_of(raw) for raw in raws]
    return records, lists


def watch_commits(
    cluster: Cluster,
    jobs: list[str],
    queues: tuple[str, ...],
    done: Any,
    timeout: float,
    expected: dict[str, int] | None = None,
) -> tuple[int, list[str]]:
    """Snapshot until ``done(records)``; return how many snapshots showed a job's step current,
    and every snapshot that broke the promise: a running job whose current step (of a role with no
    worker, in ``queues``) has not ``expected[kind]`` messages (1 by default), a non-empty outbox,
    or no ``job_started`` first."""
    broken: list[str] = []
    seen_current = 0
    deadline = time.monotonic() + timeout
    while True:
        gone = cluster.exited()
        assert not gone, f"workers exited by themselves: {gone}"
        records, lists = snapshot(cluster, jobs, queues)
        for job, (state, kind, round_no, outbox, first) in records.items():
            if state != "running" or kind not in queues:
                continue
            seen_current += 1
            count = lists[kind].count(job)
            if count != (expected or {}).get(kind, 1) or outbox not in ("[]", "") or first != "job_started":
                broken.append(
                    f"{job}: record {kind} r{round_no} outbox {outbox!r}, first event {first!r}, "
                    f"{count} message(s) in {kind!r}"
                )
        if done(records) or broken:
            return seen_current, broken[:5]
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s: {records}"


def at_step(kind: str, jobs: list[str]) -> Any:
    return lambda records: all(records[j][0] == "running" and records[j][1] == kind for j in jobs)


def shape(message: dict[str, Any]) -> dict[str, Any]:
    """What Celery decides about a message, without its values that differ per message."""
    props = message["properties"]
    return {
        "headers": sorted(message["headers"]),
        "properties": sorted(props),
        "delivery_info": sorted(props["delivery_info"]),
        "content-type": message["content-type"],
        "content-encoding": message["content-encoding"],
        "body_encoding": props["body_encoding"],
    }


def body_of(message: dict[str, Any]) -> Any:
    """The decoded body of an unsigned message: ``[args, kwargs, embed]``."""
    return json.loads(base64.b64decode(message["body"]))


def requests_of(server: OpenAIServer, label: str) -> int:
    """How many model requests name ``label`` (a job's goal)."""
    return sum(1 for r in server.requests if label in json.dumps(r["messages"]))


def outbox_of(cluster: Cluster, job: str) -> str:
    return cluster.store.machine.record(job).get("outbox", "[]") or "[]"


def completed(cluster: Cluster, handles: list[Any], timeout: float) -> None:
    ended(cluster, handles, timeout)
    for h in handles:
        result = cluster.store.result(h.id)
        assert result is not None and result.status == "completed", (h.id, result)
        assert result.deliverable == "all planned calls ran", result
        record = cluster.store.machine.record(h.id)
        assert record["state"] == "completed", record
        assert outbox_of(cluster, h.id) == "[]", record
        kinds = [e.type for e in cluster.store.read_events(h.id, count=1000)]
        assert kinds[0] == "job_started" and kinds.count("job_started") == 1, (h.id, kinds)
        assert each_event_once(cluster, h.id) == []


def drained(redis: Redis, queues: tuple[str, ...] = ROLE_QUEUES) -> bool:
    return all(not raws for q in queues for raws in queued(redis, q).values())


def signing_env(tmp_path: Path) -> dict[str, str]:
    """Celery message signing with a certificate of this test (docs/security.md)."""
    store = tmp_path / "trusted"
    store.mkdir()
    key, cert = _certificate(store, "tandem")
    return {
        "TANDEM_SIGNING_KEY": str(key),
        "TANDEM_SIGNING_CERT": str(cert),
        "TANDEM_SIGNING_CERT_STORE": str(store / "*.pem"),
    }


def resent(cluster: Cluster, queue: str, jobs: list[str]) -> dict[str, list[int]]:
    """The levels of each job's messages in ``queue`` (once every job has one)."""
    found = {j: [lv for lv, _ in messages_of(cluster.redis, queue, j)] for j in jobs}
    return found if all(found.values()) else {}


def send_bare(cluster: Cluster, spec: dict[str, Any], **options: Any) -> str:
    """Send ``tandem.infer`` as a plain Celery client does (no tandem code); the job id."""
    bare = Celery(broker=cluster.url, backend=cluster.url)
    try:
        return str(bare.send_task("tandem.infer", kwargs={"spec": spec}, **options).id)
    finally:
        bare.close()


def delayed(script: Callable[[RecordedRequest], Reply], seconds: float) -> Callable[[RecordedRequest], Reply]:
    """``script`` answering every request ``seconds`` late."""

    def answer(request: RecordedRequest) -> Reply:
        reply = script(request)
        reply.delay = seconds
        return reply

    return answer
