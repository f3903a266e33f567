"""``QueueHint``: one line per queue nobody consumes, only for a job whose step does not move."""

from __future__ import annotations

import io
import time

import pytest
from kombu.exceptions import OperationalError
from redis.exceptions import NoPermissionError

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


def test_a_job_in_an_intake_lane_no_worker_reads_is_hinted_with_the_lanes_setting() -> None:
    assert hint("celery.lane5", "celery.lane5", "J1") == (
        "tandem: no worker consumes queue 'celery.lane5' yet (job J1 waits there): start a worker: "
        "`tandem worker all` (or any `tandem worker ROLE` without --no-intake), with the same "
        "TANDEM_INTAKE_LANES as this client"
    )
    assert "TANDEM_INTAKE_LANES" not in hint("celery", "celery", "J1")


def test_the_cli_watches_the_lane_of_the_jobs_tenant() -> None:
    from types import SimpleNamespace

    from tandem.broker_config import Settings
    from tandem.workers.job_commands import intake_of

    lanes = Settings.from_env({"TANDEM_INTAKE_LANES": "8"})
    record = SimpleNamespace(owner="tenant-b")
    store = SimpleNamespace(status=lambda job_id: record)
    mine = SimpleNamespace(owner="tenant-a", id="J1", _store=store)
    found = SimpleNamespace(owner=None, id="J2", _store=store)  # ``tandem watch``: the record says
    assert (intake_of(mine, lanes), intake_of(found, lanes)) == ("celery.lane1", "celery.lane2")
    assert intake_of(found, Settings.from_env({})) == "celery"


def test_errors_while_watching_only_skip_a_look() -> None:
    def broken() -> tuple[str, str, int, int]:
        raise ConnectionError("Redis away")

    out = io.StringIO()
    with QueueHint("J1", "celery", broken, set, grace=0.1, poll=0.02, out=out):
        time.sleep(0.3)
    assert out.getvalue() == ""


def test_a_user_that_may_not_broadcast_is_asked_once_and_the_hint_stops() -> None:
    asked: list[int] = []

    def refused() -> set[str]:  # the client user of docs/security.md: kombu re-raises its NOPERM
        asked.append(1)
        try:
            raise NoPermissionError("this user has no permissions to run the 'publish' command")
        except NoPermissionError as exc:
            raise OperationalError(str(exc)) from exc

    out = io.StringIO()
    watcher = QueueHint(
        "J1", "celery", lambda: ("running", "thinker", 0, 1), refused, grace=0.05, poll=0.01, out=out
    )
    with watcher:
        assert watcher._thread is not None
        watcher._thread.join(60)  # it ends by itself after the refusal
        assert not watcher._thread.is_alive()
    assert asked == [1] and out.getvalue() == ""
