"""Handles on jobs of ``tandem api``: what ``submit``, ``fork`` and ``follow_up`` give.

A handle is the job's ``id`` and its client's methods with the id filled in: ``job.result()`` is
``api.result(job.id)``, ``job.cancel()`` is ``api.cancel(job.id)``, and so on; ``info()`` is
``api.job(job.id)`` and ``thread()`` is ``api.thread(job.thread_id)``. ``RemoteJob``'s methods
return what ``Client``'s do; ``AsyncRemoteJob``'s are ``AsyncClient``'s, awaited. Like
``tandem.JobHandle`` (the direct client's), with the same ``id``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tandem.client.events import JobEvent
    from tandem.client.http.aio import AsyncClient
    from tandem.client.http.models import Job, JobOutcome, JobState, ThreadJob
    from tandem.client.http.sync import Client


class RemoteJob:
    """A job of ``tandem api`` from blocking code: ``id``, ``thread_id``, and ``Client``'s methods
    for this job (see the module docstring)."""

    def __init__(self, client: Client, job_id: str, *, thread_id: str | None = None) -> None:
        self.client = client
        self.id = job_id
        self.thread_id = thread_id or job_id
        """The job's thread: the ``thread_id`` its spec named, its first job's, or its own id."""

    def __repr__(self) -> str:
        return f"RemoteJob({self.id!r})"

    def info(self) -> Job:
        """The job as the API shows it: state, outcome once ended, the pause it waits on."""
        return self.client.job(self.id)

    def status(self) -> JobState:
        """Where the job stands."""
        return self.client.status(self.id)

    def result(self, timeout: float | None = None) -> JobOutcome:
        """Wait for the job to end and return its outcome (``Client.result``)."""
        return self.client.result(self.id, timeout)

    def events(self, after: str = "0") -> Iterator[JobEvent]:
        """The job's typed events after ``after``, as they come, until ``final`` (``Client.events``)."""
        return self.client.events(self.id, after)

    def artifact(self, handle: str) -> str:
        """The whole text of the job's artifact ``handle`` (``Client.artifact``)."""
        return self.client.artifact(self.id, handle)

    def cancel(self) -> JobState:
        """Ask the job to stop (``Client.cancel``)."""
        return self.client.cancel(self.id)

    def decide(
        self,
        decisions: list[dict[str, Any]] | bool,
        *,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[dict[str, Any]]:
        """Decide the calls awaiting approval (``Client.decide``)."""
        return self.client.decide(self.id, decisions, pause_id=pause_id, idempotency_key=idempotency_key)

    def approve(
        self, *indices: int, pause_id: str | None = None, idempotency_key: str | None = None
    ) -> list[dict[str, Any]]:
        """Approve calls (none named: every undecided one) (``Client.approve``)."""
        return self.client.approve(self.id, *indices, pause_id=pause_id, idempotency_key=idempotency_key)

    def reject(
        self,
        *indices: int,
        reason: str | None = None,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[dict[str, Any]]:
        """Reject calls, telling the model ``reason`` (``Client.reject``)."""
        return self.client.reject(
            self.id, *indices, reason=reason, pause_id=pause_id, idempotency_key=idempotency_key
        )

    def answer(self, answer: Any, *, pause_id: str | None = None, idempotency_key: str | None = None) -> Any:
        """Answer the question the job waits on (``Client.answer``)."""
        return self.client.answer(self.id, answer, pause_id=pause_id, idempotency_key=idempotency_key)

    def resume(self, max_rounds: int | None = None) -> JobState:
        """Go on with the failed, cancelled or truncated job (``Client.resume``)."""
        return self.client.resume(self.id, max_rounds)

    def fork(self, round_no: int, goal: str | None = None, max_rounds: int | None = None) -> RemoteJob:
        """A new job from this one's rounds ``0..round_no-1`` (``Client.fork``)."""
        return self.client.fork(self.id, round_no, goal, max_rounds)

    def message(self, text: str, *, idempotency_key: str | None = None) -> str:
        """Send ``text`` into the running job (``Client.message``)."""
        return self.client.message(self.id, text, idempotency_key=idempotency_key)

    def follow_up(self, goal: str, *, idempotency_key: str | None = None) -> RemoteJob:
        """A new job in the ended job's thread (``Client.follow_up``)."""
        return self.client.follow_up(self.id, goal, idempotency_key=idempotency_key)

    def thread(self) -> list[ThreadJob]:
        """The jobs of this job's thread, in order (``Client.thread``)."""
        return self.client.thread(self.thread_id)


class AsyncRemoteJob:
    """A job of ``tandem api`` from asyncio code: ``RemoteJob``'s methods, awaited (``events`` is
    an async iterator)."""

    def __init__(self, client: AsyncClient, job_id: str, *, thread_id: str | None = None) -> None:
        self.client = client
        self.id = job_id
        self.thread_id = thread_id or job_id
        """The job's thread: the ``thread_id`` its spec named, its first job's, or its own id."""

    def __repr__(self) -> str:
        return f"AsyncRemoteJob({self.id!r})"

    async def info(self) -> Job:
        """``RemoteJob.info``, awaited."""
        return await self.client.job(self.id)

    async def status(self) -> JobState:
        """``RemoteJob.status``, awaited."""
        return await self.client.status(self.id)

    async def result(self, timeout: float | None = None) -> JobOutcome:
        """``RemoteJob.result``, awaited."""
        return await self.client.result(self.id, timeout)

    def events(self, after: str = "0") -> AsyncIterator[JobEvent]:
        """``RemoteJob.events``, as an async iterator."""
        return self.client.events(self.id, after)

    async def artifact(self, handle: str) -> str:
        """The whole text of the job's artifact ``handle`` (``AsyncClient.artifact``)."""
        return await self.client.artifact(self.id, handle)

    async def cancel(self) -> JobState:
        """``RemoteJob.cancel``, awaited."""
        return await self.client.cancel(self.id)

    async def decide(
        self,
        decisions: list[dict[str, Any]] | bool,
        *,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[dict[str, Any]]:
        """``RemoteJob.decide``, awaited."""
        return await self.client.decide(
            self.id, decisions, pause_id=pause_id, idempotency_key=idempotency_key
        )

    async def approve(
        self, *indices: int, pause_id: str | None = None, idempotency_key: str | None = None
    ) -> list[dict[str, Any]]:
        """``RemoteJob.approve``, awaited."""
        return await self.client.approve(
            self.id, *indices, pause_id=pause_id, idempotency_key=idempotency_key
        )

    async def reject(
        self,
        *indices: int,
        reason: str | None = None,
        pause_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[dict[str, Any]]:
        """``RemoteJob.reject``, awaited."""
        return await self.client.reject(
            self.id, *indices, reason=reason, pause_id=pause_id, idempotency_key=idempotency_key
        )

    async def answer(
        self, answer: Any, *, pause_id: str | None = None, idempotency_key: str | None = None
    ) -> Any:
        """``RemoteJob.answer``, awaited."""
        return await self.client.answer(self.id, answer, pause_id=pause_id, idempotency_key=idempotency_key)

    async def resume(self, max_rounds: int | None = None) -> JobState:
        """``RemoteJob.resume``, awaited."""
        return await self.client.resume(self.id, max_rounds)

    async def fork(
        self, round_no: int, goal: str | None = None, max_rounds: int | None = None
    ) -> AsyncRemoteJob:
        """``RemoteJob.fork``, awaited."""
        return await self.client.fork(self.id, round_no, goal, max_rounds)

    async def message(self, text: str, *, idempotency_key: str | None = None) -> str:
        """``RemoteJob.message``, awaited."""
        return await self.client.message(self.id, text, idempotency_key=idempotency_key)

    async def follow_up(self, goal: str, *, idempotency_key: str | None = None) -> AsyncRemoteJob:
        """``RemoteJob.follow_up``, awaited."""
        return await self.client.follow_up(self.id, goal, idempotency_key=idempotency_key)

    async def thread(self) -> list[ThreadJob]:
        """``RemoteJob.thread``, awaited."""
        return await self.client.thread(self.thread_id)
