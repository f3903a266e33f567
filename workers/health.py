"""``tandem health``: do Redis (the job store) and the broker answer? A container's readiness probe.

A worker whose Redis or broker does not answer cannot make progress, so it should not count as
ready (a rolling update waits for it, a PodDisruptionBudget counts it as down). The two checks run
at once, each bounded by the timeout:

- **Redis**: ``PING`` on ``TANDEM_REDIS_URL``, where the jobs' records live.
- **The broker**: the depth of tandem's four queues (``tandem.broker_config.queue_depth``): one
  pipelined round trip on a Redis broker, a connection and a passive declare per queue on
  RabbitMQ. What an autoscaler reads is thereby known to be readable.
- **The result backend**: ``PING`` on ``TANDEM_RESULT_BACKEND``, only when it names another Redis
  than the two above (by default it is the broker's).

Exit codes follow the CLI's: 0 both answered, 3 one did not (the line says which, and why),
2 a setting is invalid, or Redis refused the user of a URL (``NOPERM``: a command or key its ACL
does not grant; or its password): the line names the user, what it was refused and the ACL line
that grants it (``tandem.broker_config.acl_refusals``), never "does not answer". The line never shows a
password. Neither Celery nor LiteLLM is imported:
the probe runs every few seconds in every pod and must cost little.

It is deliberately not the liveness probe: a Redis outage would then restart every worker of the
fleet at once, and a worker rides out such an outage by itself (docs/durability.md). Liveness asks
the worker's own process instead (docs/kubernetes.md).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tandem.broker_config.acl_refusals import Refusal, refusal, refused_detail
from tandem.broker_config.errors import SettingsError
from tandem.broker_config.settings import Settings


@dataclass(frozen=True)
class Answer:
    """What one check found: whether it answered in time, how long it took, and what it said.

    ``setting`` is the variable naming the service (``TANDEM_REDIS_URL``, ...), ``url`` its URL
    with any password masked, ``error`` what a failed check raised (for ``--debug``), and
    ``refused`` how Redis refused the URL's user, if it did (``acl_refusals.refusal``): it
    answered, but not to that user."""

    name: str
    ok: bool
    seconds: float
    detail: str = ""
    setting: str = ""
    url: str = ""
    error: BaseException | None = field(default=None, compare=False, repr=False)
    refused: Refusal | None = None


@dataclass(frozen=True)
class Target:
    """One service to ask: what it is, the variable that names it, its URL, its probe and what
    the probe asks of it (in words, for a refusal: ``read the lengths of ...``)."""

    what: str
    setting: str
    url: str
    probe: Callable[[Settings, float], str]
    doing: str = "run PING"

    @property
    def name(self) -> str:
        """How the line names it: ``Redis (redis://:**@host:6379/0)``."""
        return f"{self.what} ({_sanitize(self.url)})"


def _sanitize(url: str) -> str:
    from kombu.utils.url import maybe_sanitize_url

    from tandem.broker_config.job_redis import is_cluster_url, masked
    from tandem.broker_config.sentinel import is_sentinel_url

    return masked(url) if is_cluster_url(url) or is_sentinel_url(url) else str(maybe_sanitize_url(url))


def _ping(url: str, timeout: float) -> str:
    from redis import Redis

    from tandem.broker_config.sentinel import SentinelUrl, is_sentinel_url
    from tandem.broker_config.sentinel_clients import sentinel_client

    if is_sentinel_url(url):
        parsed = SentinelUrl.parse(url, "TANDEM_RESULT_BACKEND")
        client = sentinel_client(parsed, socket_timeout=timeout, socket_connect_timeout=timeout)
    else:
        client = Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        client.ping()
    finally:
        client.close()
    return ""


def _ping_redis(settings: Settings, timeout: float) -> str:
    """``PING`` the job store: one Redis, or every master of a Redis Cluster (checked first:
    ``tandem.broker_config.job_redis``)."""
    from tandem.broker_config.job_redis import job_store_client

    client = job_store_client(settings, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        client.ping()
    finally:
        client.close()
    return ""


def _ping_backend(settings: Settings, timeout: float) -> str:
    return _ping(settings.result_backend, timeout)


def _read_broker(settings: Settings, timeout: float) -> str:
    from tandem.broker_config.queue_depth import AmqpQueueDepths, queue_depths

    reader = queue_depths(settings)
    if isinstance(reader, AmqpQueueDepths):
        reader.timeout = timeout
        try:
            depths = reader.read()
        finally:
            reader.close()
    else:
        depths = reader.read()
    return ", ".join(f"{queue} {n}" for queue, n in depths.items())


def targets(settings: Settings, *, broker: bool = True) -> list[Target]:
    """What ``check`` asks: Redis, the broker (unless ``broker`` is false), and the result backend
    when it is a Redis of its own."""
    from tandem.broker_config.sentinel import is_sentinel_url

    found = [Target("Redis", "TANDEM_REDIS_URL", settings.redis_url, _ping_redis)]
    if broker:
        lanes = f" (and its lanes {settings.intake_queue}.lane*)" if settings.intake_lanes else ""
        queues = ", ".join((settings.intake_queue + lanes, "thinker", "actor", "tools"))
        doing = f"read the queue depths (LLEN of the lists of the queues {queues} and their priority lists)"
        found.append(Target("the broker", "TANDEM_BROKER_URL", settings.broker_url, _read_broker, doing))
    backend = settings.result_backend
    if (backend.startswith(("redis://", "rediss://")) or is_sentinel_url(backend)) and backend not in (
        settings.redis_url,
        settings.broker_url,
    ):
        found.append(Target("the result backend", "TANDEM_RESULT_BACKEND", backend, _ping_backend))
    return found


def check(settings: Settings, timeout: float = 3.0, *, broker: bool = True) -> list[Answer]:
    """Ask Redis, the broker (unless ``broker`` is false) and a result backend of its own at
    once; each gets ``timeout`` seconds. A check still waiting at the end counts as not answering
    (its thread is a daemon: the process does not wait for it)."""
    asked = targets(settings, broker=broker)
    found: dict[str, Answer] = {}
    started = time.monotonic()

    def run(target: Target) -> None:
        name, setting, url = target.name, target.setting, _sanitize(target.url)
        try:
            detail = target.probe(settings, timeout)
            found[name] = Answer(name, True, time.monotonic() - started, detail, setting, url)
        except Exception as exc:
            refused = refusal(exc)
            if refused is not None:
                reason = refused_detail(target.url, target.doing, exc)
            else:
                reason = " ".join(str(exc).split()) or type(exc).__name__
            took = time.monotonic() - started
            found[name] = Answer(name, False, took, reason, setting, url, exc, refused)

    threads = [threading.Thread(target=run, args=(t,), daemon=True) for t in asked]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, started + timeout + 0.5 - time.monotonic()))
    silent = f"no answer within {timeout:g} s"
    return [
        found.get(t.name) or Answer(t.name, False, timeout, silent, t.setting, _sanitize(t.url))
        for t in asked
    ]


def summary(answers: list[Answer]) -> str:
    """The one line ``tandem health`` prints: what failed first, then what answered."""
    failed = [a for a in answers if not a.ok]
    parts = [f"{a.name} {'refused' if a.refused else 'failed'}: {a.detail}" for a in failed]
    for a in answers:
        if a.ok:
            waiting = f" (messages waiting: {a.detail})" if a.detail else ""
            parts.append(f"{a.name} answered in {a.seconds * 1000:.0f} ms{waiting}")
    return ("ok: " if not failed else "") + "; ".join(parts)


def run_health(timeout: float, env: Any = None) -> int:
    """``tandem health``: print the summary; 0 when both answer, 3 when one does not, 2 on a bad
    setting or timeout, or when one refused the URL's user (and every other answered)."""
    if not timeout > 0:
        print(f"tandem health: --timeout {timeout!r} must be a positive number of seconds", file=sys.stderr)
        return 2
    try:
        settings = Settings.from_env(env)
    except SettingsError as exc:
        print(f"tandem health: {exc}", file=sys.stderr)
        return 2
    answers = check(settings, timeout)
    ok = all(a.ok for a in answers)
    print(f"tandem health: {summary(answers)}", file=sys.stdout if ok else sys.stderr, flush=True)
    if ok:
        return 0
    return 2 if all(a.ok or a.refused for a in answers) else 3
