"""Counting a request's tokens: the ``Tokenizer`` a role counts with, and ``TokenCache``.

A role's tokens are counted by the first of these at hand: the model's tokenizer (LiteLLM's
``token_counter`` for the models it holds one for), the host's tokenize endpoint
(``tandem.reasoner.models.token_count``), else ``conservative_estimate``, which errs high: one
token per ``ASCII_CHARS_PER_TOKEN`` ASCII letters and spaces, one per digit, punctuation mark and
line break (many tokenizers split numbers into single digits, and JSON and CSV into their marks)
and one per UTF-8 byte of other characters (byte-level tokenizers fall back to bytes for scripts
they saw little of); ``bench.context`` measures its error against real tokenizers.

A request is counted as the sum of its parts, each an upper bound of what it becomes in the chat
the model reads: the system prompt, the task, the tool schemas, and each stored message that the
view shows (``message_text``: its visible content and tool calls; a view only ever shortens or
wraps these, and ``MESSAGE_SLACK`` covers the wrapping and the chat template's markers). The
counts of stored messages are kept in a ``TokenCache`` per job (a stored message never changes),
so checking a request at round 100 costs a few hundred dictionary look-ups, not a tokenization of
the conversation.
"""

from __future__ import annotations

import json
import math
import string
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tandem.reasoner.function_calling import strip_thinking
from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.prompts import task_text

if TYPE_CHECKING:
    from tandem.toolkit.tool import Tool

__all__ = [
    "ASCII_CHARS_PER_TOKEN",
    "ESTIMATE",
    "MESSAGE_SLACK",
    "REQUEST_SLACK",
    "CountingTokenizer",
    "EstimateTokenizer",
    "TokenCache",
    "Tokenizer",
    "conservative_estimate",
    "message_text",
]

ASCII_CHARS_PER_TOKEN = 3
"""ASCII letters and spaces per token of the estimate (digits, punctuation and line breaks count a
token each): tokenizers make about 4 of English words (``bench.context``)."""
MESSAGE_SLACK = 16
"""Tokens counted for each message beyond its text: the chat template's markers, the prefix a
view writes before it ("The Actor replied:"), the joints where views merge messages."""
REQUEST_SLACK = 96
"""Tokens counted once per request beyond its parts: the reply's opening markers and the short
notes a view adds (the round note)."""

_SINGLES = str.maketrans("", "", string.digits + string.punctuation + "\n")
"""What the estimate counts a token each: digits, ASCII punctuation, line breaks."""


def conservative_estimate(text: str) -> int:
    """Tokens ``text`` takes at most, as far as an estimate can tell: one per digit, one per ASCII
    punctuation mark or line break, one per UTF-8 byte of a non-ASCII character, and one per
    ``ASCII_CHARS_PER_TOKEN`` other characters (letters, spaces), rounded up."""
    if not text:
        return 0
    plain = text.translate(_SINGLES)
    singles = len(text) - len(plain)
    if plain.isascii():
        return singles + math.ceil(len(plain) / ASCII_CHARS_PER_TOKEN)
    ascii_plain = len(plain.encode("ascii", "ignore"))
    foreign_bytes = len(plain.encode("utf-8", "surrogatepass")) - ascii_plain
    return singles + foreign_bytes + math.ceil(ascii_plain / ASCII_CHARS_PER_TOKEN)


@runtime_checkable
class Tokenizer(Protocol):
    """How a role's tokens are counted."""

    @property
    def name(self) -> str:
        """What counts: ``estimate``, or the tokenizer's name (a host's URL, a model's)."""
        ...

    def count(self, text: str) -> int:
        """The tokens of ``text``."""
        ...


@dataclass(frozen=True)
class EstimateTokenizer:
    """``conservative_estimate``: what counts when no tokenizer is at hand."""

    name: str = "estimate"

    def count(self, text: str) -> int:
        """``conservative_estimate(text)``."""
        return conservative_estimate(text)


ESTIMATE = EstimateTokenizer()


@dataclass
class CountingTokenizer:
    """A tokenizer function that may not answer (``None``: a host without a tokenize endpoint, one
    that failed): ``conservative_estimate`` stands in then."""

    name: str
    counter: Callable[[str], int | None]

    def count(self, text: str) -> int:
        """The tokenizer's count of ``text``, or the estimate when it has none."""
        if not text:
            return 0
        counted = self.counter(text)
        return conservative_estimate(text) if counted is None else counted


def message_text(message: ModelMessage) -> str:
    """What of a stored message any view may show a model: its content without thinking sections
    (a view shows that, or a part of it), its native tool calls, and for a round's results the
    ``<function_call_result>`` text (native calls read each output, which that text holds)."""
    text = message.content if message.role in ("tool", "person") else strip_thinking(message.content)
    if message.tool_calls:
        calls = "\n".join(f"{c.id} {c.name} {c.arguments}" for c in message.tool_calls)
        text = f"{text}\n{calls}"
    return text


@dataclass
class TokenCache:
    """Token counts kept for one job: a stored message is counted once per tokenizer.

    Stored messages never change (the first stored wins), so a message's count is kept under its
    key and length. The text of the task and of the system prompts is kept too, by value.
    Thread-safe: a worker's step threads may share one job's cache.
    """

    _counts: dict[tuple[str, int, str, str | None, int], int] = field(default_factory=dict)
    _texts: dict[tuple[str, str], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def message(self, tokenizer: Tokenizer, message: ModelMessage) -> int:
        """The tokens ``message`` may take in a request (``message_text`` and ``MESSAGE_SLACK``
        a message, plus a message's markers for each result of a round)."""
        key = (tokenizer.name, message.round, message.role, message.message_id, len(message.content))
        found = self._counts.get(key)
        if found is None:
            found = tokenizer.count(message_text(message)) + MESSAGE_SLACK * (
                1 + len(message.function_results)
            )
            with self._lock:
                self._counts[key] = found
        return found

    def messages(self, tokenizer: Tokenizer, messages: Sequence[ModelMessage]) -> int:
        """The tokens of ``messages`` (their ``message`` counts summed)."""
        return sum(self.message(tokenizer, m) for m in messages)

    def tools(self, tokenizer: Tokenizer, tools: Sequence[Tool]) -> int:
        """The tokens of ``tools``' schemas as a request sends them (native tool calling), kept by
        the tools' names: a job's tools do not change."""
        if not tools:
            return 0
        key = (tokenizer.name, "\x00tools:" + ",".join(t.name for t in tools))
        found = self._texts.get(key)
        if found is None:
            schemas = json.dumps([t.openai_schema() for t in tools])
            found = tokenizer.count(schemas) + MESSAGE_SLACK * len(tools)
            with self._lock:
                self._texts[key] = found
        return found

    def task(self, tokenizer: Tokenizer, goal: str, context: str) -> int:
        """The tokens of the task as the models read it (``task_text``), kept for the job: its goal
        and context do not change."""
        key = (tokenizer.name, f"\x00task:{len(goal)}:{len(context)}")
        found = self._texts.get(key)
        if found is None:
            found = tokenizer.count(task_text(goal, context))
            with self._lock:
                self._texts[key] = found
        return found

    def text(self, tokenizer: Tokenizer, text: str) -> int:
        """The tokens of ``text`` (a task, a system prompt: kept by value)."""
        key = (tokenizer.name, text)
        found = self._texts.get(key)
        if found is None:
            found = tokenizer.count(text)
            with self._lock:
                if len(self._texts) > 64:  # prompts vary little in a job: keep a handful
                    self._texts.clear()
                self._texts[key] = found
        return found
