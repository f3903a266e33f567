"""A plain Celery app with one no-op task: the baseline hop of ``raw_hop_ms``.

Same broker and result backend as the tandem workers of the run (``BENCH_RAW_BROKER_URL``), JSON
only, late acks, prefetch 1, but none of tandem's steps, leases or events. Its worker runs
``celery -A bench.rawapp worker --pool threads -c 1`` on its own queue ``bench_raw``.
"""

from __future__ import annotations

import os

from celery import Celery

QUEUE = "bench_raw"
BROKER_URL = os.environ.get("BENCH_RAW_BROKER_URL", "redis://127.0.0.1:6379/4")

app = Celery("bench_raw", broker=BROKER_URL, backend=BROKER_URL)
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    result_accept_content=["json"],
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_default_queue=QUEUE,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="bench.noop")
def noop() -> None:
    """Nothing: a hop of a chain costs only Celery's own work."""
