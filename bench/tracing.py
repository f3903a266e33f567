"""``python -m bench.tracing [--jobs N]``: what tracing costs a step, off and on.

Runs dual jobs with a tool round in this process (fakeredis, the offline demo model, every message
applied in order as a worker would, with its headers), alternating tracing off (no ``OTEL_*``
variables: the SDK is not started) and on (the SDK with an in-memory exporter behind a batch
processor, as a worker exporting over OTLP has it), and prints the CPU time per step message
(``tandem.*`` task applied) of each and the difference. The job's Redis work runs on fakeredis
in this process, so the per-step figure is larger than a worker's own CPU time on a real Redis:
the difference is what tracing adds (noisy on a shared machine: best of ``--rounds``). It also
times the tracing calls of one model step alone (``step_tracing_calls_us_*``): a step span with its
claim and commit attributes, a model span with its reply, the next message's headers.
"""

from __future__ import annotations

import argparse
import importlib
import time
from collections import deque
from typing import Any

import fakeredis
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tandem.broker_config import Settings
from tandem.reasoner import tracing
from tandem.tasks import runtime as runtime_module
from tandem.tasks.app import app
from tandem.tasks.runtime import Runtime


def _run_jobs(count: int, prefix: str) -> tuple[float, int]:
    """Run ``count`` jobs; the process CPU seconds they took and the messages applied."""
    queue: deque[tuple[str, list[Any], Any]] = deque()

    def send_task(name: str, args: Any = None, kwargs: Any = None, **kw: Any) -> None:
        queue.append((name, list(args or []), kw.get("headers")))

    real, app.send_task = app.send_task, send_task  # type: ignore[method-assign]
    applied = 0
    started = time.process_time()
    try:
        for i in range(count):
            spec = {"goal": "What is 17 * 23?"}
            app.tasks["tandem.infer"].apply(
                kwargs={"spec": spec}, task_id=f"{prefix}-{i}", ignore_result=True
            )
            applied += 1
            while queue:
                name, args, headers = queue.popleft()
                app.tasks[name].apply(args=args, headers=headers)
                applied += 1
    finally:
        app.send_task = real  # type: ignore[method-assign]
    return time.process_time() - started, applied


def _step_calls(n: int) -> float:
    """CPU seconds per run of what a model step calls of tracing: its step span, claim and commit
    attributes, one model span with its reply, the header carrier of its next message."""
    from tandem.reasoner.messages import ModelMessage
    from tandem.tasks.tracing import claimed, headers, outcome, step_span

    reply = ModelMessage(role="thinker", content="ok")
    started = time.process_time()
    for _ in range(n):
        with step_span("job", 1, "thinker"):
            claimed(1, 0)
            with tracing.model_span("openai/m", "http://gpu-1:8000/v1", "thinker") as span:
                tracing.model_request(span, "system", [])
                tracing.model_reply(span, reply)
            headers(tracing.carrier())
            outcome("tandem.commit", "committed")
    return (time.process_time() - started) / n


def main() -> None:
    """Print the per-step CPU time with tracing off and on, and the spans per step."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=200, help="jobs per measurement (default 200)")
    parser.add_argument("--rounds", type=int, default=5, help="alternations of off and on (default 5)")
    options = parser.parse_args()
    for module in app.conf.imports:
        importlib.import_module(module)
    runtime = Runtime(Settings(lease_seconds=30.0, stall_seconds=60.0, memory_ttl=600))
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    runtime_module._runtime = runtime
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=200))
    _run_jobs(20, "warm-off")  # imports, caches
    tracing.install(provider)
    _run_jobs(20, "warm-on")
    tracing.uninstall()
    exporter.clear()
    off: list[float] = []
    on: list[float] = []
    spans = steps_on = 0
    for r in range(options.rounds):
        seconds, applied = _run_jobs(options.jobs, f"off-{r}")
        off.append(seconds / applied)
        tracing.install(provider)
        seconds, applied = _run_jobs(options.jobs, f"on-{r}")
        on.append(seconds / applied)
        tracing.flush()
        tracing.uninstall()
        spans += len(exporter.get_finished_spans())
        steps_on += applied
        exporter.clear()
        runtime.redis.flushdb()
    micro_off = min(_step_calls(20000) for _ in range(3))
    tracing.install(provider)
    micro_on = min(_step_calls(5000) for _ in range(3))
    tracing.uninstall()
    print(f"step_tracing_calls_us_off: {micro_off * 1e6:.2f}")
    print(f"step_tracing_calls_us_on: {micro_on * 1e6:.1f}")
    best_off, best_on = min(off) * 1e6, min(on) * 1e6
    print(f"step_cpu_us_tracing_off: {best_off:.0f}")
    print(f"step_cpu_us_tracing_on: {best_on:.0f}")
    print(f"tracing_overhead_us_per_step: {best_on - best_off:.0f}")
    print(f"tracing_overhead_percent: {100 * (best_on - best_off) / best_off:.1f}")
    print(f"spans_per_step_message: {spans / steps_on:.2f}")


if __name__ == "__main__":
    main()
