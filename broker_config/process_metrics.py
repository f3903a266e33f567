"""Metrics of a worker whose tasks run in child processes (``--pool prefork``).

prometheus_client keeps a process's samples in that process's memory, so the ``/metrics`` endpoint
of a prefork worker (served by its parent) would show none of what its children record. In
prometheus_client's multiprocess mode every process writes its samples to files in one
directory, and the endpoint adds them up. The mode is chosen when prometheus_client is first
imported, so ``prepare`` runs before the worker imports the app (``tandem worker`` calls it;
``celery worker`` run directly needs ``PROMETHEUS_MULTIPROC_DIR`` set to an empty directory).

This module imports nothing of prometheus_client itself.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client's variable naming the directory of the processes' sample files."""


def prepare(pool: str) -> str | None:
    """For a prefork worker, the directory its processes write their samples to: the one in
    ``PROMETHEUS_MULTIPROC_DIR`` (created if missing, emptied of an earlier run's files), or a
    fresh one removed at exit. ``None`` (nothing set) for the other pools, whose tasks run in the
    process that serves ``/metrics``."""
    if pool != "prefork":
        return None
    directory = os.environ.get(ENV)
    if directory:
        os.makedirs(directory, exist_ok=True)
        for name in os.listdir(directory):
            if name.endswith(".db"):  # an earlier worker's samples would count again
                os.unlink(os.path.join(directory, name))
        return directory
    directory = tempfile.mkdtemp(prefix="tandem-metrics-")
    os.environ[ENV] = directory
    owner = os.getpid()

    def remove() -> None:  # by the worker that made it, not by a pool process that inherited it
        if os.getpid() == owner:
            shutil.rmtree(directory, ignore_errors=True)

    atexit.register(remove)
    return directory


def enabled() -> bool:
    """Whether this process writes its samples to files (multiprocess mode)."""
    return bool(os.environ.get(ENV))


def process_ended(pid: int) -> None:
    """Drop the live gauges of a pool process that ended (its counters stay counted)."""
    if enabled():
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
