"""Worker faults for the event-order breaking tests: find the process holding a job's step (its
lease holder, ``host:pid:...`` in the job's record), kill or pause it, and wait until a resumed
worker has finished what it was doing."""

from __future__ import annotations

import os
import signal
from typing import Any

from tandem.workers.embedded import WorkerGroup
from tests.integration.breaking import poll
from tests.integration.conftest import Cluster
from tests.integration.event_order import Event, raw_events


def holder_pid(cluster: Cluster, job_id: str, round_no: int, kind: str) -> int | None:
    """The pid of the worker process holding the job's step ``kind`` of ``round_no``, from its
    record (``None`` while the job is at another step or nobody holds it)."""
    key = f"{cluster.settings.prefix}:{{{job_id}}}:state"
    holder, at_round, at_kind = cluster.redis.hmget(key, ["holder", "round", "kind"])
    if not holder or (at_round, at_kind) != (str(round_no).encode(), kind.encode()):
        return None
    parts = holder.decode().split(":")
    return int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else None


def process_of(cluster: Cluster, pid: int) -> tuple[WorkerGroup, str]:
    """The group and role of the worker process ``pid``."""
    for group in cluster.groups:
        for role, proc in group.processes.items():
            if proc.pid == pid:
                return group, role
    raise AssertionError(f"no worker of the cluster has pid {pid}")


def deltas(cluster: Cluster, job_id: str, round_no: int, role: str) -> list[Event]:
    """The ``model_delta`` events of one round and role stored so far."""
    return [
        e
        for e in raw_events(cluster.redis, job_id)
        if e["type"] == "model_delta" and (e["round"], e["role"]) == (round_no, role)
    ]


def holder_streaming(cluster: Cluster, job_id: str, round_no: int, role: str, *, text: bool) -> int:
    """Wait until a worker holds the job's step and (``text``) has written a delta of it; its pid."""

    def ready() -> int | None:
        pid = holder_pid(cluster, job_id, round_no, role)
        if pid is None or (text and not deltas(cluster, job_id, round_no, role)):
            return None
        return pid

    return int(poll(ready, 120, f"a worker streaming round {round_no} {role} of {job_id}"))


def pause(cluster: Cluster, pid: int) -> None:
    """SIGSTOP a worker process (it stays alive: it must not exit by itself after SIGCONT)."""
    group, role = process_of(cluster, pid)
    assert group.processes[role].poll() is None, f"the {role} worker {pid} exited by itself before the pause"
    os.kill(pid, signal.SIGSTOP)


def resume(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)


def node_of(cluster: Cluster, group: WorkerGroup, role: str) -> str:
    """The Celery node name of a group's role worker (as a ping answers it)."""
    want = f"{role}-{group.name}@"

    def found() -> str | None:
        for reply in cluster.app.control.ping(timeout=1.0) or []:
            for name in reply:
                if name.startswith(want):
                    return str(name)
        return None

    return str(poll(found, 120, f"a ping answer from {want}*"))


def idle(cluster: Cluster, group: WorkerGroup, role: str) -> None:
    """Wait until the worker answers that it runs no task (a resumed worker finished its step)."""
    node = node_of(cluster, group, role)

    def no_task() -> bool:
        active: dict[str, Any] | None = cluster.app.control.inspect(destination=[node], timeout=1.0).active()
        return bool(active) and node in active and active[node] == []

    poll(no_task, 180, f"{node} to finish its tasks")
