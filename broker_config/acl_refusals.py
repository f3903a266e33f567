"""What to say when Redis refuses a command or a password: one line naming the user, what it was
refused, and the ACL line of docs/security.md that grants it.

Redis 7 with ACL users answers ``NOPERM`` to a command its user may not run or to a key outside its
key patterns, and ``WRONGPASS`` to a wrong password. Neither means that Redis is down: a command
told "Redis does not answer: start redis-server" would send the operator the wrong way. Redis's own
words do not name the key (``this user has no permissions to access one of the keys used as
arguments``), so the line also says what tandem was doing (redis-py adds the command of a
pipeline: ``Command # 2 (LLEN thinker) of pipeline caused error: ...``). Nothing here connects to
anything, and no password is ever shown.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import unquote, urlsplit

from tandem.broker_config.settings import Settings

ACL_DOCS = "docs/security.md, section 'Redis ACL users'"
"""Where the ACL lines of the client and worker users are written."""

Refusal = Literal["permission", "password"]
"""How Redis refused: a command or key the user may not use (``NOPERM``), or its credentials."""


def refusal(exc: BaseException | None) -> Refusal | None:
    """``"permission"`` for Redis's ``NOPERM``, ``"password"`` for a refused user or password
    (``WRONGPASS``, ``NOAUTH``, a disabled user), ``None`` for anything else (an outage)."""
    if exc is None:
        return None
    from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError

    if isinstance(exc, NoPermissionError):
        return "permission"
    if isinstance(exc, AuthenticationError):
        return "password"
    if isinstance(exc, ResponseError) and str(exc).startswith(("WRONGPASS", "NOAUTH")):
        return "password"
    return None


def refused_error(exc: BaseException | None) -> BaseException | None:
    """The Redis refusal (``refusal`` is not ``None``) that is ``exc`` or caused it, if any: kombu
    re-raises a ``NOPERM`` on the broker as its ``OperationalError``, which reads as an outage."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if refusal(exc) is not None:
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def user_of(url: str) -> str:
    """The Redis user a URL logs in as: its user name, or ``default`` (a password alone, or
    nothing, is Redis's ``default`` user)."""
    try:
        name = urlsplit(url).username
    except ValueError:
        return "default"
    return unquote(name) if name else "default"


def _words(exc: BaseException) -> str:
    """Redis's words, on one line, without a final full stop (redis-py leaves the ``NOPERM`` code
    out of them)."""
    return " ".join(str(exc).split()).rstrip(".") or type(exc).__name__


def refused_detail(url: str, doing: str, exc: BaseException) -> str:
    """Why a service at ``url`` refused ``doing`` (what tandem asked of it, in words), for
    ``tandem health`` and a command's first check: the user, Redis's words, what to do."""
    user = user_of(url)
    if refusal(exc) == "password":
        return (
            f"Redis refuses user {user!r}: {_words(exc)}; check the user and password in the URL "
            f"(the users are made by the ACL lines of {ACL_DOCS})"
        )
    return (
        f"user {user!r} may not {doing} (NOPERM: {_words(exc)}); give it the client or the worker "
        f"line of {ACL_DOCS}, which grant what tandem's commands and workers need"
    )


def _users(settings: Settings) -> str:
    """The users of the three URLs: ``user 'tandem-client'``, or each with its variable."""
    named = {
        "TANDEM_REDIS_URL": user_of(settings.redis_url),
        "TANDEM_BROKER_URL": user_of(settings.broker_url),
        "TANDEM_RESULT_BACKEND": user_of(settings.result_backend),
    }
    if len(set(named.values())) == 1:
        return f"user {next(iter(named.values()))!r}"
    return "users " + ", ".join(f"{user!r} ({variable})" for variable, user in named.items())


def command_line(settings: Settings, exc: BaseException, command: str) -> str:
    """The line for a Redis refusal ``exc`` that stopped ``tandem <command>`` while it ran."""
    if refusal(exc) == "password":
        return (
            f"Redis refuses the credentials of {_users(settings)}: {_words(exc)}; check the user "
            f"and password in TANDEM_REDIS_URL, TANDEM_BROKER_URL and TANDEM_RESULT_BACKEND"
        )
    return (
        f"Redis refuses {_users(settings)} a command `tandem {command}` needs (NOPERM: {_words(exc)}): "
        f"give the user the client line of {ACL_DOCS}, which grants every client command what it "
        "needs (workers need the worker line)"
    )


__all__ = ["ACL_DOCS", "Refusal", "command_line", "refusal", "refused_detail", "refused_error", "user_of"]
