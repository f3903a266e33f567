"""``JobSpec`` and ``validate_spec``: invalid specs are refused with the field and the reason."""

from __future__ import annotations

from typing import Any

import pytest

from tandem.reasoner.messages import Usage
from tandem.tasks.errors import JobSpecError
from tandem.tasks.spec import FINAL_STATES, JobResult, JobSpec, JobStatus, validate_spec


def test_defaults() -> None:
    spec = validate_spec({"goal": "count the words"})
    assert spec == JobSpec(goal="count the words")
    assert spec.model_dump() == {
        "goal": "count the words",
        "context": "",
        "reasoner": "dual",
        "actions": [],
        "tools": None,
        "threshold": 0.5,
        "hops": 0,
        "max_rounds": 20,
        "metadata": {},
        "owner": "default",
        "secrets": {},
        "approve_tools": [],
        "approval_timeout_s": None,
        "ask_person": False,
        "answer_timeout_s": None,
        "max_tokens_total": None,
        "max_cost_usd": None,
        "priority": 5,
        "timeout_s": None,
        "webhooks": [],
        "thread_id": None,
        "trace_context": None,  # parent_id: left out when None (the release before refuses it)
    }


def test_every_field_is_read() -> None:
    raw: dict[str, Any] = {
        "goal": "g",
        "context": "c",
        "reasoner": "react",
        "actions": ["compute"],
        "tools": ["add"],
        "threshold": 0.7,
        "hops": 2,
        "max_rounds": 5,
        "metadata": {"tenant": "t1"},
        "owner": "team-a",
        "secrets": {"gh_token": "t0ken-value"},
        "approve_tools": ["send_email"],
        "approval_timeout_s": 600.0,
        "ask_person": True,
        "answer_timeout_s": 300.0,
        "max_tokens_total": 5000,
        "max_cost_usd": 0.25,
        "priority": 9,
        "timeout_s": 120.0,
        "webhooks": [{"url": "http://127.0.0.1:9000/h", "events": ["final"]}],
        "thread_id": "conversation-42",
        "parent_id": "parent-job",
        "trace_context": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    }
    assert validate_spec(raw).model_dump() == raw


def test_a_spec_round_trips_as_json() -> None:
    spec = JobSpec(goal="g", reasoner="mono", tools=[], metadata={"n": [1, 2]})
    assert JobSpec.model_validate_json(spec.model_dump_json()) == spec
    assert validate_spec(spec) is spec


@pytest.mark.parametrize(
    ("raw", "field", "reason"),
    [
        pytest.param({}, "goal", "Field required", id="goal-missing"),
        pytest.param({"goal": ""}, "goal", "at least 1 character", id="goal-empty"),
        pytest.param({"goal": "  \n"}, "goal", "the goal is blank", id="goal-blank"),
        pytest.param({"goal": 5}, "goal", "valid string", id="goal-type"),
        pytest.param(
            {"goal": "g", "reasoner": "triple"}, "reasoner", "'dual', 'mono' or 'react'", id="reasoner"
        ),
        pytest.param(
            {"goal": "g", "max_rounds": 0}, "max_rounds", "greater than or equal to 1", id="rounds-low"
        ),
        pytest.param(
            {"goal": "g", "max_rounds": 501}, "max_rounds", "less than or equal to 500", id="rounds-high"
        ),
        pytest.param({"goal": "g", "max_rounds": "many"}, "max_rounds", "valid integer", id="rounds-type"),
        pytest.param({"goal": "g", "threshold": 1.5}, "threshold", "less than or equal to 1", id="threshold"),
        pytest.param({"goal": "g", "hops": -1}, "hops", "greater than or equal to 0", id="hops"),
        pytest.param(
            {"goal": "g", "answer_timeout_s": 0}, "answer_timeout_s", "greater than 0", id="answer-timeout"
        ),
        pytest.param({"goal": "g", "actions": "compute"}, "actions", "valid list", id="actions-type"),
        pytest.param({"goal": "g", "tools": [1]}, "tools.0", "valid string", id="tools-item"),
        pytest.param({"goal": "g", "metadata": []}, "metadata", "valid dictionary", id="metadata-type"),
        pytest.param({"goal": "g", "max_round": 3}, "max_round", "unknown field", id="unknown-field"),
        pytest.param(
            {"goal": "g", "approve_tools": "some"},
            "approve_tools",
            "must be 'all' or a list of tool names",
            id="approve-tools-word",
        ),
        pytest.param(
            {"goal": "g", "approve_tools": ["a", ""]},
            "approve_tools",
            "each entry must be",
            id="approve-tools-item",
        ),
        pytest.param(
            {"goal": "g", "approval_timeout_s": 0},
            "approval_timeout_s",
            "greater than 0",
            id="approval-timeout",
        ),
    ],
)
def test_an_invalid_spec_names_the_field_and_the_reason(raw: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(JobSpecError) as caught:
        validate_spec(raw)
    message = str(caught.value)
    assert message.startswith("invalid job spec: ")
    assert f"field {field!r}: " in message
    assert reason in message


def test_approve_tools_takes_all_or_names() -> None:
    assert validate_spec({"goal": "g", "approve_tools": "all"}).approve_tools == "all"
    named = validate_spec({"goal": "g", "approve_tools": ["a", "b", "a"], "approval_timeout_s": 5})
    assert named.approve_tools == ["a", "b"] and named.approval_timeout_s == 5.0


def test_every_problem_is_listed_with_what_came() -> None:
    with pytest.raises(JobSpecError) as caught:
        validate_spec({"goal": "g", "hops": 99, "colour": "red"})
    message = str(caught.value)
    assert "field 'hops'" in message and "(got 99)" in message
    assert "field 'colour': unknown field (got 'red')" in message


def test_a_huge_value_is_quoted_briefly() -> None:
    with pytest.raises(JobSpecError) as caught:
        validate_spec({"goal": "g", "bogus": "x" * 10_000})
    assert len(str(caught.value)) < 400


@pytest.mark.parametrize("raw", [None, "goal", ["goal"], 42])
def test_a_spec_that_is_not_an_object_is_refused(raw: Any) -> None:
    with pytest.raises(JobSpecError, match="must be a JSON object"):
        validate_spec(raw)


def test_status_and_result_models() -> None:
    status = JobStatus(job_id="j")
    assert (status.state, status.round, status.error) == ("queued", 0, None)
    result = JobResult(job_id="j", status="completed", deliverable="d", usage=Usage(calls=2))
    assert JobResult.model_validate(result.model_dump(mode="json")) == result
    assert {"completed", "truncated", "failed", "cancelled"} == FINAL_STATES
    with pytest.raises(ValueError):
        JobResult(job_id="j", status="running")  # type: ignore[arg-type]
