"""Event streams at scale: one Redis reader per job, fanned out to every client of that job.

The job's Redis stream is the truth; what a reader hands its clients is a fast path over it:

* A ``JobFeed`` is started by the first client of a job and stops once it has none. It waits in
  ``XREAD BLOCK`` on its own connection of the *stream pool* (``TANDEM_API_STREAM_JOBS`` of them:
  one per job followed, never one per client) and puts each batch of events, rendered to SSE text
  once, on the queue of every client of the job.
* A client (``EventHub.stream``) first joins the feed, then reads what it missed from its own
  position (``Last-Event-ID``) with ``XRANGE`` on the *request pool*, then takes the feed's
  batches, skipping ids it already sent. Joining before reading leaves no gap: the feed's
  position is never past the end of the stream the client's own read saw.
* A client too slow for its queue is marked *lagging* instead of holding events in memory: it
  reads from Redis again from the last id it sent, then goes on with the queue.
* A feed that sees the job ended (its result written) or gone reads once more without waiting,
  so that events written between its last read and that look (``final`` among them) still go
  out, and then tells its clients it is done. A ``final`` event ends a client's stream unless the
  job was resumed since (``final_ends``); the feed works that out once for all its clients.
* A feed wakes its clients a slice at a time (``FANOUT_SLICE``), so that other requests are
  served between their writes.
* If Redis fails under a feed, its clients' responses are cut (never a clean end without
  ``final``): they reconnect with ``Last-Event-ID`` and get 503 until Redis is back.

``StreamSlots`` bounds the streams one token (or one client address, without tokens) holds open
at once (``TANDEM_API_MAX_STREAMS``); one more is refused with 429 before anything is read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from redis.asyncio import Redis as AsyncRedis
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from tandem.tasks.job_events import decode_entry, event_json
from tandem.tasks.state.store import FINAL_LOOKAHEAD, JobStore, entry_types, final_ends

PAGE = 200
"""Events read per ``XREAD``/``XRANGE``."""
QUEUE_BATCHES = 64
"""Batches a client's queue holds before the client is marked lagging."""
FANOUT_SLICE = 16
"""Clients a feed wakes per turn of the event loop: each woken client writes to its socket in the
next turn, so a job with 1,000 clients would otherwise hold one turn for 1,000 writes, and every
other request (``/healthz`` first) would wait behind them."""

StreamId = tuple[int, int]
Chunk = tuple[StreamId, str, bool]
"""One event: its stream id, its SSE text, and whether it ends the stream (a ``final`` that does)."""


def stream_id(text: str) -> StreamId:
    """``"1700000000000-3"`` as ``(1700000000000, 3)`` (``"0"`` is ``(0, 0)``), to compare ids."""
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


class StreamsFull(Exception):
    """This process already follows ``TANDEM_API_STREAM_JOBS`` jobs: a new job's stream must wait."""


class Subscription:
    """One client of a feed: a bounded queue of batches, and flags the feed sets without waiting."""

    def __init__(self, feed: JobFeed) -> None:
        self.feed = feed
        self.queue: asyncio.Queue[list[Chunk] | None] = asyncio.Queue(maxsize=QUEUE_BATCHES)
        self.lagging = False
        self.done = False
        self.failure: BaseException | None = None

    def offer(self, batch: list[Chunk] | None) -> None:
        """Queue ``batch`` (``None``: a wake-up), or mark the client lagging when its queue is full."""
        try:
            self.queue.put_nowait(batch)
        except asyncio.QueueFull:
            self.lagging = batch is not None or self.lagging


class JobFeed:
    """The one reader of a job's events in this process."""

    def __init__(self, hub: EventHub, job_id: str) -> None:
        self.hub = hub
        self.job_id = job_id
        self.key = hub.store.key(job_id, "events")
        self.subscribers: set[Subscription] = set()
        self.ready = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"tandem-feed-{job_id}")

    async def _run(self) -> None:
        hub = self.hub
        try:
            newest = await hub.redis.xrevrange(self.key, count=1)
            cursor = _text(newest[0][0]) if newest else "0-0"
            self.ready.set()
            ending = False
            while self.subscribers:
                block = None if ending else hub.block_ms
                batch = await hub.wait_redis.xread({self.key: cursor}, count=PAGE, block=block)
                entries = [entry for _stream, found in batch or [] for entry in found]
                if entries:
                    chunks = await hub.render(self.job_id, entries)
                    cursor = _text(entries[-1][0])
                    for count, sub in enumerate(list(self.subscribers), 1):
                        sub.offer(chunks)
                        if count % FANOUT_SLICE == 0:
                            await asyncio.sleep(0)  # let other requests in between the clients' writes
                    continue
                if ending:
                    break
                ended = await hub.redis.exists(hub.store.key(self.job_id, "result"))
                known = await hub.redis.exists(hub.store.key(self.job_id, "state"))
                ending = bool(ended or not known)
            self._finish(None)
        except asyncio.CancelledError:
            self._finish(None)
            raise
        except Exception as exc:  # Redis went away: every client's response is cut
            self._finish(exc)

    def _finish(self, failure: BaseException | None) -> None:
        """Tell every client the feed is over (no ``await``: nobody joins in between)."""
        self.ready.set()
        if self.hub.feeds.get(self.job_id) is self:
            del self.hub.feeds[self.job_id]
        for sub in list(self.subscribers):
            sub.done, sub.failure = True, failure
            sub.offer(None)


class EventHub:
    """The job feeds of one API process, and the SSE text of each client's stream."""

    def __init__(
        self,
        store: JobStore,
        redis: AsyncRedis,
        wait_redis: AsyncRedis,
        *,
        heartbeat: float,
        max_jobs: int,
    ) -> None:
        self.store = store
        self.redis = redis
        self.wait_redis = wait_redis
        self.heartbeat = heartbeat
        self.block_ms = max(1, int(heartbeat * 1000))
        self.max_jobs = max_jobs
        self.feeds: dict[str, JobFeed] = {}

    @property
    def readers(self) -> int:
        """How many jobs' events this process reads from Redis now (one reader each)."""
        return len(self.feeds)

    def subscribe(self, job_id: str) -> Subscription:
        """Join ``job_id``'s feed, starting it if needed (``StreamsFull`` past ``max_jobs`` jobs)."""
        feed = self.feeds.get(job_id)
        if feed is None:
            if len(self.feeds) >= self.max_jobs:
                raise StreamsFull(job_id)
            feed = self.feeds[job_id] = JobFeed(self, job_id)
        sub = Subscription(feed)
        feed.subscribers.add(sub)
        return sub

    @staticmethod
    def unsubscribe(sub: Subscription) -> None:
        """Leave the feed; the feed stops after its current read once it has no client left."""
        sub.feed.subscribers.discard(sub)

    async def render(self, job_id: str, entries: list[Any]) -> list[Chunk]:
        """Raw stream entries as SSE chunks, each ``final`` marked with whether it ends the stream."""
        chunks = []
        for entry_id, fields in entries:
            event = decode_entry(entry_id, fields)
            text = f"id: {event.id}\nevent: {event.type}\ndata: {event_json(event)}\n\n"
            ends = event.type == "final" and await self._final_is_last(job_id, event.id)
            chunks.append((stream_id(event.id), text, ends))
        return chunks

    async def _final_is_last(self, job_id: str, event_id: str) -> bool:
        after = await self.redis.xrange(
            self.store.key(job_id, "events"), min=f"({event_id}", count=FINAL_LOOKAHEAD
        )
        state = await self.redis.hget(self.store.key(job_id, "state"), "state")
        return final_ends(entry_types(after), state)

    async def _missed(self, job_id: str, after: StreamId) -> AsyncIterator[Chunk]:
        """The events after ``after``, read from Redis page by page."""
        key = self.store.key(job_id, "events")
        position = f"{after[0]}-{after[1]}"
        while True:
            entries = await self.redis.xrange(key, min=f"({position}", count=PAGE)
            for chunk in await self.render(job_id, entries):
                yield chunk
            if len(entries) < PAGE:
                return
            position = _text(entries[-1][0])

    async def stream(
        self, sub: Subscription, after: str, disconnected: Callable[[], Any]
    ) -> AsyncIterator[str]:
        """The SSE text of one client of ``sub``'s job, from after stream id ``after``."""
        job_id = sub.feed.job_id
        last = stream_id(after)
        try:
            yield f"retry: 2000\n: job {job_id} events after {after}\n\n"
            await sub.feed.ready.wait()
            sub.lagging = True  # first, what it missed
            while True:
                if sub.lagging:
                    sub.lagging = False
                    async for chunk_id, text, ends in self._missed(job_id, last):
                        last = chunk_id
                        yield text
                        if ends:
                            return
                if sub.done and sub.queue.empty():
                    if sub.failure is not None:
                        raise sub.failure
                    return
                batches: list[list[Chunk] | None] = []
                if sub.queue.empty():
                    try:
                        async with asyncio.timeout(self.heartbeat):
                            batches.append(await sub.queue.get())
                    except TimeoutError:
                        if await disconnected():
                            return
                        yield ": heartbeat\n\n"
                        continue
                while not sub.queue.empty():
                    batches.append(sub.queue.get_nowait())
                # Everything queued goes out as one write: a busy process sends fewer, larger ones.
                texts, ends = _newer(batches, last)
                if texts:
                    last = texts[-1][0]
                    yield "".join(text for _id, text in texts)
                if ends:
                    return
        finally:
            self.unsubscribe(sub)

    async def aclose(self) -> None:
        """Stop every feed."""
        for feed in list(self.feeds.values()):
            feed.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await feed.task


class StreamSlots:
    """Counts the open streams of each client identity against a limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: dict[str, int] = {}

    def acquire(self, who: str) -> bool:
        """Take a slot for ``who``; ``False`` when it already holds ``limit`` streams."""
        held = self.open.get(who, 0)
        if held >= self.limit:
            return False
        self.open[who] = held + 1
        return True

    def release(self, who: str) -> None:
        """Give ``who``'s slot back."""
        held = self.open.get(who, 0) - 1
        if held > 0:
            self.open[who] = held
        else:
            self.open.pop(who, None)


class EventStreamResponse(StreamingResponse):
    """A ``text/event-stream`` response that runs ``on_close`` however it ends (even never started)."""

    def __init__(self, content: AsyncIterator[str], on_close: Callable[[], None]) -> None:
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        super().__init__(content, media_type="text/event-stream", headers=headers)
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()


def _newer(batches: list[list[Chunk] | None], last: StreamId) -> tuple[list[tuple[StreamId, str]], bool]:
    """The chunks of ``batches`` after ``last`` up to the first that ends the stream, and whether
    one does."""
    texts: list[tuple[StreamId, str]] = []
    for batch in batches:
        for chunk_id, text, ends in batch or ():
            if chunk_id > last:
                texts.append((chunk_id, text))
                last = chunk_id
                if ends:
                    return texts, True
    return texts, False


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
