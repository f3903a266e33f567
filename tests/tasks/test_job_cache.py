"""What a worker keeps of a job between its steps (``Runtime.jobs``, ``tandem.tasks.job_cache``):
used by every step of a job, built anew when the job's spec changes, bounded."""

from __future__ import annotations

import importlib
from collections import deque
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
from cryptography.fernet import Fernet

from tandem.broker_config import Settings
from tandem.reasoner.task import Task
from tandem.tasks import runtime as runtime_module
from tandem.tasks.app import app
from tandem.tasks.control import resume as resume_module
from tandem.tasks.control.resume import resume_job
from tandem.tasks.job_cache import JobCache
from tandem.tasks.runtime import Runtime
from tandem.tasks.sealing import SecretBox
from tandem.toolkit.policy import ToolPolicy

JOB = "job-cache-1"


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    for module in app.conf.imports:  # the tasks, as a worker registers them
        importlib.import_module(module)
    key = Fernet.generate_key().decode()
    settings = Settings(lease_seconds=30.0, stall_seconds=60.0, memory_ttl=600, secrets_key=key)
    runtime = Runtime(settings)
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    monkeypatch.setattr(runtime_module, "_runtime", runtime)
    yield runtime


def run_job(monkeypatch: pytest.MonkeyPatch, spec: dict[str, Any], job_id: str = JOB) -> list[str]:
    """Run a job in this thread, every message applied in the order it was sent; the tasks run."""
    queue: deque[tuple[str, list[Any]]] = deque()
    monkeypatch.setattr(
        app, "send_task", lambda name, args=None, **kw: queue.append((name, list(args or [])))
    )
    app.tasks["tandem.infer"].apply(kwargs={"spec": spec}, task_id=job_id, ignore_result=True)
    ran = []
    while queue:
        name, args = queue.popleft()
        app.tasks[name].apply(args=args)
        ran.append(name)
    return ran


def test_the_steps_of_a_job_unseal_its_secrets_and_check_its_tools_once(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"unseal": 0, "for_job": 0, "recommend": 0}

    def counted(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(SecretBox, "unseal", counted("unseal", SecretBox.unseal))
    monkeypatch.setattr(ToolPolicy, "for_job", counted("for_job", ToolPolicy.for_job))
    monkeypatch.setattr(Task, "recommend", counted("recommend", Task.recommend))

    ran = run_job(monkeypatch, {"goal": "What is 17 * 23?", "secrets": {"token": "s3cret-77"}})

    steps = [n for n in ran if n != "tandem.infer"]
    assert len(steps) >= 3 and "tandem.run_tool" in steps  # a round with a tool call, then more
    assert rt.store.result(JOB).status == "completed"  # type: ignore[union-attr]
    assert calls["unseal"] == 1  # at intake; every step found the job's Task in the cache
    assert calls["for_job"] == 2  # the intake's spec check and its Task; no step checked again
    assert calls["recommend"] == 1  # the tools recommended at intake served every step
    assert rt.jobs.builds == 1  # all of them found the one entry the intake built
    assert len(rt.jobs) == 1


def test_a_job_resumed_with_a_new_spec_builds_anew(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    run_job(monkeypatch, {"goal": "What is 17 * 23?", "max_rounds": 1})
    assert rt.store.result(JOB).status == "truncated"  # type: ignore[union-attr]
    assert rt.jobs.builds == 1
    queue: list[tuple[str, list[Any]]] = []
    monkeypatch.setattr(
        app, "send_task", lambda name, args=None, **kw: queue.append((name, list(args or [])))
    )
    monkeypatch.setattr(resume_module.app.backend, "forget", lambda job_id: None)
    assert resume_job(rt, JOB, max_rounds=3)["accepted"]
    while queue:
        name, args = queue.pop(0)
        app.tasks[name].apply(args=args)
    assert rt.store.result(JOB).status == "completed"  # type: ignore[union-attr]
    assert rt.jobs.builds == 2  # the resumed spec (max_rounds=3) is another entry: never the stale one
    assert sorted(entry.task.max_rounds for entry in rt.jobs._entries.values()) == [1, 3]


def test_the_cache_keeps_the_most_recently_used_jobs_only() -> None:
    cache: JobCache[int] = JobCache(size=2)
    built: list[str] = []

    def build(job: str) -> int:
        built.append(job)
        return len(built)

    for job in ("a", "b", "a", "c", "a", "b"):
        cache.get(job, "{}", lambda job=job: build(job))  # type: ignore[misc]
    assert built == ["a", "b", "c", "b"]  # "b" was the least recently used when "c" came
    assert len(cache) == 2
    with pytest.raises(ValueError, match="size=0"):
        JobCache(size=0)
