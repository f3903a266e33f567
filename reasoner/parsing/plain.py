"""The ``none`` format: the model does not think out loud, so everything is content."""

from __future__ import annotations

from tandem.reasoner.parsing.base import (
    EMPTY_DELTA,
    ReasoningDelta,
    ReasoningParser,
    ReasoningStream,
    content_delta,
)


class PlainParser(ReasoningParser):
    """Returns the output unchanged as content, whatever ``thinking`` says."""

    def __init__(self, name: str = "none") -> None:
        self.name = name

    def stream(self, thinking: bool | None = None) -> ReasoningStream:
        """Start one reply; ``thinking`` is ignored."""
        return _PlainStream()


class _PlainStream(ReasoningStream):
    __slots__ = ("_finished",)

    def __init__(self) -> None:
        self._finished = False

    def feed(self, chunk: str) -> ReasoningDelta:
        if self._finished:
            raise ValueError("cannot feed a reasoning stream after finish()")
        return content_delta(chunk)

    def finish(self) -> ReasoningDelta:
        if self._finished:
            raise ValueError("this reasoning stream has already finished")
        self._finished = True
        return EMPTY_DELTA
