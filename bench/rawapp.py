"""Plain Celery apps with no-op tasks: the baseline hops of ``raw_hop_ms``.

Same broker and result backend as the tandem workers of the run (``BENCH_RAW_BROKER_URL``), JSON
only, late acks, prefetch 1, but none of tandem's steps, leases or events. Two configurations:

* ``plain``: only the above (the figure the issue asks for);
* ``tandem``: plus what tandem's Celery configuration adds to every task (task events for
  Flower, ``task_track_started``, ``result_extended``), to tell Celery's share of a tandem hop
  from tandem's own.

A worker serves one configuration (``BENCH_RAW_CONFIG``, default ``plain``) on its own queue::

    BENCH_RAW_CONFIG=plain celery -A bench.rawapp worker --pool threads -c 1 -Q bench_raw_plain
"""

from __future__ import annotations

import os

from celery import Celery, Task

CONFIGS = ("plain", "tandem")


def make_app(config: str, broker_url: str) -> Celery:
    """A Celery app with the ``bench.noop`` and ``bench.replace_hop`` tasks for ``config``."""
    if config not in CONFIGS:
        raise ValueError(f"unknown raw app configuration {config!r}; use one of {CONFIGS}")
    app = Celery(f"bench_raw_{config}", broker=broker_url, backend=broker_url)
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        task_default_queue=queue(config),
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    if config == "tandem":
        app.conf.update(
            task_track_started=True,
            task_send_sent_event=True,
            worker_send_task_events=True,
            result_extended=True,
        )

    @app.task(name="bench.noop", shared=False)
    def noop() -> None:
        """Nothing: a hop of a chain costs only Celery's own work."""

    @app.task(name="bench.replace_hop", bind=True, shared=False)
    def replace_hop(self: Task, remaining: int) -> None:
        """Replace itself ``remaining`` times: tandem's kind of hop (``Task.replace``, one id)."""
        if remaining > 0:
            raise self.replace(replace_hop.si(remaining - 1))

    return app


def queue(config: str) -> str:
    """The queue of ``config``'s worker."""
    return f"bench_raw_{config}"


app = make_app(
    os.environ.get("BENCH_RAW_CONFIG", "plain"),
    os.environ.get("BENCH_RAW_BROKER_URL", "redis://127.0.0.1:6379/4"),
)
