"""Can the CLI reach Redis and the broker? When not, one line saying which and what to do.

A ``tandem`` command that talks to Redis or the broker first asks them (``preflight``: the checks
of ``tandem health``, at once, ``CONNECT_TIMEOUT`` seconds each), so a service that is down or a
URL that is wrong is named at once, in one line, instead of in a traceback after a reconnect
window. A service that goes away later, while the command runs, is ridden out as the client does
(``tandem.client.outages``); when the command gives up, ``describe`` turns the error into the same
kind of line, naming the service that does not answer (asked again) and never its password.
"""

from __future__ import annotations

from collections.abc import Sequence

from tandem.broker_config.settings import Settings
from tandem.workers.errors import WorkerError
from tandem.workers.health import Answer, check

CONNECT_TIMEOUT = 3.0
"""Seconds each service may take to answer the check before a command (as ``tandem health``)."""


class Unreachable(WorkerError):
    """Redis, the broker or the result backend did not answer: the message is the line to print
    (the CLI exits 3). ``__cause__`` is what the failed check raised, for ``--debug``."""


def _todo(failed: Sequence[Answer]) -> str:
    """What to do about ``failed``: start the server, or point its variable at one that runs."""
    settings = " and ".join(dict.fromkeys(a.setting for a in failed))
    servers = {"RabbitMQ" if a.url.startswith(("amqp", "pyamqp")) else "redis-server" for a in failed}
    if len({a.url for a in failed}) > 1:
        return f"start them, or set {settings} to servers that answer"
    return f"start {servers.pop()} there, or set {settings} to one that answers"


def line(failed: Sequence[Answer]) -> str:
    """The one line for the services that did not answer (at least one): what, where, why, and
    what to do. Services at one URL are named together."""
    by_url: dict[str, list[Answer]] = {}
    for answer in failed:
        by_url.setdefault(answer.url, []).append(answer)
    parts = []
    for url, answers in by_url.items():
        whats = [a.name.split(" (", 1)[0] for a in answers]
        verb = "does not answer" if len(whats) == 1 else "do not answer"
        parts.append(f"{' and '.join(whats)} at {url} {verb} ({answers[0].detail.rstrip('.')})")
    return f"{'; '.join(parts)}: {_todo(failed)}"


def preflight(settings: Settings, *, broker: bool = True, timeout: float = CONNECT_TIMEOUT) -> None:
    """Ask Redis (and the broker unless ``broker`` is false) at once; ``Unreachable`` with the
    line when one does not answer within ``timeout`` seconds."""
    failed = [a for a in check(settings, timeout, broker=broker) if not a.ok]
    if failed:
        raise Unreachable(line(failed)) from next((a.error for a in failed if a.error), None)


def describe(settings: Settings, exc: BaseException, *, timeout: float = CONNECT_TIMEOUT) -> str:
    """The line for ``exc``, a connection error a command gave up on: the services that do not
    answer now, asked again; if all answer by now, what went wrong and that trying again may do."""
    failed = [a for a in check(settings, timeout) if not a.ok]
    if failed:
        return line(failed)
    from tandem.toolkit.redaction import redact  # not at import: the CLI's start stays light

    reason = redact(" ".join(str(exc).split()) or type(exc).__name__)
    return (
        f"a connection to Redis or the broker failed ({reason}), but both answer now: try the command again"
    )


__all__ = ["CONNECT_TIMEOUT", "Unreachable", "describe", "line", "preflight"]
