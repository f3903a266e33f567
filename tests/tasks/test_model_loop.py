"""``ModelLoop``: coroutines run on one loop thread per process; results, errors and deltas come
back to the calling thread; an interrupted wait cancels the call; a fork gets its own loop."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import types
from collections.abc import Iterator

import pytest

from tandem.reasoner.models.model_service import DeltaListener
from tandem.tasks.hosts import model_loop as model_loop_module
from tandem.tasks.hosts.model_loop import ModelLoop, threads_are_green


@pytest.fixture
def loop() -> Iterator[ModelLoop]:
    model_loop = ModelLoop("test-model-loop")
    yield model_loop
    model_loop.stop()


async def answer(value: str, listener: DeltaListener | None = None, pieces: int = 0) -> str:
    for n in range(pieces):
        assert listener is not None
        listener("r" if n == 0 else "", f"{n},")
        await asyncio.sleep(0)
    return value


def test_a_call_returns_its_result_from_the_loop_thread(loop: ModelLoop) -> None:
    seen: list[str] = []

    async def where() -> str:
        seen.append(threading.current_thread().name)
        return "done"

    assert loop.run(lambda listener: where()) == "done"
    assert seen == ["test-model-loop"]


def test_the_loop_starts_on_first_use_once_and_is_a_daemon(loop: ModelLoop) -> None:
    before = {t.name for t in threading.enumerate()}
    assert "test-model-loop" not in before
    assert loop.run(lambda listener: answer("a")) == "a"
    assert loop.run(lambda listener: answer("b")) == "b"
    threads = [t for t in threading.enumerate() if t.name == "test-model-loop"]
    assert len(threads) == 1 and threads[0].daemon
    assert loop.loop is loop.loop


def test_the_coroutines_exception_is_raised_in_the_caller(loop: ModelLoop) -> None:
    class Refused(Exception):
        pass

    async def fail() -> str:
        raise Refused("no, 'x'")

    with pytest.raises(Refused, match="no, 'x'"):
        loop.run(lambda listener: fail())


def test_deltas_reach_the_listener_in_the_calling_thread_in_order(loop: ModelLoop) -> None:
    caller = threading.get_ident()
    received: list[tuple[str, str, int]] = []
    result = loop.run(
        lambda listener: answer("end", listener, pieces=50),
        lambda r, c: received.append((r, c, threading.get_ident())),
    )
    assert result == "end"
    assert [(r, c) for r, c, _ in received] == [("r" if n == 0 else "", f"{n},") for n in range(50)]
    assert {ident for _, _, ident in received} == {caller}


def test_without_a_listener_the_coroutine_gets_none(loop: ModelLoop) -> None:
    given: list[object] = []

    async def record(listener: DeltaListener | None) -> str:
        given.append(listener)
        return "x"

    assert loop.run(record) == "x"
    assert given == [None]


async def until_cancelled(cancelled: threading.Event) -> str:
    """A call that never ends by itself; sets ``cancelled`` when it is cancelled."""
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        cancelled.set()
        raise
    return "never"


def test_a_failing_listener_cancels_the_call_and_propagates(loop: ModelLoop) -> None:
    cancelled = threading.Event()
    started = threading.Event()

    async def long_call(listener: DeltaListener | None) -> str:
        assert listener is not None
        listener("", "first")
        started.set()
        return await until_cancelled(cancelled)

    class Interrupted(BaseException):
        pass

    def listener(reasoning: str, content: str) -> None:
        started.wait(5)
        raise Interrupted(content)

    with pytest.raises(Interrupted, match="first"):
        loop.run(long_call, listener)
    assert cancelled.wait(5)


def test_an_interrupted_wait_cancels_the_call(loop: ModelLoop, monkeypatch: pytest.MonkeyPatch) -> None:
    """Anything raised while the thread waits for a call without deltas cancels it too."""
    cancelled = threading.Event()

    import concurrent.futures

    def interrupted(self: concurrent.futures.Future[str], timeout: float | None = None) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(concurrent.futures.Future, "result", interrupted)
    with pytest.raises(KeyboardInterrupt):
        loop.run(lambda listener: until_cancelled(cancelled))
    monkeypatch.undo()
    assert cancelled.wait(5)


def test_a_new_process_id_gets_a_new_loop(loop: ModelLoop, monkeypatch: pytest.MonkeyPatch) -> None:
    assert loop.run(lambda listener: answer("parent")) == "parent"
    parents = loop.loop
    real_pid = os.getpid()
    monkeypatch.setattr(model_loop_module.os, "getpid", lambda: real_pid + 1)
    assert loop.run(lambda listener: answer("child")) == "child"
    childs = loop.loop
    assert childs is not parents and loop.loop is childs
    loop.stop()  # the "child's" loop (its pid is the fake one)
    monkeypatch.undo()
    assert childs.is_closed() and not parents.is_closed()
    parents.call_soon_threadsafe(parents.stop)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_runs_calls_on_its_own_loop(loop: ModelLoop) -> None:
    assert loop.run(lambda listener: answer("parent")) == "parent"
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's loop thread is not here
        try:
            loop.forget()  # what the at-fork hook does for MODEL_LOOP
            ok = loop.run(lambda listener: answer("child", listener, 2), lambda r, c: None) == "child"
            os.write(write_end, b"ok" if ok else b"no")
        finally:
            os._exit(0)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    assert os.read(read_end, 2) == b"ok"
    os.close(read_end)
    assert os.waitstatus_to_exitcode(status) == 0
    assert loop.run(lambda listener: answer("parent again")) == "parent again"


def test_threads_are_green_only_when_gevent_patched_threading(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "gevent", raising=False)
    assert threads_are_green() is False
    patched: set[str] = set()
    monkey = types.SimpleNamespace(is_module_patched=lambda name: name in patched)
    monkeypatch.setitem(sys.modules, "gevent", types.SimpleNamespace(monkey=monkey))
    monkeypatch.setitem(sys.modules, "gevent.monkey", monkey)
    assert threads_are_green() is False
    patched.add("threading")
    assert threads_are_green() is True


def test_a_worker_shutting_down_stops_the_process_loop_and_closes_its_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from celery.signals import worker_shutdown

    from tandem.reasoner.models import direct_http
    from tandem.tasks import worker_signals

    process_loop = ModelLoop("test-shutdown-loop")
    monkeypatch.setattr(model_loop_module, "MODEL_LOOP", process_loop)

    async def open_session(_: DeltaListener | None) -> bool:
        direct_http.allow(asyncio.get_running_loop())
        return direct_http.session() is not None

    assert process_loop.run(open_session)
    session = next(iter(direct_http._sessions.values()))
    assert worker_signals._stop_model_loop in [ref() for _, ref in worker_shutdown.receivers]
    worker_shutdown.send(sender=None)
    assert session.closed  # not left to the interpreter's exit ("Unclosed client session")
    assert process_loop._loop is None
