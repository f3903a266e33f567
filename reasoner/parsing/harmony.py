"""OpenAI's Harmony format (gpt-oss): messages on channels, tool calls addressed by recipient.

A reply is a run of messages::

    <|start|>assistant<|channel|>analysis<|message|>thinking…<|end|>
    <|start|>assistant<|channel|>commentary to=functions.lookup <|constrain|>json<|message|>{"q": 1}<|call|>
    <|start|>assistant<|channel|>final<|message|>the answer<|return|>

The header (between ``<|start|>`` and ``<|message|>``) names the role, the channel and maybe a
recipient (``to=…``, before or after the channel). The body runs to ``<|end|>``,
``<|return|>`` or ``<|call|>``. A reply may open straight with the header
(``<|channel|>analysis<|message|>…``) because the prompt already wrote ``<|start|>assistant``.

Where a body goes:

* any channel with a recipient → a :class:`ParsedToolCall` (``to=functions.NAME`` gives name
  ``NAME``; any other recipient, such as ``browser.search``, is kept whole as the name), released
  when its message ends, or at ``finish`` if the output stops inside it;
* ``analysis`` → reasoning (content when ``thinking=False``: gpt-oss cannot stop thinking, so a
  disabled request still gets every word, just not labelled as reasoning);
* ``final``, ``commentary`` without recipient (a preamble the user may see), a missing or
  unknown channel → content.

Text outside any message is held while it could still be a header (``assistant`` before a
``<|channel|>``). It is content once it holds a non-blank character and either a newline or
more than :data:`HEADER_LIMIT` characters, or when a ``<|start|>`` or end token follows it or
the output ends; blank text between messages is dropped. So plain text without any Harmony
token is all content. A header the output never completes is dropped. ``<|`` that begins no
token is ordinary text. ``thinking=None`` and ``thinking=True`` behave alike.
"""

from __future__ import annotations

import re

from tandem.reasoner.parsing.base import (
    EMPTY_DELTA,
    ParsedToolCall,
    ReasoningDelta,
    ReasoningParser,
    ReasoningStream,
)

START = "<|start|>"
CHANNEL = "<|channel|>"
MESSAGE = "<|message|>"
CONSTRAIN = "<|constrain|>"
END = "<|end|>"
RETURN = "<|return|>"
CALL = "<|call|>"
TOKENS = (START, CHANNEL, MESSAGE, CONSTRAIN, END, RETURN, CALL)
"""Every Harmony token this parser acts on; they all begin with ``<|``."""
_TERMINATORS = frozenset((END, RETURN, CALL))
_TOKEN_SET = frozenset(TOKENS)
_TOKEN_PREFIXES = frozenset(token[:n] for token in TOKENS for n in range(1, len(token)))
_LONGEST = max(len(token) for token in TOKENS)

HEADER_LIMIT = 256
"""Text outside a message longer than this (or with a newline) is content, not a header."""

_OUTSIDE = 0
_HEADER = 1
_BODY = 2
_FINISHED = 3

_REASONING = 0
_CONTENT = 1
_TOOL = 2
_SLOW = -1

_new_tuple = tuple.__new__  # builds a ReasoningDelta without NamedTuple's slower __new__

_CHANNEL_RE = re.compile(r"<\|channel\|>\s*([^\s<]*)")
_RECIPIENT_RE = re.compile(r"(?:^|[\s>])to=([^\s<]+)")


def read_header(header: str) -> tuple[str, str | None]:
    """Return ``(channel, recipient)`` of a header; each may be missing (``""`` / ``None``)."""
    channel = _CHANNEL_RE.search(header)
    recipient = _RECIPIENT_RE.search(header)
    return (channel.group(1) if channel else ""), (recipient.group(1) if recipient else None)


class HarmonyParser(ReasoningParser):
    """The ``gpt-oss`` parser; see the module docstring for where each message goes."""

    def __init__(self, name: str = "gpt-oss") -> None:
        self.name = name

    def stream(self, thinking: bool | None = None) -> ReasoningStream:
        """Start one reply; ``thinking=False`` turns analysis text into content."""
        return _HarmonyStream(analysis_is_reasoning=thinking is not False)


class _HarmonyStream(ReasoningStream):
    __slots__ = (
        "_analysis_kind",
        "_fast",
        "_held",
        "_kind",
        "_outside_chars",
        "_outside_inked",
        "_outside_newline",
        "_parts",
        "_state",
        "_tool_name",
    )

    def __init__(self, *, analysis_is_reasoning: bool) -> None:
        self._analysis_kind = _REASONING if analysis_is_reasoning else _CONTENT
        self._state = _OUTSIDE
        self._held = ""
        """A tail that may be the beginning of a token."""
        self._kind = _CONTENT
        """Where the current body goes (state ``_BODY`` only)."""
        self._tool_name = ""
        self._parts: list[str] = []
        """Outside text, header text or tool-call arguments, by state."""
        self._outside_inked = False
        self._outside_newline = False
        self._outside_chars = 0
        self._fast = _SLOW
        """The body kind when inside a body with nothing held back, else ``_SLOW``."""

    def feed(self, chunk: str) -> ReasoningDelta:
        # Inside a body with nothing held back, a chunk without "<" holds no token: route it
        # directly (inline, no helper calls: this runs once per streamed token).
        if "<" not in chunk:
            fast = self._fast
            if fast == _REASONING:
                return _new_tuple(ReasoningDelta, (chunk, "", ()))
            if fast == _CONTENT:
                return _new_tuple(ReasoningDelta, ("", chunk, ()))
            if fast == _TOOL:
                self._parts.append(chunk)
                return EMPTY_DELTA
        return self._feed_slow(chunk)

    def finish(self) -> ReasoningDelta:
        if self._state == _FINISHED:
            raise ValueError("this reasoning stream has already finished")
        reasoning: list[str] = []
        content: list[str] = []
        calls: list[ParsedToolCall] = []
        if self._held:
            self._take(self._held, reasoning, content)
            self._held = ""
        if self._state == _OUTSIDE:
            self._flush_outside(content)
        elif self._state == _BODY:
            self._close_body(calls)
        self._state = _FINISHED
        self._fast = _SLOW
        self._parts = []
        return _delta(reasoning, content, calls)

    def _feed_slow(self, chunk: str) -> ReasoningDelta:
        if self._state == _FINISHED:
            raise ValueError("cannot feed a reasoning stream after finish()")
        text = self._held + chunk if self._held else chunk
        self._held = ""
        reasoning: list[str] = []
        content: list[str] = []
        calls: list[ParsedToolCall] = []
        find = text.find
        pos = 0
        i = find("<|")
        while i >= 0:
            close = find("|>", i + 2, i + _LONGEST)
            token = text[i : close + 2] if close >= 0 else ""
            if token in _TOKEN_SET:
                self._take(text[pos:i], reasoning, content)
                self._on_token(token, content, calls)
                pos = i + len(token)
                i = find("<|", pos)
            elif close < 0 and text[i:] in _TOKEN_PREFIXES:  # a token cut by the chunk's end
                self._take(text[pos:i], reasoning, content)
                self._held = text[i:]
                break
            else:  # "<|" that begins no token: ordinary text
                i = find("<|", i + 1)
        else:
            end = len(text)
            if end > pos and text[-1] == "<":
                self._held = "<"
                end -= 1
            self._take(text[pos:end], reasoning, content)
        self._fast = self._kind if self._state == _BODY and not self._held else _SLOW
        return _delta(reasoning, content, calls)

    def _take(self, text: str, reasoning: list[str], content: list[str]) -> None:
        """Route ordinary text according to the current state."""
        if not text:
            return
        state = self._state
        if state == _BODY:
            kind = self._kind
            if kind == _REASONING:
                reasoning.append(text)
            elif kind == _CONTENT:
                content.append(text)
            else:
                self._parts.append(text)
        elif state == _HEADER:
            self._parts.append(text)
        elif state == _OUTSIDE:
            self._parts.append(text)
            self._outside_chars += len(text)
            self._outside_inked = self._outside_inked or not text.isspace()
            self._outside_newline = self._outside_newline or "\n" in text
            if self._outside_inked and (self._outside_newline or self._outside_chars > HEADER_LIMIT):
                # Too long or multi-line for a header: a body without one, shown as content.
                content.extend(self._parts)
                self._enter_body(_CONTENT)

    def _on_token(self, token: str, content: list[str], calls: list[ParsedToolCall]) -> None:
        state = self._state
        if state == _OUTSIDE:
            if token == START or token in _TERMINATORS:
                self._flush_outside(content)
                if token == START:
                    self._state = _HEADER
            elif token == MESSAGE:
                self._open_body("".join(self._parts))
            else:  # the outside text was the header's start: role and maybe recipient
                self._parts.append(token)
                self._state = _HEADER
        elif state == _HEADER:
            if token == START:
                self._parts = []
            elif token == MESSAGE:
                self._open_body("".join(self._parts))
            elif token in _TERMINATORS:  # a header without a body: nothing to report
                self._enter_outside()
            else:
                self._parts.append(token)
        else:
            self._close_body(calls)
            if token in _TERMINATORS:
                self._enter_outside()
            elif token == MESSAGE:
                self._open_body("")
            else:
                self._state = _HEADER
                self._parts = [] if token == START else [token]

    def _open_body(self, header: str) -> None:
        channel, recipient = read_header(header)
        if recipient is not None:
            self._tool_name = recipient.removeprefix("functions.")
            self._enter_body(_TOOL)
        elif channel == "analysis":
            self._enter_body(self._analysis_kind)
        else:
            self._enter_body(_CONTENT)

    def _enter_body(self, kind: int) -> None:
        self._state = _BODY
        self._kind = kind
        self._parts = []

    def _close_body(self, calls: list[ParsedToolCall]) -> None:
        if self._kind == _TOOL:
            calls.append(ParsedToolCall(name=self._tool_name, arguments="".join(self._parts)))
        self._parts = []

    def _enter_outside(self) -> None:
        self._state = _OUTSIDE
        self._parts = []
        self._outside_inked = self._outside_newline = False
        self._outside_chars = 0

    def _flush_outside(self, content: list[str]) -> None:
        """Outside text followed by no header: content unless blank."""
        if self._outside_inked:
            content.extend(self._parts)
        self._enter_outside()


def _delta(reasoning: list[str], content: list[str], calls: list[ParsedToolCall]) -> ReasoningDelta:
    if not (reasoning or content or calls):
        return EMPTY_DELTA
    return ReasoningDelta("".join(reasoning), "".join(content), tuple(calls))
