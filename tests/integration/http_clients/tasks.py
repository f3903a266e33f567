"""Many asyncio tasks on one ``AsyncClient``, built from a URL and a token as docs/api.md does.

``many_jobs``: each task submits a job, reads its events, its result by id and its status by handle.
``hundred_streams``: ``streams`` tasks follow one parked job's events (the count one token may hold,
``TANDEM_API_MAX_STREAMS``), then the same client reads the job's status and approves its call.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tandem import AsyncClient
from tandem.client.events import JobEvent
from tests.integration.http_clients.world import ADD, spec


async def many_jobs(url: str, token: str, count: int) -> list[tuple[str, list[JobEvent], str, str]]:
    """``(job id, its events, its result's status, its state)`` for each of ``count`` tasks."""

    async def one(api: AsyncClient, n: int) -> tuple[str, list[JobEvent], str, str]:
        job = await api.submit(spec(f"task {n}", ADD))
        events = [e async for e in job.events()]
        outcome = await api.result(job.id, timeout=300)
        state = await job.status()
        return job.id, events, outcome.status, state.state

    async with AsyncClient(url, token=token) as api:
        return list(await asyncio.gather(*(one(api, n) for n in range(count))))


async def hundred_streams(
    url: str, token: str, job_id: str, streams: int = 100
) -> tuple[Any, list[list[JobEvent]]]:
    """The job's status read once every stream has seen ``approval_requested``, and each stream's
    events to the end (the same client approves call 1 in between)."""
    async with AsyncClient(url, token=token) as api:
        parked = asyncio.Semaphore(0)

        async def follow() -> list[JobEvent]:
            got = []
            async for event in api.events(job_id):
                got.append(event)
                if event.type == "approval_requested":
                    parked.release()
            return got

        tasks = [asyncio.create_task(follow()) for _ in range(streams)]
        for _ in tasks:
            await asyncio.wait_for(parked.acquire(), 300)
        state = await api.status(job_id)
        await api.approve(job_id, 1)
        return state, list(await asyncio.gather(*tasks))
