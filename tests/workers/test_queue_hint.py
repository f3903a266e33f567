"""``QueueHint``: one line per queue nobody consumes, only for a job whose step does not move."""

from __future__ import annotations

import io
import time

import pytest

from tandem.workers.queue_hint import QueueHint, hint, waiting_queue


@pytest.mark.parametrize(
    ("state", "step", "queue"),
    [
        pytest.param("queued", "", "intake", id="queued"),
        pytest.param("running", "thinker", "thinker", id="thinker"),
        pytest.param("running", "actor", "actor", id="actor"),
        pytest.param("running", "finalize", "actor", id="finalize"),
        pytest.param("running", "tools", "tools", id="tools"),
        pytest.param("running", "collect", "tools", id="collect"),
        pytest.param("waiting", "actor", None, id="backing-off"),
        pytest.param("awaiting_approval", "tools", None, id="parked"),
        pytest.param("completed", "actor", None, id="ended"),
    ],
)
def test_the_queue_a_job_waits_on(state: str, step: str, queue: str | None) -> None:
    assert waiting_queue(state, step, "intake") == queue


def watch(statuses: list[tuple[str, str, int, int]], consumed: set[str], seconds: float) -> tuple[str, int]:
    """Run a hint over ``statuses`` (one per read, the last repeated) for ``seconds``: what it
    printed and how many times it asked the workers."""
    reads = iter(statuses)
    last = statuses[-1]
    asked = []

    def consumers() -> set[str]:
        asked.append(1)
        return consumed

    out = io.StringIO()
    with QueueHint("J1", "celery", lambda: next(reads, last), consumers, grace=0.2, poll=0.02, out=out):
        time.sleep(seconds)
    return out.getvalue(), len(asked)


def test_a_stalled_job_on_a_queue_nobody_consumes_is_hinted_once() -> None:
    printed, asked = watch([("running", "thinker", 0, 1)], {"celery", "actor"}, 1.0)
    assert printed == hint("thinker", "celery", "J1") + "\n"
    assert printed.startswith("tandem: no worker consumes queue 'thinker' yet (job J1 waits there): ")
    assert asked == 1  # once hinted, never asked again for that queue


def test_no_hint_while_a_worker_consumes_the_queue_or_the_job_moves() -> None:
    printed, asked = watch([("running", "actor", 0, 1)], {"celery", "actor"}, 0.7)
    assert printed == "" and 1 <= asked <= 4  # asked again at most once per grace period
    moving = [("running", "actor", r, 1) for r in range(40)]
    printed, asked = watch(moving, set(), 0.6)
    assert (printed, asked) == ("", 0)


def test_the_intake_queue_hint_says_any_worker_will_do() -> None:
    printed, _ = watch([("queued", "", 0, 0)], set(), 0.8)
    assert "no worker consumes queue 'celery' yet" in printed and "`tandem worker all`" in printed


def test_errors_while_watching_only_skip_a_look() -> None:
    def broken() -> tuple[str, str, int, int]:
        raise ConnectionError("Redis away")

    out = io.StringIO()
    with QueueHint("J1", "celery", broken, set, grace=0.1, poll=0.02, out=out):
        time.sleep(0.3)
    assert out.getvalue() == ""
