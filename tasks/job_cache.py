"""``JobCache``: what a worker process keeps of a job between its steps, bounded.

Some of what a step needs is fixed for the life of a job's spec: the job's loop plan, its reasoner
``Task`` (the tool policy checked, the secrets unsealed) and the tools recommended for it. Building
them on every step message costs a policy check, a Fernet unseal and a toolkit recommendation, so a
worker keeps them here, least recently used first out.

An entry's key is the job id *and* the spec exactly as stored (its JSON): a job resumed with a new
spec (``tandem.resume`` may change ``max_rounds``) or a fork (a new id) misses the cache and builds
anew, so a stale entry is never used. Entries are kept per ``Runtime`` (one per worker process), and
at most ``size`` of them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")

JOB_CACHE_SIZE = 256
"""How many jobs a worker process keeps (a few hundred jobs in flight per worker at most)."""


class JobCache(Generic[V]):
    """A bounded, thread-safe LRU map from ``(job_id, spec_json)`` to what was built for it."""

    def __init__(self, size: int = JOB_CACHE_SIZE) -> None:
        if size < 1:
            raise ValueError(f"a job cache holds at least one job, not size={size!r}")
        self.size = size
        self._entries: OrderedDict[tuple[str, str], V] = OrderedDict()
        self._lock = threading.Lock()
        self.builds = 0
        """How many entries were built (a miss each): for tests and the curious."""

    def get(self, job_id: str, spec_json: str, build: Callable[[], V]) -> V:
        """The entry of ``job_id`` at ``spec_json``, built with ``build()`` on a miss (outside the
        lock: two threads missing at once both build, and the second one's entry is kept)."""
        key = (job_id, spec_json)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        value = build()
        self.put(job_id, spec_json, value)
        return value

    def put(self, job_id: str, spec_json: str, value: V) -> None:
        """Keep ``value`` for ``job_id`` at ``spec_json``, dropping the least recently used past ``size``."""
        with self._lock:
            self.builds += 1
            self._entries[(job_id, spec_json)] = value
            self._entries.move_to_end((job_id, spec_json))
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
