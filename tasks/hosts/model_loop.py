"""``ModelLoop``: one asyncio event loop per worker process, where the HTTP of model calls runs.

A model worker runs its steps in up to a few hundred threads. When each thread makes its own
synchronous LiteLLM call, the threads fight over the GIL inside httpx and a call's CPU grows
with the thread count (about 8 ms a call at 200 threads against 3 ms alone). Here the step
thread hands the call's coroutine to the process's loop and sleeps until it ends: the HTTP of
every call runs on that one thread, which costs what a lone call costs.

Contracts of ``ModelLoop.run``:

* the coroutine's result is returned, and its exception raised, in the calling thread, as if
  the call had been made there;
* ``on_delta`` is called in the calling thread, in order: the loop only queues the pieces (the
  real listener writes to Redis, which would hold every other call on the loop);
* anything that interrupts the waiting thread (an exception from ``on_delta`` too) cancels the
  call on the loop before it propagates;
* the loop and its daemon thread are started on first use, and again in a forked child (the
  loop is keyed by ``os.getpid()``: a child inherits the parent's loop but not its thread).

The loop is not used under gevent (``threads_are_green``): there every step is a greenlet
already, and a real thread would block the hub.

With ``direct_http`` (``TANDEM_DIRECT_HTTP``, on by default), the loop allows the calls it runs
to skip LiteLLM where the host speaks the OpenAI protocol as it is
(``tandem.reasoner.models.direct_http``); its HTTP session is closed when the loop stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tandem.reasoner.models import direct_http
from tandem.reasoner.models.model_service import DeltaListener

__all__ = ["MODEL_LOOP", "ModelLoop", "threads_are_green"]

T = TypeVar("T")


class ModelLoop:
    """An asyncio loop in a daemon thread, started lazily, once per process."""

    def __init__(self, name: str = "tandem-model-loop", *, direct_http: bool = True) -> None:
        self.name = name
        self.direct_http = direct_http
        """Whether a loop started from now on lets calls skip LiteLLM (see the module docstring)."""
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid: int | None = None

    def __repr__(self) -> str:
        state = "running" if self._loop is not None and self._pid == os.getpid() else "not started"
        return f"ModelLoop({self.name!r}, {state})"

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """This process's loop: started on first use, and again after a fork."""
        pid = os.getpid()
        loop = self._loop
        if loop is not None and self._pid == pid:
            return loop
        with self._lock:
            if self._loop is None or self._pid != pid:
                loop = asyncio.new_event_loop()
                if self.direct_http:
                    direct_http.allow(loop)
                # Calls submitted before run_forever starts wait in the loop's queue: no handshake.
                self._thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
                self._thread.start()
                self._loop, self._pid = loop, pid
            return self._loop

    def stop(self) -> None:
        """Stop this process's loop and its thread, and close the loop (calls still on it are
        dropped); the next call starts a new one. A worker never needs it: the thread is a daemon."""
        with self._lock:
            loop, thread, pid = self._loop, self._thread, self._pid
            self._loop = self._thread = self._pid = None
        if loop is None or thread is None or pid != os.getpid():
            return
        with contextlib.suppress(Exception):  # best effort: what is left is dropped with the loop
            asyncio.run_coroutine_threadsafe(direct_http.close(), loop).result(timeout=5)
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result(timeout=5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()

    def forget(self) -> None:
        """Drop the loop without stopping it (a forked child's copy: its thread is not there).
        The next call starts a new one."""
        self._lock = threading.Lock()  # the parent may have held it at the fork
        self._loop = self._thread = self._pid = None

    def run(
        self,
        call: Callable[[DeltaListener | None], Coroutine[Any, Any, T]],
        on_delta: DeltaListener | None = None,
    ) -> T:
        """Run ``call(listener)`` on the loop, wait for it in this thread and return its result.

        ``listener`` is ``None`` when ``on_delta`` is; otherwise it queues each
        ``(reasoning, content)`` piece, and this thread passes it to ``on_delta`` while it waits.
        """
        if on_delta is None:
            future = asyncio.run_coroutine_threadsafe(call(None), self.loop)
            try:
                return future.result()
            except BaseException:
                future.cancel()  # a no-op once the call has ended
                raise
        pieces: queue.SimpleQueue[tuple[str, str] | None] = queue.SimpleQueue()

        def enqueue(reasoning: str, content: str) -> None:
            pieces.put((reasoning, content))

        future = asyncio.run_coroutine_threadsafe(call(enqueue), self.loop)
        # Runs after the coroutine's last enqueue (on the loop thread), so it closes the queue.
        future.add_done_callback(lambda _: pieces.put(None))
        try:
            while (piece := pieces.get()) is not None:
                on_delta(*piece)
            return future.result()
        except BaseException:
            future.cancel()
            raise


async def _cancel_all() -> None:
    """Cancel the loop's other tasks (LiteLLM's logging worker, calls left) and wait for them."""
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()


def threads_are_green() -> bool:
    """True when gevent has patched ``threading`` (``--pool gevent``): no loop thread then."""
    if "gevent" not in sys.modules:  # never imported: nothing can be patched
        return False
    try:
        from gevent import monkey
    except ImportError:  # a module that only looks like gevent
        return False
    return bool(monkey.is_module_patched("threading"))


MODEL_LOOP = ModelLoop()
"""The loop of this process, shared by every role's ``HostModel``."""

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=MODEL_LOOP.forget)
