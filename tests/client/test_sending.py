"""``tandem.client.sending``: a request no worker answered is withdrawn (or refused as a time-out);
one Redis refused to send (``NOPERM``, which kombu re-raises as an outage) is raised as the refusal,
never taken for an absent worker."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kombu.exceptions import OperationalError
from redis.exceptions import NoPermissionError

from tandem.client.sending import ask, ask_or_withdraw

DENIED = "Command # 1 (LPUSH celery ...) of pipeline caused error: this user has no permissions"


class App:
    """Celery's ``send_task`` failing as kombu fails it: ``OperationalError``, from ``cause``."""

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause

    def send_task(self, name: str, **options: Any) -> Any:
        try:
            raise self.cause
        except Exception as exc:
            raise OperationalError(str(exc)) from exc


def test_a_refused_send_is_raised_not_withdrawn() -> None:
    withdrawn: list[str] = []
    with pytest.raises(NoPermissionError, match="LPUSH celery"):
        ask_or_withdraw(App(NoPermissionError(DENIED)), "tandem.decide", {}, 1.0, withdrawn.append, {})  # type: ignore[arg-type]
    assert withdrawn == []
    with pytest.raises(NoPermissionError):
        ask(App(NoPermissionError(DENIED)), "tandem.fork", {"job_id": "j"}, 1.0, "the fork")  # type: ignore[arg-type]


def test_a_broker_that_does_not_answer_still_withdraws() -> None:
    kept = {"accepted": False, "reason": "withdrawn"}

    def withdraw(answer: str) -> str:
        return answer

    down = App(ConnectionError("Error 111 connecting"))
    assert ask_or_withdraw(down, "tandem.decide", {}, 1.0, withdraw, kept) == kept  # type: ignore[arg-type]
    said = ask(down, "tandem.fork", {"job_id": "j"}, 1.0, "the fork")  # type: ignore[arg-type]
    assert said["reason"] == "timeout" and json.dumps(said)
