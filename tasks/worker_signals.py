"""Worker start-up: every worker process runs a lease watchdog (see ``tasks.leases``)."""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import worker_ready, worker_shutdown

from tasks.app import app
from tasks.leases import Watchdog
from tasks.runtime import get_runtime

log = logging.getLogger("tandem.worker")
_watchdog: Watchdog | None = None


def _send_again(dispatch: dict[str, Any]) -> None:
    app.send_task(dispatch["name"], args=dispatch["args"], **dispatch.get("options", {}))


def _give_up(step_id: str, dispatch: dict[str, Any]) -> None:
    """A step that keeps losing its worker fails its job rather than loop for ever."""
    from tasks.turns import finish

    job_id = step_id.split(":", 1)[0]
    result = finish(job_id, "failed", f"step {step_id} lost its worker too many times; giving up")
    app.backend.store_result(job_id, result, "SUCCESS")


@worker_ready.connect
def _start_watchdog(**_: Any) -> None:
    global _watchdog
    rt = get_runtime()
    _watchdog = Watchdog(rt.redis, rt.lease_keys, rt.settings.lease_seconds, _send_again, _give_up)
    _watchdog.start()
    log.info("lease watchdog started (lease %.1f s)", rt.settings.lease_seconds)


@worker_shutdown.connect
def _stop_watchdog(**_: Any) -> None:
    if _watchdog is not None:
        _watchdog.stop()
