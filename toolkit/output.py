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
    JSON is produced a chunk at a time and the rendering stops after ``limit`` characters, so the
    cost is bounded by ``limit`` and the value's first chunks, not by its size. ``limit <= 0``:
    all of it. Never raises.
    """
    if value is None:
        value = "(no output)"
    if isinstance(value, str):
        return (value[:limit] if 0 < limit < len(value) else value), len(value)
    for encode in (_stdlib_chunks, iter_json):  # the second for values nested past the recursion limit
        try:
            parts: list[str] = []
            size = 0
            for chunk in encode(value):
                parts.append(chunk)
                size += len(chunk)
                if 0 < limit < size:
                    return "".join(parts)[:limit], None
            text = "".join(parts)
            return text, len(text)
        except RecursionError:
            continue
        except Exception:  # not JSON (a circular list, a huge int): its ``str``
            break
    text = render_text(value)
    return (text[:limit] if 0 < limit < len(text) else text), len(text)


def _stdlib_chunks(value: Any) -> Iterator[str]:
    # ``iterencode`` (unlike ``dumps``) is lazy: the pure-Python encoder yields chunk by chunk.
    return json.JSONEncoder(ensure_ascii=False, default=str).iterencode(value)


def iter_json(value: Any) -> Iterator[str]:
    """``value`` as JSON, chunk by chunk, as ``json.dumps(value, ensure_ascii=False, default=str)``
    writes it, but with a stack of its own instead of recursion: a value nested deeper than
    Python's recursion limit is rendered too (as far as it is read). ``ValueError`` for a value
    that contains itself."""
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
            yield _key(key) + ": "
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
            yield _scalar(item)


def _scalar(value: Any) -> str:
    if value is None or isinstance(value, bool | int | float | str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(str(value), ensure_ascii=False)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return json.dumps(key, ensure_ascii=False)
    if key is None or isinstance(key, bool | int | float):
        return json.dumps(json.dumps(key), ensure_ascii=False)
    return json.dumps(str(key), ensure_ascii=False)


def cut_note(limit: int, size: int | None, shown: int) -> str:
    """The line after an output cut to ``limit`` characters: of ``size`` in all, or (``None``) of
    more than ``shown`` rendered."""
    total = str(size) if size is not None else f"more than {shown}"
    return f"\n[output cut: showing the first {limit} of {total} characters]"
