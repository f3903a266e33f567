"""The format versions of a job's records, and which ones this code reads.

Failure model first: a deploy rolls workers one by one while jobs are parked for days (approvals,
questions), so a worker of one release meets records written by another. Every job's record (its
``state`` hash) says which formats its keys hold:

- ``spec_version``: the format of the job's ``spec`` key (``JobSpec`` as stored). It is written
  where the spec is written: at intake (``create.lua``), by a resume and by a fork
  (``reopen.lua``). ``submit``'s ``queued`` record carries the version of the spec it sent, and so
  does the intake message (header ``tandem_spec_version``).
- ``memory_version``: the format of what the job's steps write: its memory (messages), tool
  results, pause records, artifacts. It lives on the record only, not on each entry: one place to
  read, and one field a claim checks. A worker whose format is newer raises it when it claims a
  step or a call of the job (``claim.lua``, ``claim_call.lua``), before it writes anything, so from
  then on only workers that read that format take the job. A fork writes its copy of the memory in
  the forking worker's format.

A record without the fields (written by the release before versions were kept) is version 0, the
same format as version 1. A worker reads every version from its oldest to its newest
(``SUPPORTED``); a step of a job outside that range is handed back to its queue untouched
(``tandem.tasks.steps.hand_back``), never failed, and its reconciler leaves the job alone.

When to bump: ``SPEC_VERSION`` when a spec stored by the new code cannot be read by the previous
release (a new ``JobSpec`` field: it forbids unknown ones, and the stored spec holds every field);
``MEMORY_VERSION`` likewise for what steps write. Raise the oldest versions only once no job of
them can be in flight (``tandem version-check`` says). ``tests/tasks/test_versions.py`` pins the
shapes of both formats to these numbers.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tandem.tasks.spec import FINAL_STATES
from tandem.tasks.state.keys import LIVE_SHARDS, job_key, live_shard_key
from tandem.tasks.state.record import text

SPEC_VERSION = 2
"""The format of the specs this code writes (2: ``JobSpec.parent_id``, child jobs)."""
MEMORY_VERSION = 2
"""The format of the memory (and tool results, pause records) this code writes (2: the state
``waiting_for_children`` and its pause record, child jobs)."""
OLDEST_SPEC_VERSION = 0
"""The oldest spec format this code reads (0: a record from before versions were kept)."""
OLDEST_MEMORY_VERSION = 0
"""The oldest memory format this code reads."""

SPEC_VERSION_FIELD = "spec_version"
"""The record field of the spec's version."""
MEMORY_VERSION_FIELD = "memory_version"
"""The record field of the memory's version."""
SPEC_VERSION_HEADER = "tandem_spec_version"
"""The intake message's header naming its spec's version (``send_intake``)."""

Fit = Literal["ok", "newer", "older"]
"""How a job's versions fit a worker: it reads them, they are newer than it reads, or older."""


@dataclass(frozen=True, order=True)
class JobVersions:
    """The format versions of one job (``spec``, ``memory``)."""

    spec: int = 0
    memory: int = 0

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> JobVersions:
        """The versions a raw record (fields as text) holds; 0 for a field missing or not a
        whole number (a record from before versions were kept)."""
        return cls(_version(record.get(SPEC_VERSION_FIELD)), _version(record.get(MEMORY_VERSION_FIELD)))

    def __str__(self) -> str:
        return f"spec v{self.spec}, memory v{self.memory}"


def _version(value: Any) -> int:
    if isinstance(value, bytes):
        value = value.decode()
    try:
        return max(int(str(value)), 0) if value not in (None, "") else 0
    except ValueError:
        return 0


@dataclass(frozen=True)
class SupportedVersions:
    """The versions a worker reads (``oldest`` to ``newest`` of each) and writes (``newest``)."""

    oldest: JobVersions
    newest: JobVersions

    def fit(self, versions: JobVersions) -> Fit:
        """``newer`` when either version is above what this worker reads (a newer worker may read
        it), ``older`` when either is below, ``ok`` otherwise."""
        if versions.spec > self.newest.spec or versions.memory > self.newest.memory:
            return "newer"
        if versions.spec < self.oldest.spec or versions.memory < self.oldest.memory:
            return "older"
        return "ok"

    def lua_args(self) -> list[int]:
        """The four script arguments of the version check (``readable`` in ``prelude.lua``): the
        oldest and newest spec version, then the oldest and newest memory version."""
        return [self.oldest.spec, self.newest.spec, self.oldest.memory, self.newest.memory]

    def __str__(self) -> str:
        oldest, newest = self.oldest, self.newest
        return f"spec v{oldest.spec}-v{newest.spec}, memory v{oldest.memory}-v{newest.memory}"


SUPPORTED = SupportedVersions(
    oldest=JobVersions(OLDEST_SPEC_VERSION, OLDEST_MEMORY_VERSION),
    newest=JobVersions(SPEC_VERSION, MEMORY_VERSION),
)
"""What this code reads and writes."""


class OncePerJob:
    """Which jobs a worker process has said something about already, so that a job handed back
    again and again (or looked at by the reconciler every sweep) is logged once, not once per
    look. Bounded: it forgets the oldest of more than ``size`` jobs (which may then be logged
    once more). Thread-safe."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def first(self, job_id: str) -> bool:
        """``True`` the first time ``job_id`` is seen (then remembered), ``False`` after."""
        with self._lock:
            if job_id in self._seen:
                return False
            self._seen[job_id] = None
            if len(self._seen) > self.size:
                self._seen.popitem(last=False)
            return True


@dataclass(frozen=True)
class VersionsInFlight:
    """The live jobs of a store counted by their versions (``tandem version-check``): every job in
    the reconciler's live-job index whose record has not ended (queued, running, waiting, parked);
    ``ended`` counts those that ended but whose Celery result is still to be stored."""

    counts: dict[JobVersions, int]
    ended: int = 0

    @property
    def live(self) -> int:
        """How many live jobs were counted."""
        return sum(self.counts.values())


def versions_in_flight(redis: Any, prefix: str, batch: int = 500) -> VersionsInFlight:
    """Count the live jobs of the store under ``prefix`` by version: every entry of the live-job
    index (``ZSCAN`` per shard), each record's state and versions read in pipelined ``HMGET``s of
    ``batch`` records. Exact (not sampled, unlike the metrics' census): an operator decides a
    rollback on it."""
    counts: Counter[JobVersions] = Counter()
    ended = 0
    for shard in range(LIVE_SHARDS):
        ids = [text(member) for member, _ in redis.zscan_iter(live_shard_key(prefix, shard), count=batch)]
        for start in range(0, len(ids), batch):
            pipe = redis.pipeline(transaction=False)
            for job_id in ids[start : start + batch]:
                pipe.hmget(
                    job_key(prefix, job_id, "state"), "state", SPEC_VERSION_FIELD, MEMORY_VERSION_FIELD
                )
            for state, spec, memory in pipe.execute():
                if state is None:  # expired; the reconciler drops it from the index
                    continue
                if text(state) in FINAL_STATES:
                    ended += 1
                    continue
                counts[JobVersions(_version(spec), _version(memory))] += 1
    return VersionsInFlight(dict(counts), ended)


__all__ = [
    "MEMORY_VERSION",
    "MEMORY_VERSION_FIELD",
    "OLDEST_MEMORY_VERSION",
    "OLDEST_SPEC_VERSION",
    "SPEC_VERSION",
    "SPEC_VERSION_FIELD",
    "SPEC_VERSION_HEADER",
    "SUPPORTED",
    "Fit",
    "JobVersions",
    "OncePerJob",
    "SupportedVersions",
    "VersionsInFlight",
    "versions_in_flight",
]
