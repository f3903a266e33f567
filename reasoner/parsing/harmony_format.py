"""The Harmony format's vocabulary: its tokens, channels, the stripped form's words, header readers.

:mod:`tandem.reasoner.parsing.harmony` holds the reader (the state machine) that uses them; see its
docstring for what each part of a reply becomes.
"""

from __future__ import annotations

import itertools
import re
import string

START = "<|start|>"
CHANNEL = "<|channel|>"
MESSAGE = "<|message|>"
CONSTRAIN = "<|constrain|>"
END = "<|end|>"
RETURN = "<|return|>"
CALL = "<|call|>"
TOKENS = (START, CHANNEL, MESSAGE, CONSTRAIN, END, RETURN, CALL)
"""Every Harmony token this parser acts on; they all begin with ``<|``."""
TERMINATORS = frozenset((END, RETURN, CALL))
TOKEN_SET = frozenset(TOKENS)
TOKEN_PREFIXES = frozenset(token[:n] for token in TOKENS for n in range(1, len(token)))
LONGEST_TOKEN = max(len(token) for token in TOKENS)

HEADER_LIMIT = 256
"""Text outside a message longer than this (or with a newline) is content, not a header."""

CHANNELS = ("analysis", "commentary", "final")
"""The channels gpt-oss writes; in the stripped form, the words that open a message."""
ASSISTANT = "assistant"
MARKERS = tuple(ASSISTANT + channel for channel in CHANNELS)
"""What starts the next message in the stripped form."""
OPENERS = (*CHANNELS, *MARKERS)
"""What a stripped-form output starts with (before more text)."""
LONGEST_OPENER = max(len(opener) for opener in OPENERS)
ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
"""Stripped-form words match in any case; this lowers ASCII only, so indexes stay valid."""
LONGEST_MARKER = max(len(marker) for marker in MARKERS)
MARKER_PREFIXES = frozenset(marker[:n] for marker in MARKERS for n in range(1, len(marker)))
MARKER_RE = re.compile(r"assistant(analysis|commentary|final)", re.IGNORECASE | re.ASCII)

MARKER_STARTS = frozenset(
    "".join(letters)
    for n in range(1, len(ASSISTANT))
    for letters in itertools.product(*((c, c.upper()) for c in ASSISTANT[:n]))
)
"""Every beginning of ``assistant`` shorter than it, in every letter case: what a chunk may end with
that the next chunk can complete into a marker."""
MARKER_START_SIZES = {
    letter: tuple(sorted({len(start) for start in MARKER_STARTS if start[-1] == letter}, reverse=True))
    for letter in {start[-1] for start in MARKER_STARTS}
}
"""Last letter → the sizes of the :data:`MARKER_STARTS` that end with it, longest first."""
MARKER_LETTERS = frozenset(MARKER_START_SIZES)
"""The letters a prefix of ``assistant`` can end with: a chunk ending otherwise holds no marker tail."""
WHITE_SPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
"""Every character ``str.isspace`` accepts (what ``str.strip`` removes)."""
WHITE_SPACE_SET = frozenset(WHITE_SPACE)
SLOW_ENDINGS = MARKER_LETTERS | WHITE_SPACE_SET
"""Stripped form: the last characters of a chunk that may need holding back (a marker's beginning,
white space); a chunk ending otherwise is passed on whole (unless it may hold a whole marker)."""


CHANNEL_RE = re.compile(r"<\|channel\|>\s*([^\s<]*)")
RECIPIENT_RE = re.compile(r"(?:^|[\s>])to=([^\s<]+)")
HEADER_START_RE = re.compile(
    r"\s*(?:(?:assistant|analysis|commentary|final|[\w-]+(?:\.[\w-]+)+)(?:\s+to=\S+)?|(?:[\w.-]+\s+)?to=\S+)?\s*"
)
"""Outside text that may begin a header: a role, a channel name as filler, ``… to=NAME``."""
STRIPPED_NAME_RE = re.compile(r"[^\s{\[\"<]*")


def read_header(header: str) -> tuple[str, str | None]:
    """Return ``(channel, recipient)`` of a header; each may be missing (``""`` / ``None``)."""
    channel = CHANNEL_RE.search(header)
    recipient = RECIPIENT_RE.search(header)
    return (channel.group(1) if channel else ""), (recipient.group(1) if recipient else None)


def read_stripped_header(head: str, *, final: bool) -> tuple[str | None, str] | None:
    """Split the text after a stripped-form channel name into ``(recipient, body start)``.

    ``head`` is what followed the channel name so far; ``final`` says no more header text can
    come. ``None`` while more text could still change the answer (``" to=functions.ge"``).
    """
    text = head.lstrip(" \t")
    if not text.startswith("to="):
        if not final and "to=".startswith(text):
            return None
        return None, head
    name = STRIPPED_NAME_RE.match(text, 3)
    name_end = name.end() if name else 3
    if name_end == len(text) and not final:
        return None
    recipient = text[3:name_end]
    after = text[name_end:]
    constraint = after.lstrip()
    if constraint.startswith("json"):
        after = constraint[4:]
    elif not final and "json".startswith(constraint):
        return None
    if not recipient:
        return None, head
    return recipient, after


def find_marker(text: str) -> tuple[int, str] | None:
    """Where the first stripped-form marker (``assistantfinal``…, any case) starts, and its channel."""
    if not text.isascii():  # lower() could change the length: search case-insensitively instead
        match = MARKER_RE.search(text)
        return None if match is None else (match.start(), match.group(1).lower())
    low = text.lower()
    i = low.find(ASSISTANT)
    while i >= 0:
        after = i + len(ASSISTANT)
        for channel in CHANNELS:
            if low.startswith(channel, after):
                return i, channel
        i = low.find(ASSISTANT, after)
    return None
