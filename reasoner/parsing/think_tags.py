"""Formats that wrap thinking in a pair of tags: ``<think>…</think>`` and ``◁think▷…◁/think▷``.

One state machine serves the whole family; a :class:`ThinkTagParser` only says which tags to
look for and where the output starts. The machine has three states:

``opening``
    Nothing but whitespace seen yet. Whitespace followed by the start tag is consumed and
    reasoning begins (the start tag repeated right after it is consumed too: it is a marker,
    not thinking); anything else decides the starting state (reasoning when the request
    enabled thinking or the format always thinks, content otherwise) and is replayed there.
``reasoning``
    Text is reasoning until the end tag (consumed) or an interrupting tag such as
    ``<tool_call>`` (kept: it and everything after it is content). No end tag: all reasoning.
``content``
    Everything else is content, as written. Tags are no longer looked for.

The start tag is recognised only at the beginning of the output; a ``<think>`` written later
is content. With ``thinking=False`` the machine starts in ``content``: the output is returned
unchanged as content, tags included, so nothing the model wrote is lost or re-labelled.
"""

from __future__ import annotations

from tandem.reasoner.errors import ConfigurationError
from tandem.reasoner.parsing.base import (
    EMPTY_DELTA,
    ReasoningDelta,
    ReasoningParser,
    ReasoningStream,
    content_delta,
    reasoning_delta,
)

_new_tuple = tuple.__new__  # builds a ReasoningDelta without NamedTuple's slower __new__

_OPENING = 0
_REASONING = 1
_CONTENT = 2
_FINISHED = 3


class ThinkTagParser(ReasoningParser):
    """A think-tag format: its tags and whether it reasons when the request did not say.

    ``reasoning_by_default``: with ``thinking=None`` the output is taken to start inside
    reasoning even without a start tag (DeepSeek-R1, whose template already wrote ``<think>``).
    When false, ``thinking=None`` finds reasoning only if the output opens with the start tag.
    ``interrupt_tags`` end reasoning without an end tag and stay in the content (a tool call the
    model began before closing its thoughts).
    """

    def __init__(
        self,
        name: str,
        *,
        start_tag: str = "<think>",
        end_tag: str = "</think>",
        interrupt_tags: tuple[str, ...] = (),
        reasoning_by_default: bool = False,
    ) -> None:
        tags = (start_tag, end_tag, *interrupt_tags)
        if not all(tags) or len({tag[0] for tag in tags}) != 1:
            raise ConfigurationError(
                f"reasoning parser {name!r}: tags must be non-empty and share their first character,"
                f" got {tags!r}"
            )
        self.name = name
        self.start_tag = start_tag
        self.end_tag = end_tag
        self.interrupt_tags = interrupt_tags
        self.reasoning_by_default = reasoning_by_default
        self._mark = start_tag[0]
        closing_tags = (end_tag, *interrupt_tags)
        self._longest_closing = max(len(tag) for tag in closing_tags)
        self._closing_prefixes = frozenset(tag[:n] for tag in closing_tags for n in range(1, len(tag)))

    def stream(self, thinking: bool | None = None) -> ReasoningStream:
        """Start one reply. ``thinking=True`` may start inside reasoning; ``False`` never reasons."""
        if thinking is False:
            return _ThinkTagStream(self, _CONTENT, implicit_reasoning=False)
        implicit = self.reasoning_by_default if thinking is None else True
        return _ThinkTagStream(self, _OPENING, implicit_reasoning=implicit)


class _ThinkTagStream(ReasoningStream):
    """The state machine described in the module docstring, for one reply."""

    __slots__ = ("_fast", "_fmt", "_fresh", "_held", "_implicit", "_mark", "_state", "_whitespace")

    def __init__(self, fmt: ThinkTagParser, state: int, *, implicit_reasoning: bool) -> None:
        self._fmt = fmt
        self._state = state
        self._implicit = implicit_reasoning
        self._mark = fmt._mark
        self._held = ""
        """Text that may still turn out to be (the start of) a tag."""
        self._whitespace: list[str] = []
        """Leading whitespace seen in the opening state (dropped if the start tag follows)."""
        self._fresh = False
        """Reasoning has just begun with the start tag: the same tag repeated here is dropped."""
        self._fast = state
        """The state when it is ``_REASONING`` or ``_CONTENT`` and nothing is held back, else
        ``_OPENING``: one load tells ``feed`` whether a chunk may skip the slow path."""

    def feed(self, chunk: str) -> ReasoningDelta:
        # The common cases inline (no helper calls): this runs once per streamed token.
        fast = self._fast
        if fast == _CONTENT:
            return _new_tuple(ReasoningDelta, ("", chunk, ()))
        if fast == _REASONING and self._mark not in chunk:
            return _new_tuple(ReasoningDelta, (chunk, "", ()))
        return self._feed_slow(chunk)

    def finish(self) -> ReasoningDelta:
        state = self._state
        if state == _FINISHED:
            raise ValueError("this reasoning stream has already finished")
        self._state = _FINISHED
        self._fast = _OPENING
        held, self._held = self._held, ""
        if state == _OPENING:
            # Only whitespace and part of a start tag came: they are ordinary text.
            text = "".join(self._whitespace) + held
            self._whitespace = []
            return reasoning_delta(text) if self._implicit else content_delta(text)
        if state == _REASONING:
            # Truncated output stays reasoning, an unfinished tag included.
            return reasoning_delta(held)
        return EMPTY_DELTA

    def _feed_slow(self, chunk: str) -> ReasoningDelta:
        state = self._state
        if state == _FINISHED:
            raise ValueError("cannot feed a reasoning stream after finish()")
        if state == _OPENING:
            text = self._open(chunk)
            if text is None:
                return EMPTY_DELTA
        else:
            text = self._held + chunk
            self._held = ""
        reasoning = ""
        if self._state == _REASONING and self._fresh:
            text = self._skip_repeated_start(text)
        if self._state == _REASONING and not self._held:
            reasoning, text = self._scan_reasoning(text)
        self._fast = _OPENING if self._held or self._fresh else self._state
        if self._state == _CONTENT:
            return ReasoningDelta(reasoning, text)
        return reasoning_delta(reasoning)

    def _open(self, chunk: str) -> str | None:
        """Advance the opening state; return text to go on with, or ``None`` while undecided."""
        if self._held:
            rest = self._held + chunk
        else:
            rest = chunk.lstrip()
            if len(rest) != len(chunk):
                self._whitespace.append(chunk[: len(chunk) - len(rest)])
            if not rest:
                return None
        start = self._fmt.start_tag
        if rest.startswith(start):
            self._held = ""
            self._whitespace = []
            self._state = _REASONING
            self._fresh = True
            return rest[len(start) :]
        if start.startswith(rest):
            self._held = rest
            return None
        self._held = ""
        text = "".join(self._whitespace) + rest if self._whitespace else rest
        self._whitespace = []
        self._state = _REASONING if self._implicit else _CONTENT
        return text

    def _skip_repeated_start(self, text: str) -> str:
        """Drop start tags repeated right after the first; hold what may still become one."""
        start = self._fmt.start_tag
        while text.startswith(start):
            text = text[len(start) :]
        if start.startswith(text):  # empty, or the beginning of one more start tag
            self._held = text
            return ""
        self._fresh = False
        return text

    def _scan_reasoning(self, text: str) -> tuple[str, str]:
        """Split ``text`` at the first closing tag: ``(reasoning, content)``; may hold a tail.

        Each closing tag is searched for with ``str.find`` (C speed, however many stray ``<``
        the reasoning holds); only the last few characters are examined for a partial tag.
        """
        fmt = self._fmt
        end_tag = fmt.end_tag
        cut = text.find(end_tag)
        limit = len(text) if cut < 0 else cut
        for tag in fmt.interrupt_tags:
            found = text.find(tag, 0, limit)
            if found >= 0:
                self._state = _CONTENT
                return text[:found], text[found:]
        if cut >= 0:
            self._state = _CONTENT
            return text[:cut], text[cut + len(end_tag) :]
        # No whole tag: hold back the longest tail that could still grow into one.
        mark = self._mark
        i = text.find(mark, max(0, len(text) - fmt._longest_closing + 1))
        while i >= 0:
            if text[i:] in fmt._closing_prefixes:
                self._held = text[i:]
                return text[:i], ""
            i = text.find(mark, i + 1)
        return text, ""
