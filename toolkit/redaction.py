"""Redaction: credentials replaced by ``***`` in every text tandem stores, publishes, logs or shows a model.

Two layers, applied by ``redact(text)``:

- **Known secrets.** Values registered with ``register_secret`` (model API keys, the Redis password,
  MCP ``env`` values and ``headers``, a job's ``secrets``) are replaced wherever they appear.
- **Shapes of secrets.** Whatever was never registered but looks like a credential: the user and
  password of a URL (``redis://:pw@host`` → ``redis://***@host``), query parameters named like a key
  (``?api_key=…``, ``token``, ``secret``, ``password``, ``sig``…), ``Authorization``/``Bearer`` values,
  and ``key=value`` pairs whose key names a secret (``api_key=…``, ``"password": "…"``).

The registry is process-wide and bounded (``MAX_SECRETS``, oldest forgotten first). Values shorter
than ``MIN_SECRET_CHARS`` are not registered: replacing every ``"ab"`` in a text would hide more than
it protects. Nothing here raises: a redactor that fails would lose the very error it was cleaning.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"
MIN_SECRET_CHARS = 4
MAX_SECRETS = 10_000

_SECRET_WORDS = (
    r"(?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token|refresh[_-]?token|id[_-]?token|token|secret"
    r"|client[_-]?secret|password|passwd|pwd|private[_-]?key|signature|sig|credentials?)"
)
# A name "is" a secret's name when its last word is one of the above: ``api_key``, ``X-Auth-Token``,
# ``TANDEM_ACTOR_API_KEY``; never ``max_tokens`` or ``prompt_tokens``.
_SECRET_NAME = rf"(?:[A-Za-z0-9]+[_\-])*{_SECRET_WORDS}"
_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<userinfo>[^/\s@'\"<>]+)@")
_QUERY_SECRET = re.compile(rf"(?i)(?P<head>[?&;]{_SECRET_NAME}=)(?P<value>[^&#\s'\"<>]+)")
_BEARER = re.compile(r"(?i)\b(?P<head>bearer|basic)\s+(?P<value>[A-Za-z0-9._~+/=\-]{8,})")
_PAIR = re.compile(
    rf"(?i)(?P<head>[\"']?\b{_SECRET_NAME}[\"']?\s*[:=]\s*[\"']?)(?P<value>[^\s\"',;&}})\]]{{4,}})"
)
_KEY_NAME = re.compile(rf"(?i){_SECRET_NAME}")
# Cheap pre-checks: the full patterns run only on texts that can match them.
_PAIR_HINT = re.compile(rf"(?i){_SECRET_WORDS}[\"']?\s*[:=]")


class SecretRegistry:
    """The known secret values of this process (thread-safe, bounded, longest match first)."""

    def __init__(self, capacity: int = MAX_SECRETS) -> None:
        self._values: OrderedDict[str, None] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()
        self._ordered: tuple[str, ...] = ()
        self._by_prefix: dict[str, tuple[str, ...]] = {}

    def add(self, value: object) -> None:
        """Remember ``value`` (ignored when not a string or shorter than ``MIN_SECRET_CHARS``)."""
        if not isinstance(value, str) or len(value.strip()) < MIN_SECRET_CHARS:
            return
        with self._lock:
            self._values[value] = None
            self._values.move_to_end(value)
            while len(self._values) > self._capacity:
                self._values.popitem(last=False)
            self._ordered = tuple(sorted(self._values, key=len, reverse=True))
            by_prefix: dict[str, list[str]] = {}
            for known in self._ordered:
                by_prefix.setdefault(known[:MIN_SECRET_CHARS], []).append(known)
            self._by_prefix = {k: tuple(v) for k, v in by_prefix.items()}

    def values(self) -> tuple[str, ...]:
        """The registered values, longest first."""
        return self._ordered

    def found_in(self, text: str) -> list[str]:
        """The registered values that occur in ``text``, longest first.

        With many values and a long text, only the values whose first characters occur in the
        text are searched (one pass over the text instead of one per value).
        """
        ordered, by_prefix = self._ordered, self._by_prefix
        if len(ordered) * len(text) < 200_000:
            return [v for v in ordered if v in text]
        n = MIN_SECRET_CHARS
        grams = {text[i : i + n] for i in range(len(text) - n + 1)}
        candidates = [v for gram in grams.intersection(by_prefix) for v in by_prefix[gram]]
        return sorted((v for v in candidates if v in text), key=len, reverse=True)


secrets = SecretRegistry()
"""The process-wide registry that ``redact`` uses."""


def register_secret(*values: object) -> None:
    """Redact each of ``values`` from now on (non-strings and very short values are ignored)."""
    for value in values:
        secrets.add(value)


def register_url(url: str | None) -> None:
    """Register the password (and user) of a URL such as ``redis://user:pw@host:6379/0``."""
    if not url:
        return
    match = _URL_USERINFO.search(url)
    if match:
        user, _, password = match.group("userinfo").partition(":")
        register_secret(password or user)  # ``https://TOKEN@host`` carries its secret as the user


def _replace_known(text: str, extra: Iterable[str]) -> str:
    given = sorted(
        (v for v in extra if isinstance(v, str) and len(v) >= MIN_SECRET_CHARS), key=len, reverse=True
    )
    for value in (*given, *secrets.found_in(text)):
        if value in text:
            text = text.replace(value, MASK)
    return text


def redact(text: Any, extra: Iterable[str] = ()) -> str:
    """``text`` with every known secret (and ``extra`` values) and every credential-shaped part masked."""
    try:
        out = text if isinstance(text, str) else str(text)
        out = _replace_known(out, extra)
        if "://" in out and "@" in out:
            out = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", out)
        if "=" in out:
            out = _QUERY_SECRET.sub(lambda m: f"{m.group('head')}{MASK}", out)
        lowered = out.lower()
        if "bearer" in lowered or "basic" in lowered:
            out = _BEARER.sub(lambda m: f"{m.group('head')} {MASK}", out)
        if _PAIR_HINT.search(out):
            out = _PAIR.sub(lambda m: f"{m.group('head')}{MASK}", out)
        return out
    except Exception:  # never lose the caller's text to a redaction bug; hide it all instead
        return MASK


def redact_known(text: str, extra: Iterable[str] = ()) -> str:
    """``text`` with only the registered secrets (and ``extra``) masked: for model output such as a
    deliverable, where credential-shaped text (``password = input()``) is the user's content."""
    try:
        return _replace_known(text, extra)
    except Exception:
        return MASK


def redact_data(value: Any, extra: Iterable[str] = (), _depth: int = 0) -> Any:
    """A JSON-like value with every string in it redacted (keys naming secrets get ``***`` values)."""
    if _depth > 64:
        return MASK
    if isinstance(value, str):
        return redact(value, extra)
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if isinstance(k, str) and isinstance(v, str) and _KEY_NAME.fullmatch(k):
                out[k] = MASK if v else v
            else:
                out[k] = redact_data(v, extra, _depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [redact_data(v, extra, _depth + 1) for v in value]
    return value


class RedactingFilter(logging.Filter):
    """A logging filter that redacts each record's message and traceback before any handler sees it."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            message = str(record.msg)
        record.msg = redact(message)
        record.args = ()
        if record.exc_info:
            record.exc_text = redact(self._formatter.formatException(record.exc_info))
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Add a ``RedactingFilter`` to every handler of ``logger`` (the root logger by default).

    Filters on handlers (not on loggers) see the records of every child logger too.
    """
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
