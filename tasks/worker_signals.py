"""Worker start-up: every worker process runs a lease watchdog (see ``tandem.tasks.leases``)."""

from __future__ import annotations

import gc
import logging
from typing import Any

from celery.signals import worker_init, worker_ready, worker_shutdown

from tandem.tasks.app import app
from tandem.tasks.leases import Watchdog
from tandem.tasks.runtime import get_runtime

log = logging.getLogger("tandem.worker")
_watchdog: Watchdog | None = None


def _send_again(dispatch: dict[str, Any]) -> None:
    app.send_task(dispatch["name"], args=dispatch["args"], **dispatch.get("options", {}))


def _give_up(step_id: str, dispatch: dict[str, Any]) -> None:
    """A step that keeps losing its worker fails its job rather than loop for ever."""
    from tandem.tasks.turns import finish

    job_id = step_id.split(":", 1)[0]
    result = finish(job_id, "failed", f"step {step_id} lost its worker too many times; giving up")
    app.backend.store_result(job_id, result, "SUCCESS")


@worker_init.connect
def _warm_up(**_: Any) -> None:
    """Import LiteLLM before taking work when a real model is configured: the import takes a
    second or two of CPU, which would otherwise land inside the first step (and its lease)."""
    settings = get_runtime().settings
    # Only where a model is called: a tools worker would pay the import (and ~130 MB) for nothing.
    consumed = app.amqp.queues.consume_from  # the worker's queues (``-Q``), set before worker_init
    if any(role in consumed and not settings.role(role).is_demo for role in ("thinker", "actor")):
        from tandem.reasoner.litellm_service import _import_litellm

        _import_litellm()


@worker_ready.connect
def _start_watchdog(**_: Any) -> None:
    global _watchdog
    rt = get_runtime()
    _watchdog = Watchdog(rt.redis, rt.lease_keys, rt.settings.lease_seconds, _send_again, _give_up)
    _watchdog.start()
    log.info("lease watchdog started (lease %.1f s)", rt.settings.lease_seconds)


@worker_ready.connect
def _freeze_startup_objects(**_: Any) -> None:
    """Keep the start-up objects (modules, LiteLLM's tables: some 400,000) out of garbage collection.

    Every hop is a ``Task.replace``, and Celery answers it by building billiard ``ExceptionInfo``
    copies of the traceback (each holding the positions of Celery's 2,300-instruction tracer):
    reference cycles of a few hundred KB per hop. Python runs a full collection only once the
    objects promoted since the last one reach a quarter of the old generation, so with the start-up
    objects in it that garbage piles up for minutes (+50 to 140 MB per worker under load). Frozen,
    they leave the old generation small and its collections frequent and cheap.
    """
    gc.collect()
    gc.freeze()
    gc.collect()  # counts the (now small) old generation afresh


@worker_shutdown.connect
def _stop_watchdog(**_: Any) -> None:
    if _watchdog is not None:
        _watchdog.stop()
