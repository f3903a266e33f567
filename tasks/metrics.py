"""Prometheus metrics of a worker process, served on ``TANDEM_METRICS_PORT`` (``/metrics``).

Under ``--pool prefork`` the pool's processes write their samples to files that the endpoint adds
up (``tandem.broker_config.process_metrics``); gauges of processes sum over the live ones.

Model-call metrics are recorded by ``tandem.tasks.hosts.host_model.HostModel`` (it wraps every model a
worker calls), tool latency by ``MeteredToolRunner``, step outcomes by Celery's task signals
(``tandem.tasks.worker_signals``). Labels: ``role`` (``thinker``/``actor``), ``host`` (the model
host as capacity limits name it: ``API_BASE``, or the model string), ``task`` (a tandem task name).

Names (all prefixed ``tandem_``)::

    model_call_seconds{role,host,outcome}      histogram  one model call (outcome: ok, error, rate_limited)
    model_tokens_total{role,host,kind}         counter    prompt / completion tokens of replies
    model_cost_usd_total{role,host}            counter    price of replies (LiteLLM's cost map)
    model_calls_in_flight{role,host}           gauge      calls under way in this process
    model_rate_limited_total{role,host,status} counter    429/503 answers
    host_backoff_seconds_total{role,host}      counter    back-off this process imposed on the fleet
    capacity_waits_total{role,host,reason}     counter    steps re-queued to wait for capacity
    steps_running{task}                        gauge      steps under way in this worker
    step_outcomes_total{task,outcome}          counter    finished steps (success, failure, retry,
                                                          ignored: handed on by Task.replace, a
                                                          duplicate, or a capacity wait)
    step_seconds{role,task}                    histogram  one step task (role: thinker, actor,
                                                          tools, intake, control)
    jobs_ended_total{outcome}                  counter    jobs ended (completed, truncated, failed,
                                                          cancelled), counted where they ended
    job_seconds{outcome}                       histogram  from submission to the end
    reconciler_actions_total{action}           counter    jobs the reconciler had to act on
    worker_up{role,pool}                       gauge      1 per worker that is up
    tool_call_seconds{tool,status}             histogram  one tool call (status: succeeded, failed)
    host_in_flight{host}                       gauge      calls under way to the host, fleet-wide
    host_waiting_steps{host}                   gauge      steps waiting for one of its slots, fleet-wide
    jobs{state}                                gauge      live jobs by state, fleet-wide (census of the
                                                          live-job index: tandem.tasks.state.census)
    jobs_parked{reason}                        gauge      parked jobs: approval, children, a capacity wait,
                                                          retry
    jobs_live                                  gauge      jobs in the live-job index, fleet-wide
    tenant_jobs{tenant,state}                  gauge      a tenant's jobs running / waiting for their
                                                          turn, fleet-wide (when TANDEM_TENANTS or
                                                          TANDEM_MAX_RUNNING_JOBS is set: docs/tenants.md)
    tenant_tokens_today{tenant}                gauge      model tokens of its jobs this UTC day
    tenant_cost_usd_today{tenant}              gauge      USD of its jobs' model calls this UTC day
    queue_depth{queue}                         gauge      messages waiting in the broker queue (intake,
                                                          thinker, actor, tools), fleet-wide: what an
                                                          autoscaler reads (tandem.broker_config.queue_depth)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from tandem.broker_config import process_metrics
from tandem.reasoner.messages import FunctionCallResult
from tandem.reasoner.tool_runner import ToolRunner
from tandem.tasks.hosts.capacity import HostSnapshot
from tandem.tasks.state.census import LIVE_STATES, PARK_REASONS, Census
from tandem.toolkit.context import ToolCallContext
from tandem.toolkit.redaction import masked_url
from tandem.toolkit.tool import Tool

log = logging.getLogger("tandem.metrics")

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
_TOOL_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

MODEL_CALL_SECONDS = Histogram(
    "tandem_model_call_seconds",
    "Duration of one model call, retries included.",
    ("role", "host", "outcome"),
    buckets=_LATENCY_BUCKETS,
)
MODEL_TOKENS = Counter(
    "tandem_model_tokens_total",
    "Tokens of model replies, as the host reported them.",
    ("role", "host", "kind"),
)
MODEL_COST = Counter(
    "tandem_model_cost_usd_total", "Price of model replies in USD (LiteLLM's cost map).", ("role", "host")
)
MODEL_IN_FLIGHT = Gauge(
    "tandem_model_calls_in_flight",
    "Model calls under way in this worker (its pool's processes added up).",
    ("role", "host"),
    multiprocess_mode="livesum",
)
RATE_LIMITED = Counter(
    "tandem_model_rate_limited_total", "Model calls answered 429 or 503.", ("role", "host", "status")
)
BACKOFF_SECONDS = Counter(
    "tandem_host_backoff_seconds_total",
    "Seconds of fleet-wide back-off asked by the hosts (Retry-After) in this process's calls.",
    ("role", "host"),
)
CAPACITY_WAITS = Counter(
    "tandem_capacity_waits_total",
    "Steps re-queued to wait for a model host's capacity.",
    ("role", "host", "reason"),
)
STEPS_RUNNING = Gauge(
    "tandem_steps_running",
    "Steps under way in this worker (its pool's processes added up).",
    ("task",),
    multiprocess_mode="livesum",
)
STEP_OUTCOMES = Counter("tandem_step_outcomes_total", "Finished steps by outcome.", ("task", "outcome"))
STEP_SECONDS = Histogram(
    "tandem_step_seconds",
    "Duration of one step task (a Thinker or Actor turn, a tool call, the intake), by role.",
    ("role", "task"),
    buckets=_LATENCY_BUCKETS,
)
JOBS_ENDED = Counter(
    "tandem_jobs_ended_total", "Jobs ended, by outcome (the job result's status).", ("outcome",)
)
JOB_SECONDS = Histogram(
    "tandem_job_seconds",
    "From a job's submission to its end, by outcome.",
    ("outcome",),
    buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400),
)
RECONCILER_ACTIONS = Counter(
    "tandem_reconciler_actions_total",
    "What the reconciler did to a job that needed it: resend (a lost or stalled step), intake "
    "(a queued job's message again), deliver (a Celery result again), deadline, cancel, give-up.",
    ("action",),
)
WORKER_UP = Gauge(
    "tandem_worker_up",
    "1 for a worker that is up, with the queues (roles) it consumes and its pool.",
    ("role", "pool"),
    multiprocess_mode="livemax",
)
TOOL_CALL_SECONDS = Histogram(
    "tandem_tool_call_seconds", "Duration of one tool call.", ("tool", "status"), buckets=_TOOL_BUCKETS
)


class FleetCollector:
    """Fleet-wide gauges read from Redis at each scrape: per limited host, the calls in flight
    across all workers and the steps registered as waiting for a slot."""

    def __init__(self, snapshots: Callable[[], list[HostSnapshot]]) -> None:
        self.snapshots = snapshots

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The two gauges (empty when Redis cannot be read: a scrape must not fail)."""
        in_flight = GaugeMetricFamily(
            "tandem_host_in_flight", "Calls under way to the host, fleet-wide.", labels=["host"]
        )
        waiting = GaugeMetricFamily(
            "tandem_host_waiting_steps", "Steps waiting for a slot of the host, fleet-wide.", labels=["host"]
        )
        try:
            for snap in self.snapshots():
                host = masked_url(snap.host)  # (registered by a worker older than host_id's mask)
                in_flight.add_metric([host], snap.in_flight)
                waiting.add_metric([host], snap.waiting)
        except Exception:
            log.warning("could not read the hosts' capacity for /metrics", exc_info=True)
        yield in_flight
        yield waiting


class QueueDepthCollector:
    """``tandem_queue_depth{queue}``, read from the broker at each scrape (one round trip on Redis).

    It describes itself, so registering it reads nothing, and a scrape restricted to other names
    (``/metrics?name[]=python_info``, the workers' liveness probe) never reaches the broker.
    """

    def __init__(self, depths: Callable[[], Mapping[str, int]]) -> None:
        self.depths = depths

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "tandem_queue_depth", "Messages waiting in the broker queue, fleet-wide.", labels=["queue"]
        )

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The gauge, without samples (what the registry needs to know of it)."""
        yield self._family()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The gauge (with no samples when the broker cannot be read: never a false zero)."""
        family = self._family()
        try:
            for queue, depth in self.depths().items():
                family.add_metric([queue], depth)
        except Exception:
            log.warning("could not read the queue depths for /metrics", exc_info=True)
        yield family


class JobCensusCollector:
    """``tandem_jobs{state}``, ``tandem_jobs_parked{reason}`` and ``tandem_jobs_live``, read from
    Redis at each scrape (``tandem.tasks.state.census``: exact up to its limit, estimated above).
    Like ``QueueDepthCollector`` it describes itself, so registering it reads nothing."""

    def __init__(self, census: Callable[[], Census]) -> None:
        self.census = census

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "tandem_jobs",
                "Live jobs by state, fleet-wide (queued, running, waiting, awaiting_approval, "
                "waiting_for_children; ended: "
                "their Celery result not stored yet). Estimated above the census limit.",
                labels=["state"],
            ),
            GaugeMetricFamily(
                "tandem_jobs_parked",
                "Parked jobs by reason, fleet-wide: approval (awaiting a person), children (waiting for "
                "child jobs), in_flight/rpm/tpm/"
                "backoff/probe (waiting for a model host's capacity), retry (after a transient failure).",
                labels=["reason"],
            ),
            GaugeMetricFamily("tandem_jobs_live", "Jobs in the live-job index, fleet-wide (exact)."),
        )

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The gauges, without samples."""
        yield from self._families()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The gauges (no samples when Redis cannot be read: never a false zero)."""
        states, parked, live = self._families()
        try:
            census = self.census()
        except Exception:
            log.warning("could not count the jobs for /metrics", exc_info=True)
        else:
            for state in (*LIVE_STATES, "ended"):
                states.add_metric([state], census.states.get(state, 0.0))
            if "unknown" in census.states:
                states.add_metric(["unknown"], census.states["unknown"])
            for reason in ("approval", "children", *PARK_REASONS, "retry"):
                parked.add_metric([reason], census.parked.get(reason, 0.0))
            live.add_metric([], census.live)
        yield states
        yield parked
        yield live


class TenantCollector:
    """``tandem_tenant_jobs{tenant,state}``, ``tandem_tenant_tokens_today{tenant}`` and
    ``tandem_tenant_cost_usd_today{tenant}``, read from Redis at each scrape
    (``tandem.tasks.tenants.report``). It describes itself, so registering it reads nothing."""

    def __init__(self, rows: Callable[[], list[dict[str, Any]]]) -> None:
        self.rows = rows

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "tandem_tenant_jobs",
                "A tenant's jobs running (admitted) or waiting for their turn, fleet-wide.",
                labels=["tenant", "state"],
            ),
            GaugeMetricFamily(
                "tandem_tenant_tokens_today",
                "Model tokens of a tenant's jobs this UTC day.",
                labels=["tenant"],
            ),
            GaugeMetricFamily(
                "tandem_tenant_cost_usd_today",
                "USD of a tenant's model calls this UTC day.",
                labels=["tenant"],
            ),
        )

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The gauges, without samples."""
        yield from self._families()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The gauges (no samples when Redis cannot be read: never a false zero)."""
        jobs, tokens, cost = self._families()
        try:
            rows = self.rows()
        except Exception:
            log.warning("could not read the tenants for /metrics", exc_info=True)
            rows = []
        for row in rows:
            jobs.add_metric([row["tenant"], "running"], row["running"])
            jobs.add_metric([row["tenant"], "waiting"], row["waiting"])
            tokens.add_metric([row["tenant"]], row["tokens_today"])
            cost.add_metric([row["tenant"]], row["cost_usd_today"])
        yield jobs
        yield tokens
        yield cost


def serve(
    port: int,
    snapshots: Callable[[], list[HostSnapshot]] | None = None,
    depths: Callable[[], Mapping[str, int]] | None = None,
    census: Callable[[], Census] | None = None,
    tenants: Callable[[], list[dict[str, Any]]] | None = None,
) -> int:
    """Serve ``/metrics`` on ``port`` (0: any free port) in a daemon thread; the port it got.

    ``snapshots`` adds the fleet-wide gauges of ``FleetCollector``, ``depths`` the queue depths of
    ``QueueDepthCollector``, ``census`` the jobs by state of ``JobCensusCollector``, ``tenants``
    the tenants' jobs and usage of ``TenantCollector``.
    """
    registry = REGISTRY
    if process_metrics.enabled():  # a prefork worker: add up the samples of its processes
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
    if snapshots is not None:
        registry.register(FleetCollector(snapshots))
    if depths is not None:
        registry.register(QueueDepthCollector(depths))
    if census is not None:
        registry.register(JobCensusCollector(census))
    if tenants is not None:
        registry.register(TenantCollector(tenants))
    server, _thread = start_http_server(port, registry=registry)
    bound = int(server.server_address[1])
    log.info("Prometheus metrics on port %d", bound)
    return bound


class MeteredToolRunner(ToolRunner):
    """A ``ToolRunner`` that times every call into ``tandem_tool_call_seconds``."""

    def run_call(
        self,
        tools: Mapping[str, Tool],
        call: Any,
        index: int,
        ctx: ToolCallContext | None = None,
        *,
        call_id: str | None = None,
        approved: bool = False,
    ) -> FunctionCallResult:
        """Run the call (see ``ToolRunner.run_call``) and record its duration."""
        started = time.perf_counter()
        result = super().run_call(tools, call, index, ctx, call_id=call_id, approved=approved)
        name = call.name if call.name in tools else "(unknown)"  # bounded label values
        TOOL_CALL_SECONDS.labels(name, result.status.value).observe(time.perf_counter() - started)
        return result
