"""The Celery configuration: JSON only, late acks, per-role queues and routes, events for Flower."""

from __future__ import annotations

from typing import Any

from kombu import Queue

from tandem.broker_config.settings import Settings

ROLE_QUEUES = ("thinker", "actor", "tools")

TASK_QUEUES: dict[str, str] = {
    "tandem.thinker_turn": "thinker",
    "tandem.actor_turn": "actor",
    "tandem.react_turn": "actor",
    "tandem.finalize": "actor",
    "tandem.run_tool": "tools",
    "tandem.collect_tools": "tools",
}
"""Where each step runs; ``tandem.infer`` goes to the intake queue (``celery`` by default)."""


def celery_config(settings: Settings) -> dict[str, Any]:
    """The ``app.conf`` values for ``settings``.

    - Only JSON crosses the broker and the result backend.
    - ``acks_late`` + ``reject_on_worker_lost`` + prefetch 1: a message leaves the queue only when
      its step has finished, and a worker holds at most one message per thread it runs.
    - The visibility timeout exceeds the hard time limit of a step, so Redis never redelivers a
      step that is still running; a step whose worker died is taken over sooner, through its
      lease (``tandem.tasks.leases``), after ``lease_seconds``.
    """
    visibility = int(settings.task_time_limit + 4 * settings.lease_seconds + 60)
    routes = {name: {"queue": queue} for name, queue in TASK_QUEUES.items()}
    routes["tandem.infer"] = {"queue": settings.intake_queue}
    return {
        "broker_url": settings.broker_url,
        "result_backend": settings.result_backend,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "event_serializer": "json",
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_default_queue": settings.intake_queue,
        "task_queues": [Queue(settings.intake_queue), *(Queue(q) for q in ROLE_QUEUES)],
        "task_routes": routes,
        "task_track_started": True,
        "task_send_sent_event": True,
        "worker_send_task_events": True,
        "result_extended": True,
        "result_expires": settings.result_expires,
        "task_time_limit": settings.task_time_limit,
        "task_soft_time_limit": max(settings.task_time_limit - 30, settings.task_time_limit * 0.9),
        "broker_transport_options": {"visibility_timeout": visibility},
        "result_backend_transport_options": {"visibility_timeout": visibility},
        "broker_connection_retry_on_startup": True,
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "worker_hijack_root_logger": False,
    }
