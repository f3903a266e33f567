"""Can the CLI reach Redis and the broker? When not, one line saying which and what to do.

A ``tandem`` command that talks to Redis or the broker first asks them (``preflight``: the checks
of ``tandem health``, at once, ``CONNECT_TIMEOUT`` seconds each), so a service that is down or a
URL that is wrong is named at once, in one line, instead of in a traceback after a reconnect
window. A service that goes away later, while the command runs, is ridden out as the client does
(``tandem.client.outages``); when the command gives up, ``describe`` turns the error into the same
kind of line, naming the service that does not answer (asked again) and never its password.

A service that answers but refuses the URL's user (Redis's ``NOPERM``, or a wrong password) is not
an outage: ``preflight`` raises ``Refused`` (the CLI exits 2) with a line naming the user, what it
was refused and the ACL line that grants it (``tandem.broker_config.acl_refusals``), never "start
redis-server".
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


class Refused(WorkerError):
    """Redis, the broker or the result backend answered but refused the user of its URL (a
    command or key its ACL does not grant, or its password): the message is the line to print
    (the CLI exits 2: a setting to change, not an outage to wait out)."""


def _todo(failed: Sequence[Answer]) -> str:
    """What to do about ``failed``: start the server, or point its variable at one that runs."""
    settings = " and ".join(dict.fromkeys(a.setting for a in failed))
    servers = {"RabbitMQ" if a.url.startswith(("amqp", "pyamqp")) else "redis-server" for a in failed}
    if len({a.url for a in failed}) > 1:
        return f"start them, or set {settings} to servers that answer"
    return f"start {servers.pop()} there, or set {settings} to one that answers"


def line(failed: Sequence[Answer]) -> str:
    """The one line for the services that did not answer or refused (at least one): what, where,
    why, and what to do. Services at one URL are named together."""
    silent = [a for a in failed if not a.refused]
    refused = "; ".join(
        f"{a.name.split(' (', 1)[0]} at {a.url} refuses: {a.detail}" for a in failed if a.refused
    )
    if not silent:
        return refused
    by_url: dict[str, list[Answer]] = {}
    for answer in silent:
        by_url.setdefault(answer.url, []).append(answer)
    parts = []
    for url, answers in by_url.items():
        whats = [a.name.split(" (", 1)[0] for a in answers]
        verb = "does not answer" if len(whats) == 1 else "do not answer"
        parts.append(f"{' and '.join(whats)} at {url} {verb} ({answers[0].detail.rstrip('.')})")
    said = f"{'; '.join(parts)}: {_todo(silent)}"
    return f"{said}; {refused}" if refused else said


def preflight(settings: Settings, *, broker: bool = True, timeout: float = CONNECT_TIMEOUT) -> None:
    """Ask Redis (and the broker unless ``broker`` is false) at once; ``SettingsError`` when one
    failed because its Sentinel URL names a service the Sentinels do not monitor, ``Unreachable``
    with the line when one does not answer within ``timeout`` seconds, else ``Refused`` when one
    refuses the user of its URL."""
    failed = [a for a in check(settings, timeout, broker=broker) if not a.ok]
    if failed:
        _check_services(settings, failed, timeout)
        error = Refused if all(a.refused for a in failed) else Unreachable
        raise error(line(failed)) from next((a.error for a in failed if a.error), None)


def _check_services(settings: Settings, failed: Sequence[Answer], timeout: float) -> None:
    """``SettingsError`` (the CLI exits 2) when a service that failed has a Sentinel URL whose
    Sentinels monitor no master of its name: a misspelt service is a setting to fix, not a Redis
    to start (the worker checks the same at start: ``check_service``)."""
    from tandem.broker_config.sentinel import SentinelUrl, is_sentinel_url
    from tandem.broker_config.sentinel_clients import check_service

    urls = {
        "TANDEM_REDIS_URL": settings.redis_url,
        "TANDEM_BROKER_URL": settings.broker_url,
        "TANDEM_RESULT_BACKEND": settings.result_backend,
    }
    for answer in failed:
        url = urls.get(answer.setting, "")
        if is_sentinel_url(url):
            check_service(SentinelUrl.parse(url, answer.setting), answer.setting, timeout)


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


__all__ = ["CONNECT_TIMEOUT", "Refused", "Unreachable", "describe", "line", "preflight"]
