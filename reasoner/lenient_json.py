"""A lenient JSON reader for the ``<function_call>`` blocks models write (used by ``function_calling``).

``JsonReader.read_value(pos)`` reads one JSON value that starts at ``pos`` inside a larger text and
returns it with the index where it ended, so the caller looks for a closing tag *after* the value:
whatever a string or a payload holds can never end a block early.

What it accepts beyond strict JSON (the repairs never touch the inside of a string):

- payload wrappers: ``__PAYLOAD_START__`` ... ``__PAYLOAD_END__`` in place of a value, bare or wrapped
  in double quotes, hold raw text taken verbatim (see ``read_payload`` for the heredoc rule); a
  quoted start marker with no end marker after it is an ordinary string;
- raw control characters (newlines, tabs) inside strings, read as if escaped;
- an unknown escape such as ``\\d`` inside a string, kept as written (backslash included);
- outside strings: trailing commas before ``}`` or ``]``, Python's ``True``/``False``/``None``,
  ``//`` and ``/* */`` comments, and ``\\r``, no-break space and BOM as white space.

Everything else raises ``JsonReadError`` with the index of the fault and a reason written for the model.
Searches run forward through a shared ``Finder`` that remembers its answers, so many reads over one
text (one per block) do not each rescan the rest of it.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

PAYLOAD_START = "__PAYLOAD_START__"
PAYLOAD_END = "__PAYLOAD_END__"
MAX_DEPTH = 100
"""Deepest nesting of objects and arrays accepted (the reader is recursive)."""

_SPACE = re.compile(r"[ \t\r\n\u00a0\ufeff]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_LITERALS: dict[str, Any] = {
    "true": True,
    "false": False,
    "null": None,
    "True": True,  # Python spellings, repaired
    "False": False,
    "None": None,
}
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _quote_hint(text: str, pos: int, value: Any) -> str:
    """A hint for the usual cause of text right after a string: a quote inside it left unescaped."""
    if isinstance(value, str) and text[pos : pos + 1] not in ('"', "{", "[", ""):
        return ' (a " inside a string must be written \\", or use a payload wrapper)'
    return ""


class JsonReadError(Exception):
    """The text at ``pos`` is not JSON this reader accepts; ``reason`` says what to write instead."""

    def __init__(self, pos: int, reason: str) -> None:
        super().__init__(reason)
        self.pos = pos
        self.reason = reason


class Finder:
    """Forward searches in one text that remember their last answer.

    ``find(needle, pos)`` equals ``text.find(needle, pos)``. When a later call asks from a position
    before the remembered hit (or after a remembered miss), the answer comes from memory, so a run
    of searches from increasing positions costs one pass over the text, not one pass per search.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self._found: dict[str, tuple[int, int]] = {}
        self._matched: dict[re.Pattern[str], tuple[int, re.Match[str] | None]] = {}

    def find(self, needle: str, pos: int) -> int:
        """The index of the first ``needle`` at or after ``pos``, or -1."""
        memo = self._found.get(needle)
        if memo is not None:
            origin, hit = memo
            if origin <= pos and (hit < 0 or hit >= pos):
                return hit
        hit = self.text.find(needle, pos)
        self._found[needle] = (pos, hit)
        return hit

    def search(self, pattern: re.Pattern[str], pos: int) -> re.Match[str] | None:
        """The first match of ``pattern`` starting at or after ``pos``, or None."""
        memo = self._matched.get(pattern)
        if memo is not None:
            origin, hit = memo
            if origin <= pos and (hit is None or hit.start() >= pos):
                return hit
        hit = pattern.search(self.text, pos)
        self._matched[pattern] = (pos, hit)
        return hit


class JsonReader:
    """Reads lenient JSON values out of ``text[:end]``; indexes are positions in ``text``.

    ``end`` (default: the whole text) is where the reader must stop, for instance a closing tag: a
    string, payload or comment that would run past it counts as never closed.
    """

    def __init__(self, text: str, finder: Finder | None = None, end: int | None = None) -> None:
        self.text = text
        self.finder = finder if finder is not None else Finder(text)
        self.end = len(text) if end is None else end

    def _find(self, needle: str, pos: int) -> int:
        """Where ``needle`` next occurs wholly before ``end``, or -1."""
        hit = self.finder.find(needle, pos)
        return hit if 0 <= hit <= self.end - len(needle) else -1

    # -- white space and comments -------------------------------------------------------------

    def skip_space(self, pos: int) -> int:
        """The first index at or after ``pos`` that is neither white space nor inside a comment."""
        text = self.text
        while True:
            match = _SPACE.match(text, pos, self.end)
            pos = match.end() if match else pos
            if text.startswith("//", pos, self.end):
                end = self._find("\n", pos)
                pos = self.end if end < 0 else end + 1
            elif text.startswith("/*", pos, self.end):
                end = self._find("*/", pos + 2)
                if end < 0:
                    raise JsonReadError(pos, "this /* comment is never closed; better, leave comments out")
                pos = end + 2
            else:
                return pos

    # -- values -------------------------------------------------------------------------------

    def read_value(self, pos: int, depth: int = 0) -> tuple[Any, int]:
        """Read the value at ``pos`` (white space first is skipped); return it and the index after it."""
        text = self.text
        pos = self.skip_space(pos)
        if pos >= self.end:
            raise JsonReadError(pos, self._ended())
        char = text[pos]
        if char == "{":
            return self._read_object(pos, depth + 1)
        if char == "[":
            return self._read_array(pos, depth + 1)
        if char == '"':
            return self.read_string(pos, payload_allowed=True)
        if text.startswith(PAYLOAD_START, pos):
            return self.read_payload(pos, pos + len(PAYLOAD_START))
        if char == "-" or char.isdigit():
            return self._read_number(pos)
        word = _WORD.match(text, pos)
        if word is not None:
            if word.group() in _LITERALS:
                return _LITERALS[word.group()], word.end()
            if text.startswith(PAYLOAD_END, pos):
                raise JsonReadError(pos, f"{PAYLOAD_END} has no {PAYLOAD_START} before it")
            shown = word.group()[:30]
            raise JsonReadError(pos, f'text values need double quotes: write "{shown}"')
        if char == "'":
            raise JsonReadError(pos, "single quotes are not JSON: put strings in double quotes")
        raise JsonReadError(
            pos, f"unexpected {char!r}: expected a value (string, number, object, array, true, false, null)"
        )

    def _read_object(self, start: int, depth: int) -> tuple[dict[str, Any], int]:
        if depth > MAX_DEPTH:
            raise JsonReadError(start, f"objects and arrays are nested deeper than {MAX_DEPTH} levels")
        text = self.text
        result: dict[str, Any] = {}
        pos = self.skip_space(start + 1)
        if text.startswith("}", pos):
            return result, pos + 1
        while True:
            key, pos = self._read_key(pos)
            pos = self.skip_space(pos)
            if not text.startswith(":", pos):
                raise JsonReadError(pos, f"expected ':' after the property name \"{key[:30]}\"")
            value, pos = self.read_value(pos + 1, depth)
            result[key] = value
            pos = self.skip_space(pos)
            if text.startswith("}", pos):
                return result, pos + 1
            if not text.startswith(",", pos):
                reason = f"expected ',' or '}}' after the value of \"{key[:30]}\""
                self._raise_unfinished(pos, reason + _quote_hint(text, pos, value))
            pos = self.skip_space(pos + 1)
            if text.startswith("}", pos):  # trailing comma, repaired
                return result, pos + 1

    def _read_key(self, pos: int) -> tuple[str, int]:
        text = self.text
        if text.startswith('"', pos):
            key, end = self.read_string(pos, payload_allowed=False)
            return key, end
        word = _WORD.match(text, pos)
        if word is not None:
            raise JsonReadError(pos, f'property names need double quotes: write "{word.group()[:30]}"')
        if text.startswith("'", pos):
            raise JsonReadError(pos, "single quotes are not JSON: put property names in double quotes")
        self._raise_unfinished(pos, "expected a property name in double quotes")

    def _read_array(self, start: int, depth: int) -> tuple[list[Any], int]:
        if depth > MAX_DEPTH:
            raise JsonReadError(start, f"objects and arrays are nested deeper than {MAX_DEPTH} levels")
        text = self.text
        result: list[Any] = []
        pos = self.skip_space(start + 1)
        if text.startswith("]", pos):
            return result, pos + 1
        while True:
            item, pos = self.read_value(pos, depth)
            result.append(item)
            pos = self.skip_space(pos)
            if text.startswith("]", pos):
                return result, pos + 1
            if not text.startswith(",", pos):
                self._raise_unfinished(
                    pos, "expected ',' or ']' after an array item" + _quote_hint(text, pos, item)
                )
            pos = self.skip_space(pos + 1)
            if text.startswith("]", pos):  # trailing comma, repaired
                return result, pos + 1

    def _raise_unfinished(self, pos: int, reason: str) -> NoReturn:
        if pos >= self.end:
            reason = self._ended()
        raise JsonReadError(pos, reason)

    def _ended(self) -> str:
        if self.end < len(self.text):
            return "the JSON stops before it is complete: a closing '}' or ']' (or a value) is missing"
        return "the text ends before the JSON is complete (was the reply cut off?)"

    def _read_number(self, pos: int) -> tuple[int | float, int]:
        match = _NUMBER.match(self.text, pos)
        if match is None:
            raise JsonReadError(pos, "invalid number: write digits such as -1, 2.5 or 3e8")
        digits = match.group()
        try:
            if "." in digits or "e" in digits or "E" in digits:
                return float(digits), match.end()
            return int(digits), match.end()
        except ValueError:  # more digits than Python converts
            raise JsonReadError(pos, "this number is too long: send it as a string") from None

    # -- strings and payloads -----------------------------------------------------------------

    def read_string(self, start: int, *, payload_allowed: bool) -> tuple[str, int]:
        """Read the double-quoted string at ``start``; return its value and the index after it.

        With ``payload_allowed``, a string that opens with ``__PAYLOAD_START__`` is a quoted payload
        when a ``__PAYLOAD_END__`` follows: it ends at that marker, and one ``"`` right after the
        marker is consumed. Without an end marker it is an ordinary string.
        """
        text = self.text
        if (
            payload_allowed
            and text.startswith(PAYLOAD_START, start + 1)
            and self._find(PAYLOAD_END, start + 1 + len(PAYLOAD_START)) >= 0
        ):
            value, end = self.read_payload(start + 1, start + 1 + len(PAYLOAD_START))
            if text.startswith('"', end):
                end += 1
            return value, end
        parts: list[str] = []
        pos = start + 1
        while True:
            quote = self._find('"', pos)
            if quote < 0:
                raise JsonReadError(start, 'this string is never closed: end it with " (write \\" inside it)')
            slash = text.find("\\", pos, quote)
            if slash < 0:
                parts.append(text[pos:quote])
                return "".join(parts), quote + 1
            parts.append(text[pos:slash])
            pos = self._read_escape(slash, parts)

    def _read_escape(self, slash: int, parts: list[str]) -> int:
        """Append the character the escape at ``slash`` stands for; return the index after it."""
        text = self.text
        code = text[slash + 1 : slash + 2]
        if code in _ESCAPES:
            parts.append(_ESCAPES[code])
            return slash + 2
        if code == "u" and _HEX4.fullmatch(text, slash + 2, slash + 6):
            point = int(text[slash + 2 : slash + 6], 16)
            end = slash + 6
            if (
                0xD800 <= point < 0xDC00
                and text.startswith("\\u", end)
                and _HEX4.fullmatch(text, end + 2, end + 6)
            ):
                low = int(text[end + 2 : end + 6], 16)
                if 0xDC00 <= low < 0xE000:
                    point = 0x10000 + ((point - 0xD800) << 10) + (low - 0xDC00)
                    end += 6
            parts.append(chr(point))
            return end
        # Not a JSON escape (a regex's \d, a Windows path): keep the backslash as written.
        parts.append("\\")
        return slash + 1

    def read_payload(self, marker: int, body_start: int) -> tuple[str, int]:
        """Read the payload whose start marker is at ``marker``; return its text and the index after it.

        The heredoc rule: the value is the text between the markers, verbatim, except that

        * when nothing but spaces or tabs follows ``__PAYLOAD_START__`` on its line, that rest of the
          line and its line break (``\\n`` or ``\\r\\n``) are not part of the value;
        * when nothing but spaces or tabs precedes ``__PAYLOAD_END__`` on its line, those (the marker's
          indentation) are not part of the value, but the line break before them is: a file written
          as ``...last line\\n__PAYLOAD_END__`` keeps its final newline.

        So ``__PAYLOAD_START__x__PAYLOAD_END__`` reads ``"x"`` and a start marker, two lines and an end
        marker each on its own line read ``"line 1\\nline 2\\n"``.
        """
        end = self._find(PAYLOAD_END, body_start)
        if end < 0:
            raise JsonReadError(marker, f"{PAYLOAD_START} has no {PAYLOAD_END}: end the raw text with it")
        text = self.text
        low = body_start
        first_break = text.find("\n", body_start, end)
        if first_break >= 0 and not text[body_start:first_break].strip(" \t\r"):
            low = first_break + 1
        high = end
        last_break = text.rfind("\n", low, end)
        if last_break >= 0 and not text[last_break + 1 : end].strip(" \t"):
            high = last_break + 1
        return text[low:high], end + len(PAYLOAD_END)
