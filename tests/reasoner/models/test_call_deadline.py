"""One model call, all its attempts included, ends within its ``timeout``
(``tandem.reasoner.models.attempts``).

A hanging host gets one attempt of the whole ``timeout`` and no second one; a retry gets only
what is left; a back-off that would leave no time for another attempt is not waited; a stream
that trickles past the deadline is cut. The caller gets the last failure as a
``TransientModelError`` (a worker's step reschedules it: ``tests/integration/test_model_call_deadline.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tandem.reasoner.errors import TransientModelError
from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.models.attempts import MIN_ATTEMPT_SECONDS, Attempts
from tandem.reasoner.models.litellm_service import LiteLlmModelService
from tests.openai_server import OpenAIServer, Reply
from tests.reasoner.models.test_direct_http import run_allowed
from tests.reasoner.models.test_litellm_async import USER, ASleeps

MODEL = "openai/test-model"
HANG = 60.0
"""Seconds the hanging host waits before answering (it stops waiting when the server stops)."""

PATHS: dict[str, tuple[bool, Callable[[LiteLlmModelService], ModelMessage]]] = {
    "litellm": (False, lambda s: s.generate("sys", USER)),
    "litellm-async": (False, lambda s: asyncio.run(s.agenerate("sys", USER))),
    "litellm-stream": (True, lambda s: s.generate("sys", USER)),
    "litellm-async-stream": (True, lambda s: asyncio.run(s.agenerate("sys", USER))),
    "direct": (False, lambda s: run_allowed(lambda: s.agenerate("sys", USER))),
    "direct-stream": (True, lambda s: run_allowed(lambda: s.agenerate("sys", USER))),
}


class Clock:
    """A fake monotonic clock that the recorded sleeps move on."""

    def __init__(self) -> None:
        self.now = 100.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)


def make(server: OpenAIServer, path: str, **kwargs: Any) -> LiteLlmModelService:
    kwargs.setdefault("asleep", ASleeps())
    kwargs.setdefault("sleep", lambda seconds: None)
    return LiteLlmModelService(MODEL, api_base=server.url, api_key="sk-t", stream=PATHS[path][0], **kwargs)


def test_attempts_share_one_deadline() -> None:
    clock = Clock()
    attempts = Attempts(10.0, clock)
    assert attempts.left() == 10.0 and attempts.fits(9.5) and not attempts.fits(9.6)
    clock.now += 4.0
    attempts.next(1.5)
    assert (attempts.number, attempts.held, attempts.left()) == (1, 1.5, 6.0)
    clock.now += 7.0
    assert attempts.left() == 0.0 and not attempts.fits(0.0)
    assert attempts.ran_out() == (
        "The call's time ran out (timeout=10s for all its attempts, 2 attempts made): left to the caller."
    )
    assert MIN_ATTEMPT_SECONDS == 0.5


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_hanging_host_gets_one_attempt_of_the_whole_timeout(path: str) -> None:
    with OpenAIServer([Reply("late", delay=HANG), Reply("4")]) as server:
        service = make(server, path, timeout=3.0)
        with pytest.raises(TransientModelError) as caught:
            PATHS[path][1](service)
        assert server.request_count == 1  # per attempt, as before, it was 5 attempts of 3 s
    message = str(caught.value)
    assert "timed out" in message and "TANDEM_<ROLE>_TIMEOUT" in message
    assert "The call's time ran out (timeout=3s for all its attempts, 1 attempt made)" in message


@pytest.mark.parametrize("path", ["litellm", "direct", "direct-stream", "litellm-async-stream"])
def test_a_retry_gets_only_what_is_left(path: str) -> None:
    with OpenAIServer([Reply(status=500), Reply("late", delay=HANG), Reply("4")]) as server:
        service = make(server, path, timeout=4.0)
        with pytest.raises(TransientModelError, match="2 attempts made"):
            PATHS[path][1](service)
        assert server.request_count == 2  # the third attempt, which would answer, is not made


@pytest.mark.parametrize("path", ["litellm", "litellm-async", "direct", "direct-stream"])
def test_back_off_waits_stop_at_the_deadline(path: str) -> None:
    """A host that answers 503 with ``Retry-After: 3`` to every request, a call of 10 s: tries at
    0, 3, 6 and 9 s (on a fake clock); at 9 s one more wait of 3 s would pass the deadline."""
    clock = Clock()
    with OpenAIServer(Reply(status=503, headers={"Retry-After": "3"})) as server:
        service = make(
            server, path, timeout=10.0, max_retries=10, clock=clock, sleep=clock.sleep, asleep=clock.asleep
        )
        with pytest.raises(TransientModelError) as caught:
            PATHS[path][1](service)
        assert server.request_count == 4
    assert clock.waits == [3.0, 3.0, 3.0]
    assert "HTTP 503" in str(caught.value) and "4 attempts made" in str(caught.value)
    assert caught.value.status_code == 503


@pytest.mark.parametrize("path", ["litellm-stream", "litellm-async-stream", "direct-stream"])
def test_a_stream_that_trickles_past_the_deadline_is_cut(path: str) -> None:
    """Each chunk comes within any read time-out; the whole reply would take 40 s."""
    reply = Reply("word " * 200, chunk_size=5, chunk_delay=0.2)
    seen: list[str] = []
    with OpenAIServer([reply, Reply("4")]) as server:
        service = make(server, path, timeout=3.0)
        with pytest.raises(TransientModelError):
            if path == "litellm-stream":
                service.generate("sys", USER, on_delta=lambda r, c: seen.append(c))
            elif path == "litellm-async-stream":
                asyncio.run(service.agenerate("sys", USER, on_delta=lambda r, c: seen.append(c)))
            else:
                run_allowed(lambda: service.agenerate("sys", USER, on_delta=lambda r, c: seen.append(c)))
        assert server.request_count == 1
    assert 0 < len("".join(seen)) < len(reply.content or ""), "the stream was cut part way"
