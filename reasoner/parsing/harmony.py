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
  when its message ends, or at ``finish`` if the output stops inside it. The recipient
  ``assistant`` is the exception: that message is a tool's answer addressed to the model
  (``<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>…``), shown as content;
* ``analysis`` → reasoning (content when ``thinking=False``: gpt-oss cannot stop thinking, so a
  disabled request still gets every word, just not labelled as reasoning);
* ``final``, ``commentary`` without recipient (a preamble the user may see), a missing or
  unknown channel → content.

Text outside any message is held while it could still be a header (``assistant`` before a
``<|channel|>``). It is content once it holds a non-blank character and either a newline or
more than :data:`HEADER_LIMIT` characters, or when a ``<|start|>`` or end token follows it or
the output ends. Blank text between messages is dropped, and so is a channel name standing alone
there (filler some hosts leave: ``<|call|>commentary<|start|>…``). Before a ``<|channel|>`` or
``<|message|>`` it is the message's header only when it reads like one: a role (``assistant``,
``functions.NAME``), a channel name written as filler between messages, or ``… to=NAME``; any
other text there (``Some text <|channel|>…``) is content. So plain text without any Harmony token
is all content. A header the output never completes is dropped, and so is the beginning of a
token at the very end of the output (``…<|ret``: the token was cut off). ``<|`` that begins no
token is ordinary text. ``thinking=None`` and ``thinking=True`` behave alike.

**The stripped form.** A host that removes special tokens (``skip_special_tokens``) turns the reply
above into ``analysisthinking…assistantcommentary to=functions.lookup json{"q": 1}assistantfinalthe
answer``. An output that starts (after white space) with ``analysis``, ``commentary`` or ``final``,
bare or after ``assistant``, and goes on after that word is read in this form: ``assistant``
followed by a channel name starts the next message; ``to=NAME`` after the channel name, and a
``json`` constraint after it, make the message a tool call; white space around each body is
dropped, since the words carry no delimiters of their own. The words match in any letter case (as
SGLang's reader does), anywhere in a body. A Harmony token met later switches back to the token
form. Streamed or whole, the result is the same: a tail that may begin ``assistantfinal`` is held.
"""

from __future__ import annotations

from tandem.reasoner.parsing.base import (
    EMPTY_DELTA,
    ParsedToolCall,
    ReasoningDelta,
    ReasoningParser,
    ReasoningStream,
)
from tandem.reasoner.parsing.harmony_format import (
    ASCII_LOWER,
    ASSISTANT,
    CHANNELS,
    HEADER_LIMIT,
    HEADER_START_RE,
    LONGEST_MARKER,
    LONGEST_OPENER,
    LONGEST_TOKEN,
    MARKER_LETTERS,
    MARKER_PREFIXES,
    MARKER_START_SIZES,
    MARKER_STARTS,
    MESSAGE,
    OPENERS,
    SLOW_ENDINGS,
    START,
    TERMINATORS,
    TOKEN_PREFIXES,
    TOKEN_SET,
    find_marker,
    read_header,
    read_stripped_header,
)

_OUTSIDE = 0
_HEADER = 1
_BODY = 2
_FINISHED = 3
_STRIPPED_HEADER = 4

_REASONING = 0
_CONTENT = 1
_TOOL = 2
_SLOW = -1
_STRIPPED = 3
"""Added to a body kind in ``_fast``: an inked stripped-form body. What it holds back is in ``_held``
(white space, which a message's end trims, then maybe the beginning of a marker), no ``<``."""
_STRIPPED_REASONING = _REASONING + _STRIPPED
_STRIPPED_CONTENT = _CONTENT + _STRIPPED
_STRIPPED_LT = -5
"""Added to a body kind in ``_fast``: as ``_STRIPPED``, and ``_held`` ends with ``<`` (below ``_SLOW``)."""
_HELD_LIMIT = 32
"""Most white space the stripped form's fast path holds in ``_held``; a longer blank run goes to
``_pending_space`` (a list, joined once), so that the cost stays linear."""
_new_tuple = tuple.__new__  # builds a ReasoningDelta without NamedTuple's slower __new__


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
        self._analysis_kind = _REASONING if analysis_is_reasoning else _CONTENT
        self._state = _OUTSIDE
        self._held = ""
        """A tail that may be the beginning of a token (or, in the stripped form, of a marker)."""
        self._kind = _CONTENT
        """Where the current body goes (state ``_BODY`` only)."""
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
        self._fast = _SLOW
        """What ``feed`` may do without ``_feed_slow``: the body kind inside a token-form body with
        nothing held back; plus ``_STRIPPED`` in an inked stripped-form body (plus ``_STRIPPED_LT``
        instead when what it holds back ends with ``<``); else ``_SLOW``."""

    def feed(self, chunk: str) -> ReasoningDelta:
        # The fast paths are inline, without helper calls: this runs once per streamed token. The
        # ``_fast`` codes are written as numbers here and in _feed_stripped (a constant is cheaper
        # than a global lookup in CPython; a test checks the names still have these values):
        # 0, 1, 2 = _REASONING, _CONTENT, _TOOL; -1 = _SLOW; 3, 4, 5 = a kind + _STRIPPED;
        # -5, -4, -3 = a kind + _STRIPPED_LT.
        fast = self._fast
        if "<" not in chunk:
            if fast < 3:
                # A token-form body with nothing held back: a chunk without "<" holds no token.
                if fast == 0:
                    return _new_tuple(ReasoningDelta, (chunk, "", ()))
                if fast == 1:
                    return _new_tuple(ReasoningDelta, ("", chunk, ()))
                if fast == 2:
                    self._parts.append(chunk)
                    return EMPTY_DELTA
                if fast >= -1:
                    return self._feed_slow(chunk)
                if not chunk or chunk[0] == "|":  # the "<" held back by a stripped-form body waits
                    return self._feed_stripped(chunk, fast)
                # A stripped-form body held back a "<" that this chunk does not make a token.
                fast += 8  # _STRIPPED_LT + kind -> _STRIPPED + kind
                self._fast = fast
        elif fast < 3:
            return self._feed_slow(chunk) if fast >= -1 else self._feed_stripped(chunk, fast)
        elif "<|" in chunk or chunk[-1] == "<":  # a token, or maybe the beginning of one
            return self._feed_stripped(chunk, fast)
        # An inked stripped-form body: only a marker ("assistant" + a channel) ends it. Text
        # without an "a" holds no marker and does not end with a marker's beginning: of it,
        # only white space at its end waits (dropped if a marker comes next).
        held = self._held
        if held:
            chunk = held + chunk
            self._held = ""
        try:
            last = chunk[-1]
        except IndexError:  # an empty chunk
            return EMPTY_DELTA
        if last in SLOW_ENDINGS:
            if last in MARKER_LETTERS:  # may end with the beginning of "assistant"
                if "a" in chunk or "A" in chunk:
                    n = len(chunk)
                    if n > 8:  # long enough to hold "assistant"
                        return self._feed_stripped(chunk, fast)
                    if last in "aA":  # held, and the white space before it: "a" begins "assistant"
                        ink = chunk[: -7 if n > 6 and chunk[-7:] in MARKER_STARTS else -1].rstrip()
                        self._held = chunk[len(ink) :]
                        if not ink:
                            return EMPTY_DELTA
                        chunk = ink
                    else:
                        for size in MARKER_START_SIZES[last]:  # the longest first
                            if size <= n and chunk[-size:] in MARKER_STARTS:
                                ink = chunk[:-size].rstrip()
                                self._held = chunk[len(ink) :]
                                if not ink:
                                    return EMPTY_DELTA
                                chunk = ink
                                break
            else:  # ends with white space
                ink = chunk.rstrip()
                n = len(ink)
                if n > 8 and ("a" in ink or "A" in ink):
                    return self._feed_stripped(chunk, fast)
                if not n:
                    if len(chunk) > _HELD_LIMIT:  # a long blank run: kept in a list
                        return self._feed_slow(chunk)
                    self._held = chunk
                    return EMPTY_DELTA
                # Mostly one white-space character ends the chunk: no slicing then.
                self._held = last if n + 1 == len(chunk) else chunk[n:]
                chunk = ink
        elif (
            len(chunk) > 8
            and ("a" in chunk or "A" in chunk)
            and ASSISTANT in (chunk.lower() if chunk.isascii() else chunk.translate(ASCII_LOWER))
        ):
            return self._feed_slow(chunk)
        if fast == 3:  # _STRIPPED_REASONING
            return _new_tuple(ReasoningDelta, (chunk, "", ()))
        if fast == 4:  # _STRIPPED_CONTENT
            return _new_tuple(ReasoningDelta, ("", chunk, ()))
        self._parts.append(chunk)
        return EMPTY_DELTA

    def _feed_stripped(self, chunk: str, fast: int) -> ReasoningDelta:
        """``_feed_slow`` for a chunk in an inked stripped-form body (``fast``: its ``_fast``).

        Unless it holds ``<|`` or ``assistant`` (then the full path runs), only its end may
        wait: white space, then maybe the beginning of a marker, then maybe a ``<`` (the
        beginning of a token) is held back. Same result, fewer steps.
        """
        if self._held:
            chunk = self._held + chunk
            self._held = ""
        if fast < 3:  # the held text ended with "<"
            fast += 8  # _STRIPPED_LT + kind -> _STRIPPED + kind
            self._fast = fast
        n = len(chunk)
        if "<|" in chunk or (
            n > 8 and ASSISTANT in (chunk.lower() if chunk.isascii() else chunk.translate(ASCII_LOWER))
        ):
            return self._feed_slow(chunk)
        lt = chunk[-1] == "<"  # not empty: it holds "<", or what was held did
        ink = chunk[:-1] if lt else chunk
        if ink:
            last = ink[-1]
            if last in MARKER_LETTERS:
                for size in MARKER_START_SIZES[last]:  # the longest first
                    if size <= len(ink) and ink[-size:] in MARKER_STARTS:
                        ink = ink[:-size]
                        break
            ink = ink.rstrip()
        ink_end = len(ink)
        if ink_end < n:
            if not ink_end and n > _HELD_LIMIT:  # a long blank run: kept in a list
                return self._feed_slow(chunk)
            self._held = chunk[ink_end:]
            if lt:
                self._fast = fast - 8  # _STRIPPED + kind -> _STRIPPED_LT + kind
            if not ink_end:
                return EMPTY_DELTA
            chunk = ink
        if fast == 3:  # _STRIPPED_REASONING
            return _new_tuple(ReasoningDelta, (chunk, "", ()))
        if fast == 4:  # _STRIPPED_CONTENT
            return _new_tuple(ReasoningDelta, ("", chunk, ()))
        self._parts.append(chunk)
        return EMPTY_DELTA

    def finish(self) -> ReasoningDelta:
        if self._state == _FINISHED:
            raise ValueError("this reasoning stream has already finished")
        reasoning: list[str] = []
        content: list[str] = []
        calls: list[ParsedToolCall] = []
        held, self._held = self._held, ""
        cut = held.find("<|")
        if cut >= 0:  # the beginning of a token cut off by the end of output: dropped
            held = held[:cut]
        self._take(held, False, reasoning, content, calls)
        self._flush_lead(content)
        while self._state == _STRIPPED_HEADER:
            self._end_stripped_header(reasoning, content, calls)
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
            close = find("|>", i + 2, i + LONGEST_TOKEN)
            token = text[i : close + 2] if close >= 0 else ""
            if token in TOKEN_SET:
                self._take(text[pos:i], False, reasoning, content, calls)
                self._on_token(token, reasoning, content, calls)
                pos = i + len(token)
                i = find("<|", pos)
            elif close < 0 and text[i:] in TOKEN_PREFIXES:  # a token cut by the chunk's end
                # What comes next may not complete the token: the text before it is undecided too.
                self._take(text[pos:i], True, reasoning, content, calls)
                self._held += text[i:]
                break
            else:  # "<|" that begins no token: ordinary text
                i = find("<|", i + 1)
        else:
            end = len(text)
            if end > pos and text[-1] == "<":
                end -= 1
            self._take(text[pos:end], True, reasoning, content, calls)
            self._held += text[end:]
        fast = _SLOW
        if self._state == _BODY:
            if not self._stripped:
                if not self._held:
                    fast = self._kind
            elif self._body_inked and "<" not in self._held[:-1]:
                pending = self._pending_space
                if len(pending) == 1 and len(pending[0]) <= _HELD_LIMIT:
                    # The fast path holds white space in _held, before what is held already.
                    self._held = pending.pop() + self._held
                if not pending:
                    fast = self._kind + (_STRIPPED_LT if self._held[-1:] == "<" else _STRIPPED)
        self._fast = fast
        return _delta(reasoning, content, calls)

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
            if state == _BODY:
                if self._stripped:
                    text = self._stripped_body(text, at_end, reasoning, content, calls)
                    continue
                kind = self._kind
                if kind == _REASONING:
                    reasoning.append(text)
                elif kind == _CONTENT:
                    content.append(text)
                else:
                    self._parts.append(text)
                return
            if state == _HEADER:
                self._parts.append(text)
                return
            if state == _STRIPPED_HEADER:
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
            self._enter_body(_CONTENT)

    def _on_token(
        self, token: str, reasoning: list[str], content: list[str], calls: list[ParsedToolCall]
    ) -> None:
        self._flush_lead(content)
        while self._state == _STRIPPED_HEADER:
            self._end_stripped_header(reasoning, content, calls)
        if self._stripped:  # a token: back to the token form
            self._stripped = False
        state = self._state
        if state == _OUTSIDE:
            if token == START or token in TERMINATORS:
                self._flush_outside(content)
                if token == START:
                    self._state = _HEADER
                return
            header = "".join(self._parts)
            if not HEADER_START_RE.fullmatch(header):  # prose, not a role: content
                self._flush_outside(content)
                header = ""
            if token == MESSAGE:
                self._open_body(header)
            else:  # the header goes on: channel or constraint
                self._parts = [header, token]
                self._state = _HEADER
        elif state == _HEADER:
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
                self._state = _HEADER
                self._parts = [] if token == START else [token]

    # -- token-form messages ----------------------------------------------------------------

    def _open_body(self, header: str) -> None:
        channel, recipient = read_header(header)
        self._enter_body(self._kind_of(channel, recipient))

    def _kind_of(self, channel: str, recipient: str | None) -> int:
        """Where a message's body goes; a tool call also sets the tool's name."""
        if recipient is not None and recipient != ASSISTANT:
            self._tool_name = recipient.removeprefix("functions.")
            return _TOOL
        if channel == "analysis":
            return self._analysis_kind
        return _CONTENT

    def _enter_body(self, kind: int) -> None:
        self._state = _BODY
        self._kind = kind
        self._parts = []

    def _close_body(self, calls: list[ParsedToolCall]) -> None:
        if self._kind == _TOOL:
            calls.append(ParsedToolCall(name=self._tool_name, arguments="".join(self._parts)))
        self._parts = []
        self._pending_space = []
        self._body_inked = False

    def _enter_outside(self) -> None:
        self._state = _OUTSIDE
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
        self._state = _STRIPPED_HEADER
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
        if kind == _REASONING:
            reasoning.append(out)
        elif kind == _CONTENT:
            content.append(out)
        else:
            self._parts.append(out)


def _delta(reasoning: list[str], content: list[str], calls: list[ParsedToolCall]) -> ReasoningDelta:
    if not (reasoning or content or calls):
        return EMPTY_DELTA
    return ReasoningDelta("".join(reasoning), "".join(content), tuple(calls))
