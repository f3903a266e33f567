"""The Harmony reader's states: where each piece of a reply goes, outside and inside messages.

``HarmonyReader`` holds the state of one reply (outside any message, in a header, in a body, in a
stripped-form header) and routes ordinary text by it: outside text that may still be a header,
token-form messages opened and closed by the tokens, stripped-form messages opened by their words.
``tandem.reasoner.parsing.harmony`` holds the parser and the stream built on it, whose ``feed``
finds the tokens (with fast paths for the common chunks) and hands everything else to this
class; its docstring says what each part of a reply becomes.
"""

from __future__ import annotations

from tandem.reasoner.parsing.base import EMPTY_DELTA, ParsedToolCall, ReasoningDelta, ReasoningStream
from tandem.reasoner.parsing.harmony_format import (
    ASCII_LOWER,
    ASSISTANT,
    CHANNELS,
    HEADER_LIMIT,
    HEADER_START_RE,
    LONGEST_MARKER,
    LONGEST_OPENER,
    MARKER_PREFIXES,
    MESSAGE,
    OPENERS,
    START,
    TERMINATORS,
    find_marker,
    read_header,
    read_stripped_header,
)

# The reader's states (``_state``).
OUTSIDE = 0
HEADER = 1
BODY = 2
FINISHED = 3
STRIPPED_HEADER = 4

# Where a body goes (``_kind``), and the codes of the stream's fast paths (``_fast``).
REASONING = 0
CONTENT = 1
TOOL = 2
SLOW = -1
STRIPPED = 3
"""Added to a body kind in ``_fast``: an inked stripped-form body. What it holds back is in ``_held``
(white space, which a message's end trims, then maybe the beginning of a marker), no ``<``."""
STRIPPED_REASONING = REASONING + STRIPPED
STRIPPED_CONTENT = CONTENT + STRIPPED
STRIPPED_LT = -5
"""Added to a body kind in ``_fast``: as ``STRIPPED``, and ``_held`` ends with ``<`` (below ``SLOW``)."""
HELD_LIMIT = 32
"""Most white space the stripped form's fast path holds in ``_held``; a longer blank run goes to
``_pending_space`` (a list, joined once), so that the cost stays linear."""


class HarmonyReader(ReasoningStream):
    """The state of one Harmony reply being read, and how ordinary text is routed in each state.

    The stream (``tandem.reasoner.parsing.harmony``) finds the tokens and calls ``_take`` for the
    text between them and ``_on_token`` for each token; this class decides where text goes: outside
    any message, in a header, in a token-form body or in the stripped form.
    """

    __slots__ = (
        "_analysis_kind",
        "_body_inked",
        "_channel",
        "_fast",
        "_held",
        "_kind",
        "_lead",
        "_opening",
        "_outside_chars",
        "_outside_inked",
        "_outside_newline",
        "_parts",
        "_pending_space",
        "_state",
        "_stripped",
        "_tool_name",
    )

    def __init__(self, *, analysis_is_reasoning: bool) -> None:
        self._analysis_kind = REASONING if analysis_is_reasoning else CONTENT
        self._state = OUTSIDE
        self._held = ""
        """A tail that may be the beginning of a token (or, in the stripped form, of a marker)."""
        self._kind = CONTENT
        """Where the current body goes (state ``BODY`` only)."""
        self._tool_name = ""
        self._parts: list[str] = []
        """Outside text, header text or tool-call arguments, by state."""
        self._outside_inked = False
        self._outside_newline = False
        self._outside_chars = 0
        self._opening = True
        """No token and no non-blank text yet: the output may still be the stripped form."""
        self._lead = ""
        """The output's first non-blank text while it may still open the stripped form."""
        self._stripped = False
        """The current body is in the stripped form: scanned for markers, white space trimmed."""
        self._channel = ""
        """The channel of the stripped-form message being read."""
        self._body_inked = False
        self._pending_space: list[str] = []
        """Stripped form: white space at the end of the body so far (dropped if the body ends)."""
        self._fast = SLOW
        """What ``feed`` may do without ``_feed_slow``: the body kind inside a token-form body with
        nothing held back; plus ``STRIPPED`` in an inked stripped-form body (plus ``STRIPPED_LT``
        instead when what it holds back ends with ``<``); else ``SLOW``."""

    def _take(
        self,
        text: str,
        at_end: bool,
        reasoning: list[str],
        content: list[str],
        calls: list[ParsedToolCall],
    ) -> None:
        """Route ordinary text according to the current state.

        ``at_end``: more text may follow (the chunk ends, or with what may begin a token), so a
        tail that may begin a stripped-form marker is held back; otherwise a token or the end of
        output follows and everything is decided.
        """
        while text:
            state = self._state
            if state == BODY:
                if self._stripped:
                    text = self._stripped_body(text, at_end, reasoning, content, calls)
                    continue
                kind = self._kind
                if kind == REASONING:
                    reasoning.append(text)
                elif kind == CONTENT:
                    content.append(text)
                else:
                    self._parts.append(text)
                return
            if state == HEADER:
                self._parts.append(text)
                return
            if state == STRIPPED_HEADER:
                text = self._stripped_header(text, at_end)
                continue
            if self._opening:
                text = self._open(text, at_end, content)
                continue
            self._outside_text(text, content)
            return

    # -- outside messages -------------------------------------------------------------------

    def _open(self, text: str, at_end: bool, content: list[str]) -> str:
        """Decide between the token form and the stripped form; return text left to route."""
        if not self._lead:
            ink = text.lstrip()
            if len(ink) != len(text):
                self._outside_text(text[: len(text) - len(ink)], content)
            if not ink:
                return ""
            text = ink
        lead = self._lead + text
        low = lead[: LONGEST_OPENER + 1].translate(ASCII_LOWER)
        for opener in OPENERS:
            if low.startswith(opener) and len(lead) > len(opener):
                self._opening = False
                self._lead = ""
                self._enter_outside()  # the blank text before it is dropped
                self._enter_stripped_header(opener.removeprefix(ASSISTANT))
                return lead[len(opener) :]
        if at_end and len(lead) <= LONGEST_OPENER and any(o.startswith(low) for o in OPENERS):
            self._lead = lead
            return ""
        self._opening = False
        self._lead = ""
        return lead

    def _flush_lead(self, content: list[str]) -> None:
        """A token or the end of output came: the opening text was not the stripped form."""
        if self._opening:
            self._opening = False
            lead, self._lead = self._lead, ""
            if lead:
                self._outside_text(lead, content)

    def _outside_text(self, text: str, content: list[str]) -> None:
        self._parts.append(text)
        self._outside_chars += len(text)
        self._outside_inked = self._outside_inked or not text.isspace()
        self._outside_newline = self._outside_newline or "\n" in text
        if self._outside_inked and (self._outside_newline or self._outside_chars > HEADER_LIMIT):
            # Too long or multi-line for a header: a body without one, shown as content.
            content.extend(self._parts)
            self._enter_body(CONTENT)

    def _on_token(
        self, token: str, reasoning: list[str], content: list[str], calls: list[ParsedToolCall]
    ) -> None:
        self._flush_lead(content)
        while self._state == STRIPPED_HEADER:
            self._end_stripped_header(reasoning, content, calls)
        if self._stripped:  # a token: back to the token form
            self._stripped = False
        state = self._state
        if state == OUTSIDE:
            if token == START or token in TERMINATORS:
                self._flush_outside(content)
                if token == START:
                    self._state = HEADER
                return
            header = "".join(self._parts)
            if not HEADER_START_RE.fullmatch(header):  # prose, not a role: content
                self._flush_outside(content)
                header = ""
            if token == MESSAGE:
                self._open_body(header)
            else:  # the header goes on: channel or constraint
                self._parts = [header, token]
                self._state = HEADER
        elif state == HEADER:
            if token == START:
                self._parts = []
            elif token == MESSAGE:
                self._open_body("".join(self._parts))
            elif token in TERMINATORS:  # a header without a body: nothing to report
                self._enter_outside()
            else:
                self._parts.append(token)
        else:
            self._close_body(calls)
            if token in TERMINATORS:
                self._enter_outside()
            elif token == MESSAGE:
                self._open_body("")
            else:
                self._state = HEADER
                self._parts = [] if token == START else [token]

    # -- token-form messages ----------------------------------------------------------------

    def _open_body(self, header: str) -> None:
        channel, recipient = read_header(header)
        self._enter_body(self._kind_of(channel, recipient))

    def _kind_of(self, channel: str, recipient: str | None) -> int:
        """Where a message's body goes; a tool call also sets the tool's name."""
        if recipient is not None and recipient != ASSISTANT:
            self._tool_name = recipient.removeprefix("functions.")
            return TOOL
        if channel == "analysis":
            return self._analysis_kind
        return CONTENT

    def _enter_body(self, kind: int) -> None:
        self._state = BODY
        self._kind = kind
        self._parts = []

    def _close_body(self, calls: list[ParsedToolCall]) -> None:
        if self._kind == TOOL:
            calls.append(ParsedToolCall(name=self._tool_name, arguments="".join(self._parts)))
        self._parts = []
        self._pending_space = []
        self._body_inked = False

    def _enter_outside(self) -> None:
        self._state = OUTSIDE
        self._parts = []
        self._outside_inked = self._outside_newline = False
        self._outside_chars = 0

    def _flush_outside(self, content: list[str]) -> None:
        """Outside text followed by no header: content, unless blank or a channel name (filler)."""
        if self._outside_inked and "".join(self._parts).strip() not in CHANNELS:
            content.extend(self._parts)
        self._enter_outside()

    # -- stripped-form messages -------------------------------------------------------------

    def _enter_stripped_header(self, channel: str) -> None:
        self._state = STRIPPED_HEADER
        self._channel = channel
        self._parts = []

    def _stripped_header(self, text: str, at_end: bool) -> str:
        """Read what follows a stripped-form channel name; return the body text once decided."""
        self._parts.append(text)
        head = "".join(self._parts) if len(self._parts) > 1 else text
        decided = read_stripped_header(head, final=not at_end or len(head) > HEADER_LIMIT)
        if decided is None:
            self._parts = [head]
            return ""
        self._open_stripped_body(decided[0])
        return decided[1]

    def _end_stripped_header(
        self, reasoning: list[str], content: list[str], calls: list[ParsedToolCall]
    ) -> None:
        """A token or the end of output ends the header: decide it and route what it held."""
        head = "".join(self._parts)
        recipient, rest = read_stripped_header(head, final=True) or (None, head)
        self._open_stripped_body(recipient)
        self._take(rest, False, reasoning, content, calls)

    def _open_stripped_body(self, recipient: str | None) -> None:
        self._enter_body(self._kind_of(self._channel, recipient))
        self._stripped = True
        self._body_inked = False
        self._pending_space = []

    def _stripped_body(
        self,
        text: str,
        at_end: bool,
        reasoning: list[str],
        content: list[str],
        calls: list[ParsedToolCall],
    ) -> str:
        """Route stripped-form body text up to the next marker; return the text after the marker."""
        marker = find_marker(text)
        if marker is not None:
            at, channel = marker
            self._emit(text[:at], reasoning, content)
            self._close_body(calls)
            self._enter_stripped_header(channel)
            return text[at + len(ASSISTANT) + len(channel) :]
        if at_end:  # a tail that may still grow into a marker
            start = max(0, len(text) - LONGEST_MARKER + 1)
            tail = text[start:].translate(ASCII_LOWER)
            k = tail.find("a")
            while k >= 0:
                if tail[k:] in MARKER_PREFIXES:
                    self._emit(text[: start + k], reasoning, content)
                    self._held = text[start + k :]
                    return ""
                k = tail.find("a", k + 1)
        self._emit(text, reasoning, content)
        return ""

    def _emit(self, text: str, reasoning: list[str], content: list[str]) -> None:
        """Route stripped-form body text, trimming the white space around the whole body."""
        if not self._body_inked:
            text = text.lstrip()
            if not text:
                return
            self._body_inked = True
        ink_end = len(text.rstrip())
        if ink_end == 0:
            self._pending_space.append(text)
            return
        out = text[:ink_end] if ink_end < len(text) else text
        if self._pending_space:
            out = "".join(self._pending_space) + out
            self._pending_space = []
        if ink_end < len(text):
            self._pending_space.append(text[ink_end:])
        kind = self._kind
        if kind == REASONING:
            reasoning.append(out)
        elif kind == CONTENT:
            content.append(out)
        else:
            self._parts.append(out)


def delta_of(reasoning: list[str], content: list[str], calls: list[ParsedToolCall]) -> ReasoningDelta:
    """The delta of what one call released (``EMPTY_DELTA`` when nothing)."""
    if not (reasoning or content or calls):
        return EMPTY_DELTA
    return ReasoningDelta("".join(reasoning), "".join(content), tuple(calls))
