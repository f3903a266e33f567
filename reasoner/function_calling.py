"""The prompt-mode function-call protocol: ``<function_call>`` blocks in a model's reply.

A model asks for tools by writing, inside its ``<action>`` section, blocks such as::

    <function_call>
    {"name": "run_python", "call_objective": "why", "args": {"code": __PAYLOAD_START__
    print("raw text, no escaping")
    __PAYLOAD_END__}}
    </function_call>

``parse_function_calls`` turns a reply into ``ParsedFunctionCall`` entries, one per block, in the order
they were written. It never raises: a block it cannot use becomes an entry whose ``error`` tells the
model what was wrong, where, and what to write instead (``format_parse_error`` words the reply).

How a reply is read, in one forward pass:

- Thinking sections (``<think>``, ``<deep_thinking>``, ``<shallow_thinking>``) are skipped to their
  closing tag, or to the end of the text when unclosed; blocks inside them are not calls.
- A ``<function_call>`` block is read as JSON *first* and its closing tag looked for *after* the value,
  so a string or payload may hold any text, ``</function_call>`` and thinking tags included. Tags are
  found anywhere on a line. One ```` ```json ```` fence around the object is unwrapped, and an
  opening tag written twice in a row counts once.
- The JSON may be lenient in ways that never change a string's content: trailing commas,
  ``True``/``False``/``None``, ``//`` and ``/* */`` comments outside strings; raw newlines and tabs
  inside strings; an unknown escape such as ``\\d`` keeps its backslash.
- A payload wrapper, bare or in double quotes, stands for a string holding the text between the
  markers verbatim, by the heredoc rule: when only spaces or tabs follow ``__PAYLOAD_START__`` on its
  line, they and that line break are not part of the value; the text after it up to
  ``__PAYLOAD_END__`` is, including its final line break when the end marker stands on its own line
  (only spaces or tabs before it on that line, which are the marker's indentation and dropped). So a
  file's last newline survives. A payload ends at the first ``__PAYLOAD_END__``, so it cannot hold
  that marker.
- When a block's JSON is broken its strings cannot be trusted, so the block ends at its first
  ``</function_call>`` outside payload wrappers, or just before a ``<function_call>`` or thinking tag
  met first (it is then also reported as unclosed): one bad block never swallows the good ones after
  it. The message locates the fault by line and column counted from the opening tag's line.
- A ``</function_call>`` with no opening tag is plain text. Line endings may be ``\\n`` or ``\\r\\n``;
  payloads keep theirs. A thinking tag written in plain prose (not in a call) opens a thinking
  section like any other.

Cost is linear in the reply for what models write: searches move forward and remember their
answers. A broken block is read twice (once freely, once up to its cut), and its first read may run
past the cut while its strings look valid.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tandem.reasoner.lenient_json import PAYLOAD_END, PAYLOAD_START, Finder, JsonReader, JsonReadError

__all__ = [
    "FUNCTION_CALLING_GUIDE",
    "PAYLOAD_END",
    "PAYLOAD_START",
    "THINKING_TAGS",
    "ParsedFunctionCall",
    "extract_tag",
    "format_parse_error",
    "has_function_calls",
    "parse_function_calls",
    "replace_calls",
    "strip_thinking",
]

THINKING_TAGS = ("think", "deep_thinking", "shallow_thinking")
"""Tags whose content is the model's thinking: never calls, never a deliverable."""

_OPEN = "<function_call>"
_CLOSE = "</function_call>"
_TAG = re.compile(r"<(function_call|think|deep_thinking|shallow_thinking)>")
_BOUNDARY = re.compile(
    r"</function_call>|<(?:function_call|think|deep_thinking|shallow_thinking)>|" + re.escape(PAYLOAD_START)
)
_FENCE = re.compile(r"```[A-Za-z0-9_.+-]*")
_WHITE = re.compile(r"\s*")
_SHAPE = '{"name": "tool_name", "call_objective": "why you call it", "args": {"arg": "value"}}'
_ARGS_ALIASES = ("arguments", "parameters", "params")
_EMPTY = f"the block is empty: write one JSON object in it, such as {_SHAPE}"


class ParsedFunctionCall(BaseModel):
    """One ``<function_call>`` block of a reply.

    When ``error`` is None the block was read: ``name`` is a non-empty tool name (surrounding white
    space removed), ``args`` the arguments (``{}`` when the block had none) and ``call_objective``
    the stated purpose (``""`` when missing). When ``error`` is set the call must not run; ``name``,
    ``call_objective`` and ``args`` hold what could be read (possibly empty) and ``error`` is a short
    message for the model. ``raw`` is the text between the tags exactly as written (for an unclosed
    block, up to where the block was cut off).
    """

    model_config = ConfigDict(frozen=True)

    name: str
    call_objective: str = ""
    args: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    raw: str = ""

    @property
    def ok(self) -> bool:
        """True when the block was read and the call may run."""
        return self.error is None


@dataclass(frozen=True, slots=True)
class _Segment:
    """A stretch of a reply: plain text, a thinking section or a function-call block."""

    kind: Literal["text", "thinking", "call"]
    start: int
    end: int
    inner_start: int = 0
    inner_end: int = 0
    closed: bool = True
    tag: str = ""
    call: ParsedFunctionCall | None = None


def _segments(text: str) -> Iterator[_Segment]:
    """Cut ``text`` into consecutive segments covering it exactly, lazily, from the start."""
    reader = JsonReader(text, Finder(text))
    pos, size = 0, len(text)
    while pos < size:
        match = _TAG.search(text, pos)
        if match is None:
            yield _Segment("text", pos, size)
            return
        if match.start() > pos:
            yield _Segment("text", pos, match.start())
        tag = match.group(1)
        if tag == "function_call":
            segment = _read_block(text, match.start(), reader)
        else:
            close = text.find(f"</{tag}>", match.end())
            end = size if close < 0 else close + len(tag) + 3
            inner_end = size if close < 0 else close
            segment = _Segment("thinking", match.start(), end, match.end(), inner_end, close >= 0, tag)
        yield segment
        pos = segment.end


def _read_block(text: str, open_at: int, reader: JsonReader) -> _Segment:
    """Read the block whose ``<function_call>`` starts at ``open_at``."""
    inner_start = open_at + len(_OPEN)
    try:
        value, pos = _read_json(reader, inner_start)
    except JsonReadError:
        # The JSON is broken, so its strings cannot be trusted to hide tags: the block ends at the
        # first tag outside the payloads, and is read again up to there for a message about it.
        inner_end, end, closed = _cut(text, inner_start, reader.finder)
        try:
            _read_json(JsonReader(text, reader.finder, end=inner_end), inner_start)
            message = f"the block could not be read as one JSON object such as {_SHAPE}"
        except JsonReadError as exc:
            message = _json_error(text, inner_start, inner_end, exc)
        if not closed:
            message += f"; the block is also not closed with {_CLOSE}"
        return _failed(open_at, inner_start, inner_end, end, closed, message, text)

    # Only white space may follow the value (no comments: one could hide the closing tag).
    pos = _skip_white(text, pos)
    if text.startswith("```", pos):
        pos = _skip_white(text, pos + 3)
    if text.startswith(_CLOSE, pos):
        call = _to_call(value, text[inner_start:pos])
        return _Segment("call", open_at, pos + len(_CLOSE), inner_start, pos, True, call=call)
    inner_end, end, closed = _cut(text, pos, reader.finder)
    if closed:
        message = (
            f"unexpected text after the JSON object {_where(text, inner_start, inner_end, pos)}: a block "
            f"holds one object only; put each call in its own {_OPEN} block"
        )
    else:
        message = f"the block is not closed: write {_CLOSE} right after the JSON object"
    read = _to_call(value, "")
    return _failed(
        open_at, inner_start, inner_end, end, closed, message, text, read.name, read.call_objective
    )


def _skip_white(text: str, pos: int) -> int:
    match = _WHITE.match(text, pos)
    return match.end() if match else pos


def _read_json(reader: JsonReader, inner_start: int) -> tuple[Any, int]:
    """Read the JSON value of a block whose inner text starts at ``inner_start``; ``(value, end)``."""
    text = reader.text
    pos = reader.skip_space(inner_start)
    if text.startswith(_OPEN, pos):  # the opening tag written twice: one block, not two
        pos = reader.skip_space(pos + len(_OPEN))
    fence = _FENCE.match(text, pos)
    if fence is not None:
        pos = reader.skip_space(fence.end())
    if text.startswith(_CLOSE, pos):
        raise JsonReadError(pos, _EMPTY)
    return reader.read_value(pos)


def _json_error(text: str, inner_start: int, inner_end: int, exc: JsonReadError) -> str:
    """The message for a block whose JSON could not be read."""
    if exc.reason == _EMPTY:
        return _EMPTY
    if text[exc.pos : exc.pos + 1].isalpha() and not text[inner_start : exc.pos].strip():
        # Prose right after the tag: most likely the tag was mentioned, not used.
        return (
            f"{_OPEN} must be followed by a JSON object, not by {_snippet(text, exc.pos)!r}; "
            "to mention the tag in prose, leave out its angle brackets"
        )
    return f"invalid JSON {_where(text, inner_start, inner_end, exc.pos)}: {exc.reason}"


def _cut(text: str, origin: int, finder: Finder) -> tuple[int, int, bool]:
    """Where a block that could not be read ends: ``(inner_end, end, closed)``.

    The first ``</function_call>`` at or after ``origin`` closes it; a ``<function_call>`` or a
    thinking tag met first ends it unclosed. Payload wrappers are skipped whole.
    """
    pos = origin
    while (match := finder.search(_BOUNDARY, pos)) is not None:
        found = match.group()
        if found == PAYLOAD_START:
            payload_end = finder.find(PAYLOAD_END, match.end())
            pos = match.end() if payload_end < 0 else payload_end + len(PAYLOAD_END)
        elif found == _CLOSE:
            return match.start(), match.end(), True
        else:
            return match.start(), match.start(), False
    return len(text), len(text), False


def _failed(
    open_at: int,
    inner_start: int,
    inner_end: int,
    end: int,
    closed: bool,
    message: str,
    text: str,
    name: str = "",
    objective: str = "",
) -> _Segment:
    raw = text[inner_start:inner_end]
    call = ParsedFunctionCall(name=name, call_objective=objective, error=message, raw=raw)
    return _Segment("call", open_at, end, inner_start, inner_end, closed, call=call)


def _where(text: str, inner_start: int, inner_end: int, pos: int) -> str:
    """``pos`` as the model can find it: line and column counted from the opening tag, and a snippet."""
    if pos >= len(text):
        return "at the end of the reply"
    if pos >= inner_end:
        return "at the end of the block"
    line = text.count("\n", inner_start, pos) + 1
    column = pos - max(text.rfind("\n", inner_start, pos) + 1, inner_start) + 1
    return f"at line {line}, column {column} of the block (near {_snippet(text, pos)!r})"


def _snippet(text: str, pos: int) -> str:
    """A few characters from ``pos`` to the end of their line, to quote in a message."""
    return text[pos : pos + 24].split("\n", 1)[0]


def _kind(value: Any) -> str:
    """How a JSON value is called in a message: 'an array', 'a string (\"x\")'..."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, str):
        return f"a string ({json.dumps(value[:30], ensure_ascii=False)})"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return f"a number ({value})"


def _to_call(value: Any, raw: str) -> ParsedFunctionCall:
    """Check the shape of a block's JSON value and make the entry, with ``error`` when it is wrong."""

    def failed(message: str, name: str = "", objective: str = "") -> ParsedFunctionCall:
        return ParsedFunctionCall(name=name, call_objective=objective, error=message, raw=raw)

    if not isinstance(value, dict):
        return failed(
            f"the block holds {_kind(value)}, not a JSON object; write one object per block: {_SHAPE}"
        )
    objective = value.get("call_objective")
    if objective is None:
        objective = ""
    elif not isinstance(objective, str):
        objective = json.dumps(objective, ensure_ascii=False)
    if "name" not in value:
        return failed(f'the object has no "name": add "name": "<tool name>", as in {_SHAPE}', "", objective)
    name = value["name"]
    if not isinstance(name, str) or not name.strip():
        return failed(f'"name" must be a tool name in a non-empty string, not {_kind(name)}', "", objective)
    name = name.strip()
    if "args" not in value:
        alias = next((key for key in _ARGS_ALIASES if key in value), None)
        if alias is not None:
            return failed(f'write the arguments under "args", not "{alias}"', name, objective)
        return ParsedFunctionCall(name=name, call_objective=objective, args={}, raw=raw)
    args = value["args"]
    if not isinstance(args, dict):
        return failed(
            f'"args" must be a JSON object such as {{"path": "a.txt"}} (or {{}}), not {_kind(args)}',
            name,
            objective,
        )
    return ParsedFunctionCall(name=name, call_objective=objective, args=args, raw=raw)


# -- public API -------------------------------------------------------------------------------


def parse_function_calls(text: str) -> list[ParsedFunctionCall]:
    """Every ``<function_call>`` block of ``text`` outside thinking sections, in textual order.

    Never raises. A block that cannot be used (unreadable or non-object JSON, no ``name``, non-object
    ``args``, not closed) is an entry with ``error`` set; the others have ``error`` None.
    """
    if _OPEN not in text:
        return []
    return [segment.call for segment in _segments(text) if segment.call is not None]


def has_function_calls(text: str) -> bool:
    """True when ``text`` holds a ``<function_call>`` tag outside thinking sections.

    Cheap (no JSON is read) and consistent: it is True exactly when ``parse_function_calls(text)``
    returns at least one entry, good or bad.
    """
    if _OPEN not in text:
        return False
    pos = 0
    while (match := _TAG.search(text, pos)) is not None:
        tag = match.group(1)
        if tag == "function_call":
            return True
        close = text.find(f"</{tag}>", match.end())
        if close < 0:
            return False
        pos = close + len(tag) + 3
    return False


def strip_thinking(text: str) -> str:
    """``text`` without its thinking sections, tags included; an unclosed one is removed to the end.

    Thinking tags inside a function call's strings or payloads are part of the call and are kept.
    A closing tag with no opening tag is left as it is (output that starts inside a thinking
    section is the reasoning parsers' job).
    """
    if not any(f"<{tag}>" in text for tag in THINKING_TAGS):
        return text
    return "".join(text[s.start : s.end] for s in _segments(text) if s.kind != "thinking")


def replace_calls(text: str, placeholder: str = "[tool call]") -> str:
    """``text`` with each function-call block, tags included, replaced by ``placeholder`` (for
    summaries). Blocks are cut as ``parse_function_calls`` cuts them: a ``</function_call>`` inside a
    payload wrapper or a string of the block's JSON does not end it."""
    if _OPEN not in text:
        return text
    return "".join(placeholder if s.kind == "call" else text[s.start : s.end] for s in _segments(text))


def extract_tag(text: str, tag: str) -> str | None:
    """The inner text, stripped, of the first ``<tag>...</tag>`` outside thinking sections.

    None when there is no such pair. The opening and closing tags are searched only in plain text:
    never inside thinking sections or inside function-call blocks, so a payload that holds
    ``</action>`` or ``<deliverable>`` does not count. For ``tag`` ``"function_call"`` this is the
    first closed block's inner text; for a thinking tag, the first closed section's.
    """
    if f"<{tag}>" not in text:
        return None
    if tag == "function_call" or tag in THINKING_TAGS:
        kind = "call" if tag == "function_call" else "thinking"
        for segment in _segments(text):
            if segment.kind == kind and segment.closed and (kind == "call" or segment.tag == tag):
                return text[segment.inner_start : segment.inner_end].strip()
        return None
    opening, closing = f"<{tag}>", f"</{tag}>"
    start: int | None = None
    for segment in _segments(text):
        if segment.kind != "text":
            continue
        search_from = segment.start
        if start is None:
            found = text.find(opening, segment.start, segment.end)
            if found < 0:
                continue
            start = search_from = found + len(opening)
        end = text.find(closing, search_from, segment.end)
        if end >= 0:
            return text[start:end].strip()
    return None


def format_parse_error(call: ParsedFunctionCall) -> str:
    """The short text the model reads for a block that could not be used (``call.error`` is set).

    It names the fault and repeats the expected shape in one line; it never repeats the full
    guide. Raises ``ValueError`` for a call without an error.
    """
    if call.error is None:
        raise ValueError(f"call {call.name!r} has no parse error to report")
    subject = f"The call to {call.name!r}" if call.name else f"This {_OPEN} block"
    return f"{subject} was not run: {call.error}\nExpected: {_OPEN}{_SHAPE}{_CLOSE}"


FUNCTION_CALLING_GUIDE = f"""\
## Calling functions

To use a function, write a {_OPEN} block inside your <action> section. The block holds exactly one
JSON object with three keys:
- "name": the function's name, spelled exactly as listed;
- "call_objective": one short sentence saying why you make the call;
- "args": an object with the function's arguments by name, or {{}} when it takes none.

Write strict JSON: double quotes around every key and string, no trailing commas, and true, false
and null in lower case.

<action>
{_OPEN}
{{"name": "search_docs", "call_objective": "Find the retry settings", "args": {{"query": "retry"}}}}
{_CLOSE}
</action>

For text that spans lines or is full of quotes and backslashes (code, queries, Markdown), use a
payload wrapper instead of a JSON string: put {PAYLOAD_START} where the value goes, then the text
exactly as it should arrive, then {PAYLOAD_END}. Write no quotes around it and escape nothing. The
line break right after the start marker is not part of the text; everything after it up to the end
marker is, so with the end marker on its own line the text ends with a line break, as a file does.

{_OPEN}
{{"name": "run_python", "call_objective": "Count the words of a sentence", "args": {{"code": {PAYLOAD_START}
sentence = "the quick brown fox"
print(len(sentence.split()))
{PAYLOAD_END}}}}}
{_CLOSE}

You may write several {_OPEN} blocks in one reply, one call per block. They may run at the same
time, so a call must not need the result of another call from the same reply. Blocks written inside
your thinking are ignored. The results arrive in the next turn as <function_call_result> blocks, one
per call, in the order you wrote the calls; a block that could not be read comes back as a failed
result saying what to fix.
"""
