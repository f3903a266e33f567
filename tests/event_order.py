"""The order of a job's events that docs/events.md promises every consumer, as a checker the unit
and integration tests share: ``order_problems(events)`` lists every broken promise (empty: none).

What every run must show:

- ``job_started`` first; ``final`` last (``webhook_*`` events of its own deliveries may follow);
- each round's ``round_started`` exactly once, before every ``model_delta``, ``model_reply``,
  ``memory_compacted``, ``tool_call`` and ``tool_result`` of that round, and after everything of
  the round before;
- the deltas of the attempt that was stored (``seq`` 0, 1, ...) before its ``model_reply``,
  adding up to the reply's text.

With ``late_deltas=False`` (a run with no fault, the default) every ``model_delta`` of a
``(round, role)`` comes before that call's ``model_reply``. With ``late_deltas=True`` (a worker
died, or was cut off, mid-reply) deltas of attempts that were never stored may come anywhere after
their round's ``round_started``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ROUND_EVENTS = frozenset({"model_delta", "model_reply", "memory_compacted", "tool_call", "tool_result"})
"""The events that belong to a round and must follow its ``round_started``."""


def _kind(event: Any) -> str:
    return str(event["type"])


def _field(event: Any, name: str) -> Any:
    value = getattr(event, name, None)
    return value if value is not None else event["data"].get(name)


def order_problems(events: Sequence[Any], *, late_deltas: bool = False) -> list[str]:
    """Every way ``events`` (``JobEvent`` models, in stream order) breaks the order contract."""
    problems: list[str] = []
    kinds = [_kind(e) for e in events]
    if not kinds or kinds[0] != "job_started":
        problems.append(f"the first event is {kinds[:1]}, not job_started")
    ends = [i for i, k in enumerate(kinds) if k == "final"]
    if ends:
        after = [k for k in kinds[ends[-1] + 1 :] if not k.startswith("webhook_")]
        if after:
            problems.append(f"events after final: {after}")
    opened: dict[int, int] = {}
    stored_attempts: dict[tuple[int, str], set[str]] = {}
    for i, event in enumerate(events):
        kind = _kind(event)
        if kind == "round_started":
            round_no = int(_field(event, "round"))
            if round_no in opened:
                problems.append(f"round_started({round_no}) again at #{i} (first at #{opened[round_no]})")
                continue
            later = [r for r in opened if r > round_no]
            if later:
                problems.append(f"round_started({round_no}) at #{i} after round_started({max(later)})")
            opened[round_no] = i
        elif kind in ROUND_EVENTS:
            round_no = int(_field(event, "round"))
            if round_no not in opened:
                problems.append(f"{kind}(round {round_no}) at #{i} before its round_started")
            newer = [r for r in opened if r > round_no]
            stale_delta = kind == "model_delta" and late_deltas
            if newer and not stale_delta:
                problems.append(f"{kind}(round {round_no}) at #{i} after round_started({max(newer)})")
    for i, event in enumerate(events):
        if _kind(event) != "model_reply":
            continue
        key = (int(_field(event, "round")), str(_field(event, "role")))
        deltas = [
            (j, d)
            for j, d in enumerate(events)
            if _kind(d) == "model_delta" and (int(_field(d, "round")), str(_field(d, "role"))) == key
        ]
        attempts: dict[str, list[Any]] = {}
        for j, d in deltas:
            attempts.setdefault(str(_field(d, "attempt")), []).append((j, d))
        matching = [
            a
            for a, ds in attempts.items()
            if "".join(str(_field(d, "content") or "") for _, d in ds) == (_field(event, "content") or "")
            and "".join(str(_field(d, "reasoning") or "") for _, d in ds)
            == (_field(event, "reasoning") or "")
        ]
        if deltas and not matching and not late_deltas:  # else the stored call may not have streamed
            problems.append(f"no attempt's model_delta events add up to model_reply{key} at #{i}")
        for attempt in matching[:1]:
            stored_attempts.setdefault(key, set()).add(attempt)
            positions = [j for j, _ in attempts[attempt]]
            if max(positions) > i:
                problems.append(f"a model_delta of the stored attempt of {key} comes after its model_reply")
            seqs = [int(_field(d, "seq")) for _, d in attempts[attempt]]
            if seqs != list(range(len(seqs))):
                problems.append(f"the stored attempt of {key} has seq {seqs}")
        if not late_deltas and any(j > i for j, _ in deltas):
            problems.append(f"a model_delta of {key} comes after its model_reply at #{i}")
    return problems


__all__ = ["ROUND_EVENTS", "order_problems"]
