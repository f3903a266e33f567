"""Redaction: credentials replaced by ``***`` in every text tandem stores, publishes, logs or shows a model.

Two layers, applied by ``redact(text)``:

- **Known secrets.** Values registered with ``register_secret`` (model API keys, the Redis password,
  MCP ``env`` values and ``headers``, a job's ``secrets``) are replaced wherever they appear.
- **Shapes of secrets.** Whatever was never registered but looks like a credential: the user and
  password of a URL (``redis://:pw@host`` → ``redis://***@host``), query parameters named like a key
  (``?api_key=…``, ``token``, ``secret``, ``password``, ``sig``…), ``Authorization``/``Bearer`` values,
  and ``key=value`` pairs whose key names a secret (``api_key=…``, ``"password": "…"``).

Known secrets come from two places, and a text is redacted with both:

- **Pinned: the operator's credentials.** ``register_secret`` adds to the process-wide
  ``secrets`` registry what the settings and the toolkit hold (model API keys, passwords in Redis,
  broker and API-base URLs, ``TANDEM_SECRETS_KEY``, MCP ``env``/``headers``). They are never
  forgotten: a registry holds at most ``MAX_SECRETS`` values and refuses (with a warning) any past
  that, rather than drop an older one. A ``SecretRegistry`` of one's own can be passed as
  ``registry=`` instead.
- **Scoped: one job's own secrets.** A job's ``JobSpec.secrets`` are never registered process-wide.
  A worker running one of its steps enters the job's ``SecretScope`` (``enter_scope``, a context
  variable: the thread or task running the step, and the threads it starts with its context), and
  every redaction made there (events, results, memory, log lines) masks them too. Another job's
  step, in the same process, never sees them: one job's ``"sum="`` leaves ``sum=5`` of another as
  it is. A scope is indexed once per job, so a step costs what its own few secrets cost, whatever
  ran before it in the process.

Values shorter than ``MIN_SECRET_CHARS`` are not registered: replacing every ``"ab"`` in a text
would hide more than it protects. Nothing here raises: a redactor that fails would lose the very
error it was cleaning.

**Cost is linear in the text**, whatever the text holds, and no single step holds the GIL for long,
so the other threads of a worker (its lease keeper above all) keep running while a large text is
redacted:

- Known secrets are found by reading the text in aligned pieces of ``q`` characters (``q`` is 8, 4 or
  2: the most that fits twice into the shortest secret of its class) and looking each piece up in an
  index of the secrets' first ``q`` pieces; a piece that is found is checked against the secrets it
  may start. Ten thousand secrets cost about what a few do. A class of a few secrets is searched
  with ``str.find`` instead.
- The shape rules are patterns without nested repetition (every name part bounded), searched in the
  lower-cased text one ``WINDOW`` at a time; a value that runs past a window is followed window by
  window.
- Each layer only marks spans of the original text; the masks are written in one pass at the end
  (overlapping spans become one ``***``).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

MASK = "***"
MIN_SECRET_CHARS = 4
MAX_SECRETS = 10_000
"""The most values a ``SecretRegistry`` holds; past it new ones are refused, never old ones dropped."""
WINDOW = 1 << 18
"""Characters one pattern search reads at most: a few milliseconds, after which another thread of
the process may take the GIL."""

_REACH = 4096
"""The longest match a shape rule can make before its value starts (its names and separators are
bounded): a window is searched this far past its end, so a match starting inside it is seen whole."""
_GRAM_SIZES = (8, 4, 2)
_GRAM_WINDOW = 1 << 16  # a multiple of every gram size: the pieces stay aligned across windows
_PIECES = {q: re.compile(f"(?s).{{{q}}}") for q in _GRAM_SIZES}

_SECRET_WORDS = (
    r"(?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token|refresh[_-]?token|id[_-]?token|token|secret"
    r"|client[_-]?secret|password|passwd|pwd|private[_-]?key|signature|sig|credentials?)"
)
# A name "is" a secret's name when its last word is one of the above: ``api_key``, ``X-Auth-Token``,
# ``TANDEM_ACTOR_API_KEY``; never ``max_tokens`` or ``prompt_tokens``.
_SECRET_NAME = rf"(?:[A-Za-z0-9]+[_\-])*{_SECRET_WORDS}"
_KEY_NAME = re.compile(rf"(?i){_SECRET_NAME}")
_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<userinfo>[^/\s@'\"<>]+)@")


@dataclass(frozen=True)
class _Rule:
    """A shape of secret, searched in the lower-cased text; group ``value`` is what is masked."""

    pattern: re.Pattern[str]
    tail: re.Pattern[str] | None = None
    """The characters of an open-ended value, to follow one past the end of a window."""
    not_after: re.Pattern[str] | None = None
    """A match right after a character matching this is none (the name is part of a longer word)."""
    needs: tuple[str, ...] = ()
    """Texts that must all occur (lower-cased) for the rule to be searched at all."""


_PAIR_VALUE = r"[^\s\"',;&})\]]"
_QUERY_VALUE = r"[^&#\s'\"<>]"
_BEARER_VALUE = r"[a-z0-9._~+/=\-]"
_RULES = (
    # user:password@ of a URL (a scheme character right before "://")
    _Rule(re.compile(r"://(?<=[a-z0-9+.\-]://)(?P<value>[^/\s@'\"<>]{1,2048})@"), needs=("://", "@")),
    # ?api_key=… &token=… ;sig=…
    _Rule(
        re.compile(rf"[?&;](?:[a-z0-9]{{1,64}}[_\-]){{0,16}}{_SECRET_WORDS}=(?P<value>{_QUERY_VALUE}+)"),
        tail=re.compile(f"{_QUERY_VALUE}*"),
        needs=("=",),
    ),
    # Authorization: Bearer … / Basic …
    _Rule(
        re.compile(rf"(?:bearer|basic)\s{{1,16}}(?P<value>{_BEARER_VALUE}{{8,}})"),
        tail=re.compile(f"{_BEARER_VALUE}*"),
        not_after=re.compile(r"\w"),
    ),
    # api_key=…, "password": "…", X-Auth-Token: …
    _Rule(
        re.compile(rf"{_SECRET_WORDS}[\"']?\s{{0,64}}[:=]\s{{0,64}}[\"']?(?P<value>{_PAIR_VALUE}{{4,}})"),
        tail=re.compile(f"{_PAIR_VALUE}*"),
        not_after=re.compile(r"[^\W_]"),
    ),
)

Spans = list[tuple[int, int]]


def _add(spans: Spans, begin: int, end: int) -> None:
    """Add ``[begin, end)``, joined to the last span when they touch (a secret repeated end to end
    stays one span, not millions)."""
    if spans and spans[-1][0] <= begin <= spans[-1][1]:
        if end > spans[-1][1]:
            spans[-1] = (spans[-1][0], end)
        return
    spans.append((begin, end))


def _gram_size(length: int) -> int:
    """The largest piece size ``q`` with ``2q - 1 <= length``: every occurrence of a secret of that
    length holds a whole piece that starts at a multiple of ``q``, within its first ``q`` characters."""
    return next(q for q in _GRAM_SIZES if 2 * q - 1 <= length)


@dataclass(frozen=True)
class _Index:
    """Secrets laid out for ``spans`` (see the module docstring)."""

    values: frozenset[str]
    ordered: tuple[str, ...]
    """Longest first."""
    direct: tuple[str, ...]
    """Searched with ``str.find``."""
    tables: tuple[tuple[int, dict[str, tuple[tuple[int, int], ...]]], ...]
    """``(q, piece -> ((offset in a secret, the secret's length), ...))``."""

    @classmethod
    def of(cls, values: Iterable[str]) -> _Index:
        kept = {v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET_CHARS}
        classes: dict[int, list[str]] = {}
        for value in kept:
            classes.setdefault(_gram_size(len(value)), []).append(value)
        direct: list[str] = []
        tables = []
        for q, group in sorted(classes.items(), reverse=True):
            if len(group) <= 4 * q:  # cheaper as a few C searches than as a pass in Python
                direct.extend(group)
                continue
            table: dict[str, set[tuple[int, int]]] = {}
            for value in group:
                for offset in range(q):
                    table.setdefault(value[offset : offset + q], set()).add((offset, len(value)))
            tables.append((q, {piece: tuple(places) for piece, places in table.items()}))
        ordered = tuple(sorted(kept, key=len, reverse=True))
        return cls(frozenset(kept), ordered, tuple(sorted(direct, key=len, reverse=True)), tuple(tables))

    def spans(self, text: str, out: Spans) -> None:
        """Add to ``out`` where each secret occurs in ``text``."""
        for value in self.direct:
            at = text.find(value)
            while at >= 0:
                _add(out, at, at + len(value))
                at = text.find(value, at + len(value))
        n = len(text)
        for q, table in self.tables:
            pieces = _PIECES[q]
            for start in range(0, n, _GRAM_WINDOW):
                found = pieces.findall(text, start, min(start + _GRAM_WINDOW, n))
                hits = table.keys() & found
                if not hits:
                    continue
                for k in [k for k, piece in enumerate(found) if piece in hits]:
                    at = start + k * q
                    for offset, length in table[found[k]]:
                        begin = at - offset
                        if begin >= 0 and text[begin : begin + length] in self.values:
                            _add(out, begin, begin + length)


_NO_SECRETS = _Index.of(())


class SecretRegistry:
    """Known secret values (thread-safe, bounded: past ``capacity`` new values are refused and
    logged, the values held are never dropped), indexed for ``redact``."""

    def __init__(self, capacity: int = MAX_SECRETS) -> None:
        self._values: dict[str, None] = {}
        self._capacity = capacity
        self._lock = threading.Lock()
        self._index: _Index | None = _NO_SECRETS
        self._refused = 0

    def add(self, value: object) -> None:
        """Remember ``value`` (ignored when not a string or shorter than ``MIN_SECRET_CHARS``).

        Cheap: the index is rebuilt once, by the next text redacted, however many values came."""
        if not isinstance(value, str) or len(value.strip()) < MIN_SECRET_CHARS:
            return
        with self._lock:
            if value in self._values:
                return
            if len(self._values) >= self._capacity:
                self._refused += 1
                refused = self._refused
            else:
                self._values[value] = None
                self._index = None
                return
        if refused == 1:  # once: a flood of values would otherwise flood the log
            logging.getLogger("tandem.redaction").warning(
                "the secret registry is full (%d values): a value registered now is not masked by its "
                "value (only by its shape); register operator credentials only, a job's secrets go in "
                "its SecretScope",
                self._capacity,
            )

    def _current(self) -> _Index:
        index = self._index
        if index is None:
            with self._lock:
                if self._index is None:
                    self._index = _Index.of(self._values)
                index = self._index
        return index

    def values(self) -> tuple[str, ...]:
        """The registered values, longest first."""
        return self._current().ordered

    def longest(self) -> int:
        """The length of the longest registered value (0 for none)."""
        ordered = self._current().ordered
        return len(ordered[0]) if ordered else 0

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where registered values occur in ``text``: ``(start, end)`` pairs, joined where they touch."""
        out: Spans = []
        self._current().spans(text, out)
        return out


@dataclass(frozen=True)
class SecretScope:
    """One job's secrets, indexed once: what ``redact`` masks too while the scope is entered."""

    job_id: str
    index: _Index

    @classmethod
    def of(cls, job_id: str, values: Iterable[object]) -> SecretScope:
        """The scope of ``job_id`` holding ``values`` (non-strings and very short ones ignored)."""
        return cls(
            job_id, _Index.of(v for v in values if isinstance(v, str) and len(v.strip()) >= MIN_SECRET_CHARS)
        )

    def longest(self) -> int:
        """The length of the scope's longest secret (0 for none)."""
        return len(self.index.ordered[0]) if self.index.ordered else 0


_scope: ContextVar[SecretScope | None] = ContextVar("tandem_secret_scope", default=None)


def enter_scope(scope: SecretScope | None) -> None:
    """Make ``scope`` the current job's secrets for this context (``None``: no job's). Whoever
    enters one ends it: a tandem task starts with none and ends the one its step entered once
    Celery has logged its outcome (``tandem.tasks.task_base``); other callers run in a context
    of their own (``contextvars.copy_context().run``)."""
    _scope.set(scope)


def current_scope() -> SecretScope | None:
    """The job scope entered in this context, if any."""
    return _scope.get()


secrets = SecretRegistry()
"""The process-wide registry that ``redact`` uses."""


def register_secret(*values: object) -> None:
    """Redact each of ``values`` from now on, in every text of this process (non-strings and very
    short values are ignored). For the operator's credentials: a job's secrets go in its
    ``SecretScope``, or one job's values would mask another job's text."""
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


def masked_url(url: str) -> str:
    """``url`` with the password of its user part replaced by ``***`` (``https://user:***@host/v1``),
    or the whole user part when it has no password (``https://***@host``: a token written as the
    user). The one function every display of a host's URL goes through: metric labels, ``tandem
    hosts``, capacity keys, errors and log lines. Text without such a URL is returned as it is."""

    def mask(match: re.Match[str]) -> str:
        user, colon, _password = match.group("userinfo").partition(":")
        return f"{match.group('scheme')}{f'{user}:{MASK}' if colon else MASK}@"

    return _URL_USERINFO.sub(mask, url)


def _known(text: str, extra: Iterable[str], registry: SecretRegistry | None) -> Spans:
    spans: Spans = []
    (registry or secrets)._current().spans(text, spans)
    scope = _scope.get()
    if scope is not None:
        scope.index.spans(text, spans)
    given = [v for v in extra if isinstance(v, str)]
    if given:
        _Index.of(given).spans(text, spans)
    return spans


def _lowered(text: str) -> str:
    """``text`` in lower case with every character at its place (``"İ".lower()`` is two)."""
    return (text.replace("\u0130", "i") if "\u0130" in text else text).lower()


def _shape_spans(rule: _Rule, text: str, low: str, out: Spans) -> None:
    """Add to ``out`` the values ``rule`` finds, one ``WINDOW`` of ``low`` at a time."""
    n, pos = len(low), 0
    while pos < n:
        stop = min(pos + WINDOW, n)
        bound = min(stop + _REACH, n)
        match = rule.pattern.search(low, pos, bound)
        if match is None or match.start() >= stop:
            pos = stop  # a match starting past ``stop`` is found again from there, whole
            continue
        start = match.start()
        if rule.not_after is not None and start and rule.not_after.match(text, start - 1):
            pos = start + 1
            continue
        begin, end = match.span("value")
        while rule.tail is not None and end == bound < n:  # the value may go on past the window
            bound = min(end + WINDOW, n)
            more = rule.tail.match(low, end, bound)
            end = more.end() if more else end
        _add(out, begin, end)
        pos = max(match.end(), end)


def _masked(text: str, spans: Spans) -> str:
    """``text`` with every span (overlapping ones joined) replaced by one ``MASK``."""
    if not spans:
        return text
    spans.sort()
    parts: list[str] = []
    written = 0
    begin, end = spans[0]
    for b, e in spans[1:]:
        if b <= end:
            end = max(end, e)
            continue
        parts += (text[written:begin], MASK)
        written, begin, end = end, b, e
    parts += (text[written:begin], MASK, text[end:])
    return "".join(parts)


def redact(text: Any, extra: Iterable[str] = (), *, registry: SecretRegistry | None = None) -> str:
    """``text`` with every known secret (and ``extra`` values) and every credential-shaped part masked.

    ``registry``: the known secrets (the process-wide ``secrets`` by default)."""
    try:
        out = text if isinstance(text, str) else str(text)
        spans = _known(out, extra, registry)
        low = _lowered(out)
        for rule in _RULES:
            if all(needed in low for needed in rule.needs):
                _shape_spans(rule, out, low, spans)
        return _masked(out, spans)
    except Exception:  # never lose the caller's text to a redaction bug; hide it all instead
        return MASK


def redact_known(text: str, extra: Iterable[str] = (), *, registry: SecretRegistry | None = None) -> str:
    """``text`` with only the registered secrets (and ``extra``) masked: for model output such as a
    deliverable, where credential-shaped text (``password = input()``) is the user's content."""
    try:
        return _masked(text, _known(text, extra, registry))
    except Exception:
        return MASK


def head_margin(extra: Iterable[str] = (), *, registry: SecretRegistry | None = None) -> int:
    """How far past a cut ``redact_head`` reads: the longest known secret, plus the reach of the
    shape rules. A renderer that stops early renders this much past the cut."""
    longest = max((len(v) for v in extra if isinstance(v, str)), default=0)
    scope = _scope.get()
    scoped = scope.longest() if scope is not None else 0
    return max(longest, scoped, (registry or secrets).longest()) + _REACH


def redact_head(
    text: str, limit: int, extra: Iterable[str] = (), *, registry: SecretRegistry | None = None
) -> str:
    """The first ``limit`` characters of ``redact(text)``, at a cost bounded by ``limit`` (not by
    ``len(text)``): only ``limit + head_margin()`` characters are read, so a secret that the cut at
    ``limit`` would split is still masked whole. ``limit <= 0``: all of ``redact(text)``."""
    if limit <= 0:
        return redact(text, extra, registry=registry)
    extra = tuple(extra)
    if len(text) <= limit:
        return redact(text, extra, registry=registry)
    margin = head_margin(extra, registry=registry)
    return redact(text[: limit + margin], extra, registry=registry)[:limit]


def redact_data(
    value: Any, extra: Iterable[str] = (), _depth: int = 0, *, registry: SecretRegistry | None = None
) -> Any:
    """A JSON-like value with every string in it redacted (keys naming secrets get ``***`` values)."""
    if _depth > 64:
        return MASK
    if isinstance(value, str):
        return redact(value, extra, registry=registry)
    if isinstance(value, Mapping):
        extra = tuple(extra)
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if isinstance(k, str) and isinstance(v, str) and len(k) <= 256 and _KEY_NAME.fullmatch(k):
                out[k] = MASK if v else v
            else:
                out[k] = redact_data(v, extra, _depth + 1, registry=registry)
        return out
    if isinstance(value, list | tuple):
        extra = tuple(extra)
        return [redact_data(v, extra, _depth + 1, registry=registry) for v in value]
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
