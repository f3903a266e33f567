"""A job's artifacts in Redis: stored once under the job's hash tag, counted with its memory against
its limit, living as long as its other keys (end, resume, fork), read back by ``JobHandle.artifact``.
On fakeredis, the real Redis and the one-slot check (``machine`` fixture); the runs with real workers
are in ``tests/integration/test_artifacts.py``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest

from tandem.broker_config import Settings
from tandem.client.handle import JobHandle
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus, ModelMessage
from tandem.tasks import runtime as runtime_module
from tandem.tasks.control import resume as resume_module
from tandem.tasks.control.resume import fork_job, resume_job
from tandem.tasks.errors import UnknownArtifactError
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobSpec
from tandem.tasks.state.artifacts import TOTAL_FIELD, RedisArtifactStore
from tandem.tasks.state.keys import JOB_PARTS
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.steps import dispatch
from tandem.toolkit.artifacts import ArtifactRef, artifact_handle

JOB = "job-a"
TEXT = "é" * 5000 + "needle"


def created(machine: JobMachine, job_id: str = JOB, ttl_after: int = 600) -> None:
    spec = JobSpec(goal="g").model_dump_json()
    assert machine.create(job_id, spec, "dual", (0, "thinker"), [], timeout=60, ttl_after=ttl_after)


def test_artifacts_are_one_of_the_jobs_keys() -> None:
    assert "artifacts" in JOB_PARTS


def test_an_artifact_is_stored_once_and_read_back_whole(machine: JobMachine) -> None:
    created(machine)
    store = machine.store.artifacts(JOB)
    assert store.key == f"{machine.prefix}:{{{JOB}}}:artifacts"
    handle = artifact_handle(1, 2, TEXT)
    ref = store.put(handle, TEXT)
    assert ref == ArtifactRef(handle=handle, chars=5006, bytes=10_006)
    assert store.put(handle, TEXT) == ref  # a call run twice: one artifact
    assert store.get(handle) == TEXT
    assert store.get("r9-c9-0000000000") is None and store.get(TOTAL_FIELD) is None
    assert store.total_bytes() == 10_006 and store.handles() == [handle]


def test_an_artifact_takes_the_jobs_ttl_and_keeps_it_at_the_end(machine: JobMachine) -> None:
    created(machine, ttl_after=600)
    store = machine.store.artifacts(JOB)
    store.put("r0-c1-0123456789", "x" * 100)
    redis = machine.redis
    state_ttl = redis.ttl(machine.store.key(JOB, "state"))
    assert state_ttl > 0 and abs(redis.ttl(store.key) - state_ttl) <= 1
    assert machine.finish(JOB, '{"job_id": "job-a", "status": "completed"}', "completed", "", 77)
    assert 70 <= redis.ttl(store.key) <= 77
    assert abs(redis.ttl(store.key) - redis.ttl(machine.store.key(JOB, "state"))) <= 1


def test_an_artifact_over_the_memory_limit_is_refused_counting_the_conversation(machine: JobMachine) -> None:
    created(machine)
    memory = machine.store.memory(JOB)
    message = ModelMessage(role="thinker", round=0, content="a" * 3000)
    memory.add_message(message)
    conversation = len(message.model_dump_json().encode())
    store = machine.store.artifacts(JOB)
    limit = conversation + 5000
    assert store.put("r0-c1-0000000001", "b" * 4000, limit=limit) is not None
    assert store.put("r0-c1-0000000002", "c" * 1001, limit=limit) is None  # 1 byte over
    assert store.get("r0-c1-0000000002") is None and store.total_bytes() == 4000
    assert store.put("r0-c1-0000000003", "d" * 1000, limit=limit) is not None  # exactly at it
    assert store.put("r0-c1-0000000004", "e" * 10_000) is not None  # no limit


def test_a_lone_surrogate_is_stored_as_a_replacement_character(machine: JobMachine) -> None:
    created(machine)
    store = machine.store.artifacts(JOB)
    ref = store.put("r0-c1-0000000005", "a\ud800b")
    assert ref is not None and store.get("r0-c1-0000000005") == "a\ufffdb"


# -- resume and fork ------------------------------------------------------------------------


@pytest.fixture
def server() -> fakeredis.FakeServer:
    return fakeredis.FakeServer()


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch, server: fakeredis.FakeServer) -> Iterator[Runtime]:
    runtime = Runtime(Settings(lease_seconds=2.0, stall_seconds=60.0, memory_ttl=600))
    runtime.__dict__["redis"] = fakeredis.FakeRedis(server=server)
    monkeypatch.setattr(runtime_module, "_runtime", runtime)
    monkeypatch.setattr(dispatch.app, "send_task", lambda name, args, **kw: None)
    monkeypatch.setattr(resume_module.app.backend, "forget", lambda job_id: None)
    yield runtime


def ended_job_with_an_artifact(rt: Runtime) -> str:
    created(rt.machine)
    handle = artifact_handle(0, 1, TEXT)
    ref = rt.store.artifacts(JOB).put(handle, TEXT)
    result = FunctionCallResult(
        index=1, name="fetch", status=FunctionCallStatus.SUCCEEDED, output="preview", artifact=ref
    )
    call = '<action><function_call>{"name": "fetch", "args": {}}</function_call></action>'
    memory = rt.store.memory(JOB)
    for m in [
        ModelMessage(role="thinker", round=0, content="<instruction>go</instruction>"),
        ModelMessage(role="actor", round=0, content=call),
        ModelMessage(role="tool", round=0, content="r", function_results=[result]),
        ModelMessage(role="thinker", round=1, content="<instruction>go</instruction>"),
    ]:
        memory.add_message(m)
    assert rt.machine.finish(JOB, '{"job_id": "job-a", "status": "failed"}', "failed", "boom", 60)
    return handle


def test_a_fork_reads_the_artifacts_of_the_rounds_it_keeps(rt: Runtime) -> None:
    handle = ended_job_with_an_artifact(rt)
    answer: dict[str, Any] = fork_job(rt, JOB, 1, fork_id="fork-1")
    assert answer["accepted"], answer
    fork = rt.store.artifacts("fork-1")
    assert fork.get(handle) == TEXT and fork.total_bytes() == len(TEXT.encode())
    # Under the fork's own hash tag, with the fork's TTL (its keys are live).
    state_ttl = rt.redis.ttl(rt.store.key("fork-1", "state"))
    assert abs(rt.redis.ttl(fork.key) - state_ttl) <= 1
    # A fork sent again copies nothing twice.
    assert fork_job(rt, JOB, 1, fork_id="fork-1")["accepted"]
    assert fork.total_bytes() == len(TEXT.encode())


def test_a_resumed_job_keeps_its_artifacts_alive_as_long_as_its_other_keys(rt: Runtime) -> None:
    handle = ended_job_with_an_artifact(rt)
    key = rt.store.artifacts(JOB).key
    assert rt.redis.ttl(key) <= 60
    answer = resume_job(rt, JOB)
    assert answer["accepted"], answer
    assert rt.redis.ttl(key) > 60
    assert abs(rt.redis.ttl(key) - rt.redis.ttl(rt.store.key(JOB, "state"))) <= 1
    assert rt.store.artifacts(JOB).get(handle) == TEXT


def test_job_handle_reads_an_artifact_whole_and_refuses_an_unknown_handle(
    rt: Runtime, server: fakeredis.FakeServer
) -> None:
    handle = ended_job_with_an_artifact(rt)
    job = JobHandle(JOB, rt.store, dispatch.app)
    assert job.artifact(handle) == TEXT
    with pytest.raises(UnknownArtifactError, match="holds no artifact 'r0-c1-0000000000'"):
        job.artifact("r0-c1-0000000000")
    job = JobHandle(JOB, rt.store, dispatch.app, aredis=lambda: fakeredis.FakeAsyncRedis(server=server))
    assert asyncio.run(job.aartifact(handle)) == TEXT
    with pytest.raises(UnknownArtifactError):
        asyncio.run(job.aartifact("#bytes"))


def test_the_redis_store_is_an_artifact_store() -> None:
    from tandem.toolkit.artifacts import ArtifactStore

    assert isinstance(RedisArtifactStore(fakeredis.FakeRedis(), JOB), ArtifactStore)
