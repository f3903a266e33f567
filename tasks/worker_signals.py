"""Worker start-up: the toolkit is loaded (a broken one stops the start), log lines are redacted,
every worker process runs the reconciler (see ``tandem.tasks.state.reconciler``), warns when Redis
would lose jobs on a restart, sizes its Redis pools to its threads, warms LiteLLM up where a model
is called (its HTTP connection pool sized to the threads too), and serves Prometheus metrics on
``TANDEM_METRICS_PORT``."""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from celery.exceptions import Ignore
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    task_postrun,
    task_prerun,
    worker_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)

from tandem.broker_config import ROLE_QUEUES, TASK_QUEUES, dropped, process_metrics
from tandem.reasoner import tracing
from tandem.reasoner.loop.step import Step
from tandem.tasks.app import app
from tandem.tasks.call_answers import answer_dropped
from tandem.tasks.control.approvals import ApprovalStore
from tandem.tasks.control.questions import QuestionStore
from tandem.tasks.hosts.budgets import message_priority
from tandem.tasks.intake_message import send_intake
from tandem.tasks.runtime import get_runtime
from tandem.tasks.state.claims import Reconciled
from tandem.tasks.state.reconciler import Reconciler
from tandem.tasks.state.record import step_kind
from tandem.tasks.state.results import deliver
from tandem.tasks.state.versions import SPEC_VERSION
from tandem.tasks.steps.dispatch import send, send_outbox
from tandem.tasks.steps.guard import end_job
from tandem.tasks.steps.messages import step_messages
from tandem.tasks.tracing import attach, detach, request_context
from tandem.toolkit.redaction import install_log_redaction, redact

log = logging.getLogger("tandem.worker")
_reconciler: Reconciler | None = None
_ready_file: str | None = None
"""Where this worker says it is ready (``tandem worker --ready-file``), or nowhere."""


def _answer_dropped(headers: Mapping[str, Any], reason: str) -> None:
    """The caller of a public task whose message the worker dropped unread gets an answer."""
    answer_dropped(app, headers, reason)


dropped.listen(_answer_dropped)


def _resend(job_id: str, verdict: Reconciled) -> None:
    """Send a stalled step again one priority level up: its first message already reached a
    worker (or was lost), so it goes ahead of its own priority's backlog instead of behind it.
    A job still queued gets its intake message again (same job id, same spec)."""
    rt = get_runtime()
    if verdict.action == "intake":  # a job still queued: its intake message was lost
        intake = rt.machine.intake(job_id)
        versions = rt.machine.job_versions(job_id)  # the queued record's: the spec submit sent
        if intake is not None:
            send_intake(app, job_id, json.loads(intake), versions.spec if versions else SPEC_VERSION)
        return
    outbox_id, _ = rt.machine.outbox(job_id)
    step = Step(verdict.round, step_kind(verdict.kind))
    spec = rt.store.spec(job_id)
    priority = None if spec is None else message_priority(spec.priority, rt.settings.broker_url, boost=1)
    trace = None if spec is None else spec.trace_context
    send(step_messages(job_id, step, verdict.indices or None), priority, trace)
    rt.machine.mark_sent(job_id, outbox_id)


def _end(job_id: str, verdict: Reconciled) -> None:
    with contextlib.suppress(Ignore):
        end_job(job_id, verdict.action)


def _deliver(job_id: str, mark: str) -> bool:
    rt = get_runtime()
    return deliver(rt.store, rt.delivery, job_id, mark)


def _expire(job_id: str) -> None:
    rt = get_runtime()
    if rt.machine.record(job_id).get("pause_kind") == "question":
        QuestionStore(rt.store).expire_if_due(job_id)
    else:
        ApprovalStore(rt.store).expire_if_due(job_id)
    send_outbox(rt, job_id)


def _children(job_id: str) -> bool:
    from tandem.tasks.control.children import resolve

    return resolve(get_runtime(), job_id)


def persistence_warning(info: Mapping[str, Any]) -> str | None:
    """The warning for a Redis whose ``INFO persistence`` says jobs would not survive a restart."""
    if str(info.get("aof_enabled", "0")) == "1":
        return None
    return (
        "Redis runs without append-only persistence (appendonly no): a Redis restart loses every "
        "running job and its results. Start Redis with --appendonly yes (docker compose does)."
    )


@after_setup_logger.connect
@after_setup_task_logger.connect
def _redact_logs(logger: logging.Logger | None = None, **_: Any) -> None:
    """Every handler of the worker's loggers masks secrets (``tandem.toolkit.redaction``)."""
    install_log_redaction()
    if logger is not None:
        install_log_redaction(logger)


def check_start() -> str | None:
    """Load the toolkit (listing its MCP servers) and the tool policy, check a Redis Cluster job
    store (``tandem.broker_config.job_redis``), that the Sentinels of a Sentinel URL know its
    service (``tandem.broker_config.sentinel``) and ``TANDEM_TENANTS``, as a worker does at start;
    the problem as one line, or ``None`` when the worker can start."""
    from tandem.broker_config.errors import RedisClusterError, SettingsError
    from tandem.broker_config.job_redis import is_cluster_url
    from tandem.broker_config.sentinel import SentinelUrl, is_sentinel_url
    from tandem.broker_config.sentinel_clients import check_service
    from tandem.broker_config.tenant_settings import TenantSettings
    from tandem.reasoner.errors import ReasonerError
    from tandem.toolkit.errors import ToolkitError

    rt = get_runtime()
    if is_cluster_url(rt.settings.redis_url):
        try:
            rt.redis  # noqa: B018 - builds and checks the cluster client
        except RedisClusterError as exc:
            return redact(str(exc))
    named = {rt.settings.broker_url: "TANDEM_BROKER_URL", rt.settings.result_backend: "TANDEM_RESULT_BACKEND"}
    named[rt.settings.redis_url] = "TANDEM_REDIS_URL"
    for url, name in named.items():
        if is_sentinel_url(url):
            try:
                check_service(SentinelUrl.parse(url, name), name, rt.settings.redis_connect_timeout)
            except SettingsError as exc:
                return redact(str(exc))
    try:  # the tenants' caps and quotas (docs/tenants.md): a bad value names tenant, field, value
        TenantSettings.from_env()
    except SettingsError as exc:
        return str(exc)
    try:
        toolkit = rt.load_toolkit()
        policy = rt.policy
    except (ToolkitError, ReasonerError, SettingsError) as exc:
        return redact(f"the toolkit (TANDEM_TOOLKIT={rt.settings.toolkit!r}) cannot be loaded: {exc}")
    if toolkit is not None:
        log.info(
            "toolkit loaded: %d tools, %d actions; the tool policy permits %d",
            len(toolkit.tools()),
            len(toolkit.actions()),
            len(policy.permitted(rt.known_tools())),
        )
    return None


@worker_init.connect
def _load_toolkit(**_: Any) -> None:
    """A worker whose toolkit cannot be loaded does not start: the first job would fail instead."""
    install_log_redaction()
    problem = check_start()
    if problem is not None:
        log.critical("tandem: %s", problem)
        raise SystemExit(f"tandem: {problem}")  # SystemExit passes through Celery's signal dispatch


@worker_init.connect
def _size_redis_pool(sender: Any = None, **_: Any) -> None:
    """Size the process's Redis pools to the worker's threads, before any step opens them.

    Celery's Redis result backend has its own pool, which redis-py caps at 100 connections and
    which raises "Too many connections" past that: every step thread writes its state there, so
    it is sized like tandem's own pool.
    """
    concurrency = getattr(sender, "concurrency", None)
    rt = get_runtime()
    if isinstance(concurrency, int) and concurrency > 0:
        rt.concurrency = concurrency
    if app.conf.redis_max_connections is None:
        app.conf.redis_max_connections = rt.pool_size


@worker_init.connect
def _warm_up(sender: Any = None, **_: Any) -> None:
    """Import LiteLLM before taking work when a real model's calls or prices need it: the import
    takes two to five seconds of CPU, which would otherwise land inside the first step (and its
    lease). A worker whose roles all call their hosts straight (``direct_http``) about models
    LiteLLM's price list does not name (self-hosted ones) never imports it."""
    settings = get_runtime().settings
    # Only where a model is called: a tools worker would pay the import (and ~130 MB) for nothing.
    consumed = app.amqp.queues.consume_from  # the worker's queues (``-Q``), set before worker_init
    models = [r for r in ("thinker", "actor") if r in consumed and not settings.role(r).is_demo]
    if not models:
        return
    from tandem.reasoner.models.cost_map import listed
    from tandem.reasoner.models.direct_http import direct_model
    from tandem.tasks.hosts.model_loop import threads_are_green

    on_loop = settings.model_loop and not threads_are_green()

    def through_litellm(role: str) -> bool:  # its calls (or its replies' prices) need LiteLLM
        conf = settings.role(role)
        direct = direct_model(conf.model or "", conf.api_base, conf.api_key) is not None
        return not (on_loop and settings.direct_http and direct)  # streamed or not

    if not any(through_litellm(r) or listed(settings.role(r).model or "") for r in models):
        log.info("every model call goes straight to its host: LiteLLM is not imported")
        return
    from tandem.reasoner.models.litellm_setup import (
        async_connection_cap,
        import_litellm,
        size_connection_pool,
    )

    import_litellm()
    _warm_up_streams(settings, [r for r in models if through_litellm(r)])
    threads = get_runtime().concurrency
    if not on_loop:
        # Calls in the step threads: one connection per thread (and a few for the in-call
        # retries' overlap).
        size_connection_pool(threads + 8)
        return
    cap = async_connection_cap()
    if cap is not None and cap < threads and any(through_litellm(r) for r in models):
        log.warning(
            "model calls run on the process's event loop, whose HTTP client opens at most %d "
            "connections to a host: %d threads would wait for one; set AIOHTTP_CONNECTOR_LIMIT and "
            "AIOHTTP_CONNECTOR_LIMIT_PER_HOST to at least %d (or TANDEM_MODEL_LOOP=0)",
            cap,
            threads,
            threads,
        )


def _warm_up_streams(settings: Any, models: list[str]) -> None:
    """Have LiteLLM set up its streaming before the first streamed reply of a role that streams
    (``warm_up_streaming``: no request leaves the process), before the worker takes work; a
    prefork worker's processes inherit what it loaded. Not in a thread beside the first steps: it
    holds the GIL up to a second at a time on a quiet machine (loading a tokenizer), several on a
    loaded one, and the lease keeper of the process could not renew the steps' leases meanwhile
    (a streamed step was sent again and its model called twice)."""
    from tandem.reasoner.models.litellm_setup import warm_up_streaming
    from tandem.tasks.hosts.model_loop import threads_are_green

    streamed = [r for r in models if settings.role(r).stream]
    if not streamed:
        return
    model = settings.role(streamed[0]).model or ""
    on_loop = bool(settings.model_loop) and not threads_are_green()
    started = time.monotonic()
    try:
        warm_up_streaming(model, use_async=on_loop)
    except Exception:  # a missed warm-up only makes the first reply slower
        log.warning("could not warm up LiteLLM's streaming", exc_info=True)
        return
    log.info("LiteLLM's streaming warmed up in %.2f s", time.monotonic() - started)


@worker_ready.connect
def _serve_metrics(sender: Any = None, **_: Any) -> None:
    rt = get_runtime()
    port = rt.settings.metrics_port
    if port is not None:
        from tandem.broker_config.queue_depth import queue_depths
        from tandem.tasks.hosts.capacity import host_snapshots
        from tandem.tasks.metrics import WORKER_UP, serve
        from tandem.tasks.state.census import JobCensus
        from tandem.tasks.tenants.gate import gate_of
        from tandem.tasks.tenants.report import tenant_rows

        census = JobCensus(rt.redis, rt.store.prefix)
        snapshots = lambda: host_snapshots(rt.redis, rt.settings)  # noqa: E731
        gate = gate_of(rt)  # the tenants' gauges, when tenant caps or quotas are set
        rows = None if gate is None else lambda: tenant_rows(rt.redis, rt.settings.prefix, gate.tenants)
        serve(port, snapshots, queue_depths(rt.settings).read, census.read, rows)
        role, pool = worker_labels(sender)
        WORKER_UP.labels(role, pool).set(1)


def worker_labels(consumer: Any) -> tuple[str, str]:
    """The ``role`` (the role queues the worker consumes, comma-separated; ``intake`` for none)
    and ``pool`` (``threads``, ``prefork``, ``gevent``, ``solo``) labels of a worker."""
    try:
        queues = set(consumer.app.amqp.queues.consume_from or ())
        pool = type(consumer.pool).__module__.rsplit(".", 1)[-1]
    except AttributeError:
        return "unknown", "unknown"
    role = ",".join(q for q in ROLE_QUEUES if q in queues) or "intake"
    return role, pool


_TRACE_TOKENS: dict[str, Any] = {}
"""The trace context each running task of this process attached (``tandem.tasks.tracing``)."""
_STARTED: dict[str, float] = {}
"""When each running task of this process started (by task id), for ``tandem_step_seconds``."""


@task_prerun.connect
def _step_started(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    from tandem.tasks.metrics import STEPS_RUNNING

    STEPS_RUNNING.labels(getattr(task, "name", "?")).inc()
    if task_id is not None:
        _STARTED[task_id] = time.perf_counter()
        if tracing.STATE.on:  # the task runs in the trace its message's headers carry
            _TRACE_TOKENS[task_id] = attach(request_context(getattr(task, "request", None)))


@task_postrun.connect
def _step_ended(task_id: str | None = None, task: Any = None, state: str | None = None, **_: Any) -> None:
    from tandem.tasks.metrics import STEP_OUTCOMES, STEP_SECONDS, STEPS_RUNNING

    name = getattr(task, "name", "?")
    token = _TRACE_TOKENS.pop(task_id, None) if task_id is not None else None
    if token is not None:
        detach(token)
    STEPS_RUNNING.labels(name).dec()
    STEP_OUTCOMES.labels(name, (state or "unknown").lower()).inc()
    started = _STARTED.pop(task_id, None) if task_id is not None else None
    if started is not None:
        role = TASK_QUEUES.get(name, "intake" if name == "tandem.infer" else "control")
        STEP_SECONDS.labels(role, name).observe(time.perf_counter() - started)


@worker_process_shutdown.connect
def _pool_process_ended(pid: int | None = None, **_: Any) -> None:
    process_metrics.process_ended(pid or os.getpid())
    tracing.flush()  # a pool process's last spans


@worker_shutdown.connect
def _flush_spans(**_: Any) -> None:
    """Export the spans still batched in memory before a warm shutdown ends the process."""
    tracing.flush()


@worker_ready.connect
def _check_persistence(**_: Any) -> None:
    from tandem.broker_config.job_redis import is_cluster

    redis: Any = get_runtime().redis
    try:
        if is_cluster(redis):  # every master holds jobs: each must persist them
            infos = list(redis.info("persistence", target_nodes=redis.PRIMARIES).values())
        else:
            infos = [redis.info("persistence")]
        warning = next(filter(None, map(persistence_warning, infos)), None)
    except Exception:
        log.warning("could not read Redis's persistence settings", exc_info=True)
        return
    if warning:
        log.warning(warning)


@worker_ready.connect
def _start_reconciler(**_: Any) -> None:
    global _reconciler
    rt = get_runtime()
    s = rt.settings
    _reconciler = Reconciler(
        rt.machine,
        lease_seconds=s.lease_seconds,
        stall_seconds=s.stall_seconds,
        max_lease_expiries=s.max_lease_expiries,
        resend=_resend,
        end=_end,
        expire=_expire,
        deliver=_deliver,
        children=_children,
    )
    _reconciler.start()
    log.info("reconciler started (lease %.1f s, stall %.1f s)", s.lease_seconds, s.stall_seconds)


@worker_ready.connect
def _freeze_startup_objects(**_: Any) -> None:
    """Keep the start-up objects (modules, LiteLLM's tables: some 400,000) out of garbage collection,
    so the old generation stays small and its collections frequent and cheap."""
    gc.collect()
    gc.freeze()
    gc.collect()  # counts the (now small) old generation afresh


def announce_ready_in(path: str | None) -> None:
    """Have this worker write ``path`` (its pid) once it takes work: after every other ready
    handler (its reconciler, its metrics), as its event loop starts (``tandem worker
    --ready-file``; ``tandem.workers.embedded.WorkerGroup`` waits for it)."""
    global _ready_file
    _ready_file = path


@worker_ready.connect
def _write_ready_file(sender: Any = None, **_: Any) -> None:
    """The last ready handler: write the ready file, if asked (the worker's pid and node name,
    ``thinker@gpu-1``), in one step: a reader never sees it half written."""
    if _ready_file is None:
        return
    partial = f"{_ready_file}.{os.getpid()}.partial"
    with open(partial, "w") as out:
        out.write(f"{os.getpid()}\n{getattr(sender, 'hostname', '')}\n")
    os.replace(partial, _ready_file)


@worker_shutdown.connect
def _stop_reconciler(**_: Any) -> None:
    if _reconciler is not None:
        _reconciler.stop()


@worker_shutdown.connect
def _stop_model_loop(**_: Any) -> None:
    """Close the model loop's HTTP session with the worker (left to the interpreter's exit,
    aiohttp logs it as an error: "Unclosed client session")."""
    from tandem.tasks.hosts.model_loop import MODEL_LOOP

    MODEL_LOOP.stop()
