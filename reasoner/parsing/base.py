"""What every reasoning parser returns and promises: splits, deltas, streams and parsers.

A parser turns a model's raw output into thinking (``reasoning``), the visible answer
(``content``) and, for formats that carry them in-band (Harmony), tool calls. Each format is
one state machine, a :class:`ReasoningStream`; :meth:`ReasoningParser.parse` is that same
machine fed the whole text as one chunk, so a reply parsed at once and the same reply streamed
in any chunking always give the same result.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

_new_tuple = tuple.__new__


class ParsedToolCall(BaseModel):
    """A tool call the model wrote in-band (Harmony ``to=functions.NAME``).

    ``arguments`` is the message body exactly as written, usually JSON but never validated here.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    arguments: str


class ReasoningDelta(NamedTuple):
    """What one ``feed`` (or ``finish``) released: new text only, never text released before.

    ``tool_calls`` holds the calls whose message ended within this delta (Harmony only).
    """

    reasoning: str
    content: str
    tool_calls: tuple[ParsedToolCall, ...] = ()


EMPTY_DELTA = ReasoningDelta("", "", ())
"""The delta of a feed that released nothing (e.g. all of it may be part of a tag)."""


def reasoning_delta(text: str) -> ReasoningDelta:
    """A delta of reasoning text only (built without ``NamedTuple.__new__``: this is the hot path)."""
    return _new_tuple(ReasoningDelta, (text, "", ()))


def content_delta(text: str) -> ReasoningDelta:
    """A delta of content text only (built without ``NamedTuple.__new__``: this is the hot path)."""
    return _new_tuple(ReasoningDelta, ("", text, ()))


class ReasoningSplit(NamedTuple):
    """A whole reply split into its thinking, its visible answer and its in-band tool calls."""

    reasoning: str
    content: str
    tool_calls: list[ParsedToolCall]


class ReasoningStream(ABC):
    """The incremental parser of one reply; make one per reply with :meth:`ReasoningParser.stream`.

    Contract:

    * ``feed(chunk)`` returns only text not returned before. Text that may be the beginning of a
      tag is held back (at most one tag's length) until the next chunk or ``finish`` decides it;
      in gpt-oss's stripped form, so is white space that may end a message (it is trimmed).
    * ``finish()`` releases what was held back and ends the stream; ``feed`` after it raises
      ``ValueError``.
    * Concatenating every delta's fields gives exactly ``parser.parse(text)`` for any chunking
      of ``text``.
    * Each character is examined a bounded number of times: cost is linear in the output.
    """

    __slots__ = ()

    @abstractmethod
    def feed(self, chunk: str) -> ReasoningDelta:
        """Consume the next piece of the reply and return what it released."""

    @abstractmethod
    def finish(self) -> ReasoningDelta:
        """Release everything still held back; the reply has ended (possibly truncated)."""


class ReasoningParser(ABC):
    """A reasoning format. Parsers hold no per-reply state: share one between threads.

    ``thinking`` tells what the request asked of the model:

    * ``True``: thinking was enabled; the output may start inside reasoning without a start tag.
    * ``False``: thinking was disabled; the result never holds reasoning.
    * ``None``: the format's default (see each parser's docstring).
    """

    name: str
    """The name :func:`tandem.reasoner.parsing.get_reasoning_parser` knows this parser by."""

    @abstractmethod
    def stream(self, thinking: bool | None = None) -> ReasoningStream:
        """Start parsing one reply that will arrive in chunks."""

    def parse(self, text: str, thinking: bool | None = None) -> ReasoningSplit:
        """Split a whole reply: the stream fed ``text`` as one chunk, then finished."""
        stream = self.stream(thinking)
        first = stream.feed(text)
        last = stream.finish()
        return ReasoningSplit(
            first.reasoning + last.reasoning,
            first.content + last.content,
            [*first.tool_calls, *last.tool_calls],
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
