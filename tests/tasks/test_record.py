"""``JobRecord``: the typed read of a job's record, strict on the kinds it names, lenient on what
an older or damaged record holds."""

from __future__ import annotations

import pytest

from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.record import JobRecord, end_status, step_kind


def test_a_created_record_reads_typed(machine: JobMachine) -> None:
    assert machine.job("nobody") is None
    assert machine.create("job-r", '{"goal": "g"}', "mono", (0, "actor"), [], timeout=60, ttl_after=600)
    record = machine.job("job-r")
    assert record is not None
    assert (record.state, record.reasoner, record.round, record.kind) == ("running", "mono", 0, "actor")
    assert (record.epoch, record.retries, record.calls) == (0, 0, 0)
    assert record.deadline > record.updated_at > 0
    assert record.where == "step actor of round 0"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param({b"state": b"queued", b"reasoner": b"dual"}, ("queued", "dual", 0, None), id="queued"),
        pytest.param(
            {"state": "teleported", "reasoner": "quantum", "round": "x", "kind": "dance"},
            ("queued", "dual", 0, None),
            id="unknown-values",
        ),
        pytest.param(
            {"state": "waiting", "round": "3", "kind": "tools"}, ("waiting", "dual", 3, "tools"), id="str"
        ),
    ],
)
def test_a_raw_record_is_read_leniently(raw: dict[object, object], expected: tuple[object, ...]) -> None:
    record = JobRecord.parse(raw)
    assert record is not None
    assert (record.state, record.reasoner, record.round, record.kind) == expected
    assert JobRecord.parse({}) is None


def test_step_kinds_and_end_statuses_are_checked() -> None:
    assert step_kind("collect") == "collect"
    with pytest.raises(ValueError, match="'dance' is not a step kind: one of actor, collect"):
        step_kind("dance")
    assert end_status("truncated") == "truncated"
    assert end_status("") == "completed"
