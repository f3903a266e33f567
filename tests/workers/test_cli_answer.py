"""``tandem answer JOB ANSWER`` on a job parked on a question (fakeredis; the answer applied at
once, as a worker's ``tandem.answer`` would): JSON or text, the current pause or ``--pause``,
refusals in one line with exit 2."""

from __future__ import annotations

from typing import Any

import pytest

from tandem.workers import cli
from tests.tasks.test_questions import ask, start_round
from tests.workers.test_cli import fake_runtime  # noqa: F401 - the fixture

PAUSE = "J1:2:tools:1"


@pytest.fixture
def asking(fake_runtime: Any, monkeypatch: pytest.MonkeyPatch) -> Any:  # noqa: F811
    from tandem.client.handle import JobHandle
    from tandem.tasks.control.answer import answer_job
    from tandem.tasks.control.questions import QuestionStore

    start_round(fake_runtime.store, "J1")
    assert ask(fake_runtime.store, job_id="J1", timeout_s=600) == "parked"

    def reply(self: JobHandle, answer: Any, *, timeout: float = 30.0, owner: Any = None, **named: Any) -> Any:
        pause = named["pause_id"] or self.pending_question().pause_id  # type: ignore[union-attr]
        return answer_job(QuestionStore(self._store), self.id, answer, pause, named["idempotency_key"])

    monkeypatch.setattr(JobHandle, "answer_reply", reply)
    return fake_runtime


def test_an_answer_as_json(asking: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["answer", "J1", '{"city": "Oslo"}']) == 0
    assert f'job J1, pause {PAUSE}: answered {{"city": "Oslo"}}; the job goes on' in capsys.readouterr().out
    assert asking.machine.record("J1")["state"] == "running"
    assert asking.preflights == [True]  # it needs Redis and the broker


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        pytest.param(["Oslo"], "field '(the answer)': 'Oslo' is not of type 'object'", id="text-not-object"),
        pytest.param(["--text", '{"city": "Oslo"}'], "is not of type 'object'", id="forced-text"),
        pytest.param(['{"city": 7}'], "field 'city': 7 is not of type 'string'", id="wrong-type"),
        pytest.param(['{"city": "Oslo"}', "--pause", "J1:0:tools:0"], "stale pause: ", id="stale"),
    ],
)
def test_refused_answers_say_why_and_change_nothing(
    asking: Any, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    assert cli.main(["answer", "J1", *argv]) == 2
    assert said in capsys.readouterr().err
    assert asking.machine.record("J1")["state"] == "awaiting_approval"
