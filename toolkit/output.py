"""A tool's output as text, bounded: what a 50 MB return value costs is what its first characters cost.

A tool may return anything, of any size. What a model (and every record) sees of it is at most a
few thousand characters, so the output is cut *before* it is redacted or parsed: a string is
sliced, any other value is rendered as JSON chunk by chunk and the rendering stops once it is long
enough. ``render_head`` gives that head and the full length when it is known; ``cut_note`` is the
line that tells the model it saw only a part.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any


def render_text(value: Any) -> str:
    """``value`` as text when it is not JSON: ``str(value)``, or its type when even that fails (a
    huge int, a broken ``__str__``). Never raises."""
    try:
        return str(value)
    except Exception as exc:
        kind = type(value).__name__
        return f"(a {kind} value that cannot be shown as text: {type(exc).__name__})"


def render_head(value: Any, limit: int) -> tuple[str, int | None]:
    """The text of ``value`` (a string as it is, ``None`` as ``(no output)``, anything else as JSON
    when it can be, else ``render_text``) cut to ``limit`` characters, and the full text's length.

    The length is ``None`` when the text is longer than ``limit`` and was not rendered to its end:
    JSON is produced a chunk at a time and the rendering stops after ``limit`` characters; a long
    string inside the value (or the text of a value that is not JSON, such as ``bytes``) is encoded
    from its first ``limit`` characters only. The cost is thus bounded by ``limit``, not by the
    value's size, and no step holds the GIL for long (a lease keeper thread of the same process
    renews its leases meanwhile). ``limit <= 0``: all of it. Never raises.
    """
    if value is None:
        value = "(no output)"
    if isinstance(value, str):
        return (value[:limit] if 0 < limit < len(value) else value), len(value)
    try:
        parts: list[str] = []
        size = 0
        for chunk in iter_json(value, cut=max(limit, 0)):
            parts.append(chunk)
            size += len(chunk)
            if 0 < limit < size:
                return "".join(parts)[:limit], None
        text = "".join(parts)
        return text, len(text)
    except Exception:  # not JSON (a circular list, a huge int): its ``str``
        pass
    text = render_text(value)
    return (text[:limit] if 0 < limit < len(text) else text), len(text)


def bytes_text_head(value: bytes, cut: int) -> str:
    """The start of ``str(value)`` (``b'...'``), at least ``cut`` characters of it when it is that
    long, read from ``value``'s first ``cut`` bytes only: the same characters ``str`` gives (its
    quote is chosen from the whole value, as ``str`` chooses it), without its end."""
    if len(value) <= cut:
        return str(value)
    # ``str`` quotes with " only when the bytes hold ' and no ": a byte of the other quote after
    # the head makes the head's text choose the whole value's quote; its last two characters go.
    whole_quote_is_double = value.find(b"'") >= 0 and value.find(b'"') < 0
    return str(value[:cut] + (b"'" if whole_quote_is_double else b'"'))[:-2]


def iter_json(value: Any, *, cut: int = 0) -> Iterator[str]:
    """``value`` as JSON, chunk by chunk, as ``json.dumps(value, ensure_ascii=False, default=str)``
    writes it (a key ``json`` cannot write is written as its text), but with a stack of its own
    instead of recursion: a value nested deeper than Python's recursion limit is rendered too (as
    far as it is read). ``ValueError`` for a value that contains itself.

    ``cut > 0``: a string longer than ``cut`` characters (a key, a value, or the text of a value
    that is not JSON) is encoded from its first ``cut`` characters only and ends the rendering
    there, with no closing quote: the chunks are then the first characters (more than ``cut``) of
    the JSON, at a cost bounded by ``cut`` whatever the string's length."""
    stack: list[Iterator[Any]] = [iter([value])]
    closers: list[str] = [""]
    path: list[int] = []  # the ids of the containers open, innermost last
    open_ids: set[int] = set()  # the same, to look up in constant time
    firsts: list[bool] = [True]
    while stack:
        try:
            item = next(stack[-1])
        except StopIteration:
            stack.pop()
            firsts.pop()
            yield closers.pop()
            if path:
                open_ids.discard(path.pop())
            continue
        if len(stack) > 1:
            if not firsts[-1]:
                yield ", "
            firsts[-1] = False
        if closers[-1] == "}":
            key, item = item
            text, was_cut = _key(key, cut)
            if was_cut:
                yield text
                return
            yield text + ": "
        if isinstance(item, dict | list | tuple):
            if id(item) in open_ids:
                raise ValueError("Circular reference detected")
            path.append(id(item))
            open_ids.add(id(item))
            if isinstance(item, dict):
                yield "{"
                stack.append(iter(item.items()))
                closers.append("}")
            else:
                yield "["
                stack.append(iter(item))
                closers.append("]")
            firsts.append(True)
        else:
            text, was_cut = _scalar(item, cut)
            yield text
            if was_cut:
                return


def _string(text: str, cut: int) -> tuple[str, bool]:
    """``text`` as a JSON string; only its first ``cut`` characters, unclosed, when it is longer
    (``True``: cut)."""
    if 0 < cut < len(text):
        return json.dumps(text[:cut], ensure_ascii=False)[:-1], True
    return json.dumps(text, ensure_ascii=False), False


def _scalar(value: Any, cut: int = 0) -> tuple[str, bool]:
    if isinstance(value, str):
        return _string(value, cut)
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value, ensure_ascii=False), False
    return _string(_text(value, cut), cut)


def _key(key: Any, cut: int = 0) -> tuple[str, bool]:
    if key is None or isinstance(key, bool | int | float):
        return json.dumps(json.dumps(key), ensure_ascii=False), False
    return _scalar(key if isinstance(key, str) else _text(key, cut), cut)


def _text(value: Any, cut: int) -> str:
    """The text of a value that is not JSON (``default=str``); of a long ``bytes`` only its start."""
    return bytes_text_head(value, cut) if isinstance(value, bytes) and cut > 0 else str(value)


def cut_note(limit: int, size: int | None, shown: int) -> str:
    """The line after an output cut to ``limit`` characters: of ``size`` in all, or (``None``) of
    more than ``shown`` rendered."""
    total = str(size) if size is not None else f"more than {shown}"
    return f"\n[output cut: showing the first {limit} of {total} characters]"
