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
    LONGEST_TOKEN,
    MARKER_LETTERS,
    MARKER_START_SIZES,
    MARKER_STARTS,
    SLOW_ENDINGS,
    TOKEN_PREFIXES,
    TOKEN_SET,
)
from tandem.reasoner.parsing.harmony_reader import (
    BODY,
    FINISHED,
    HELD_LIMIT,
    OUTSIDE,
    SLOW,
    STRIPPED,
    STRIPPED_HEADER,
    STRIPPED_LT,
    HarmonyReader,
    delta_of,
)

_new_tuple = tuple.__new__  # builds a ReasoningDelta without NamedTuple's slower __new__


class HarmonyParser(ReasoningParser):
    """The ``gpt-oss`` parser; see the module docstring for where each message goes."""

    def __init__(self, name: str = "gpt-oss") -> None:
        self.name = name

    def stream(self, thinking: bool | None = None) -> ReasoningStream:
        """Start one reply; ``thinking=False`` turns analysis text into content."""
        return _HarmonyStream(analysis_is_reasoning=thinking is not False)


class _HarmonyStream(HarmonyReader):
    """``HarmonyReader`` fed by chunks: finds the tokens, with fast paths for the chunks of a body."""

    __slots__ = ()

    def feed(self, chunk: str) -> ReasoningDelta:
        # The fast paths are inline, without helper calls: this runs once per streamed token. The
        # ``_fast`` codes are written as numbers here and in _feed_stripped (a constant is cheaper
        # than a global lookup in CPython; a test checks the names still have these values):
        # 0, 1, 2 = REASONING, CONTENT, TOOL; -1 = SLOW; 3, 4, 5 = a kind + STRIPPED;
        # -5, -4, -3 = a kind + STRIPPED_LT.
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
                fast += 8  # STRIPPED_LT + kind -> STRIPPED + kind
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
                    if len(chunk) > HELD_LIMIT:  # a long blank run: kept in a list
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
        if fast == 3:  # STRIPPED_REASONING
            return _new_tuple(ReasoningDelta, (chunk, "", ()))
        if fast == 4:  # STRIPPED_CONTENT
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
            fast += 8  # STRIPPED_LT + kind -> STRIPPED + kind
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
            if not ink_end and n > HELD_LIMIT:  # a long blank run: kept in a list
                return self._feed_slow(chunk)
            self._held = chunk[ink_end:]
            if lt:
                self._fast = fast - 8  # STRIPPED + kind -> STRIPPED_LT + kind
            if not ink_end:
                return EMPTY_DELTA
            chunk = ink
        if fast == 3:  # STRIPPED_REASONING
            return _new_tuple(ReasoningDelta, (chunk, "", ()))
        if fast == 4:  # STRIPPED_CONTENT
            return _new_tuple(ReasoningDelta, ("", chunk, ()))
        self._parts.append(chunk)
        return EMPTY_DELTA

    def finish(self) -> ReasoningDelta:
        if self._state == FINISHED:
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
        while self._state == STRIPPED_HEADER:
            self._end_stripped_header(reasoning, content, calls)
        if self._state == OUTSIDE:
            self._flush_outside(content)
        elif self._state == BODY:
            self._close_body(calls)
        self._state = FINISHED
        self._fast = SLOW
        self._parts = []
        return delta_of(reasoning, content, calls)

    def _feed_slow(self, chunk: str) -> ReasoningDelta:
        if self._state == FINISHED:
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
        fast = SLOW
        if self._state == BODY:
            if not self._stripped:
                if not self._held:
                    fast = self._kind
            elif self._body_inked and "<" not in self._held[:-1]:
                pending = self._pending_space
                if len(pending) == 1 and len(pending[0]) <= HELD_LIMIT:
                    # The fast path holds white space in _held, before what is held already.
                    self._held = pending.pop() + self._held
                if not pending:
                    fast = self._kind + (STRIPPED_LT if self._held[-1:] == "<" else STRIPPED)
        self._fast = fast
        return delta_of(reasoning, content, calls)
