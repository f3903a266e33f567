"""Spec limits: size, goal/context size, metadata size and depth, secrets; each refusal names the
limit and its setting, and costs no recursion however deep the input."""

from __future__ import annotations

from typing import Any

import pytest

from tandem.broker_config.settings import Limits
from tandem.tasks.errors import JobSpecError, SpecLimitError
from tandem.tasks.spec import JobSpec, validate_spec

LIMITS = Limits(spec_bytes=20_000, goal_chars=1000, context_chars=2000, metadata_bytes=500, metadata_depth=4)


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        pytest.param({"goal": "g", "context": "x" * 30_000}, ["30", "TANDEM_MAX_SPEC_BYTES"], id="spec-size"),
        pytest.param({"goal": "g" * 1001}, ["'goal'", "1001", "TANDEM_MAX_GOAL_CHARS"], id="goal"),
        pytest.param(
            {"goal": "g", "context": "c" * 2001}, ["'context'", "TANDEM_MAX_CONTEXT_CHARS"], id="context"
        ),
        pytest.param(
            {"goal": "g", "metadata": {"x": "m" * 600}}, ["TANDEM_MAX_METADATA_BYTES"], id="meta-size"
        ),
        pytest.param({"goal": "g", "metadata": nested(5)}, ["TANDEM_MAX_METADATA_DEPTH"], id="meta-depth"),
        pytest.param(
            {"goal": "g", "metadata": nested(100_000)}, ["TANDEM_MAX_METADATA_DEPTH"], id="very-deep"
        ),
        pytest.param({"goal": [[[[[["g"]]]]]]}, ["TANDEM_MAX_METADATA_DEPTH"], id="deep-elsewhere"),
        pytest.param(
            {"goal": "g", "secrets": {f"s{i}": "v" for i in range(40)}}, ["TANDEM_MAX_SECRETS"], id="secrets"
        ),
    ],
)
def test_oversized_specs_are_refused_naming_the_limit(spec: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(SpecLimitError) as caught:
        validate_spec(spec, LIMITS)
    assert all(w in str(caught.value) for w in words), str(caught.value)
    assert caught.value.code == 413


def test_a_spec_just_under_every_limit_passes() -> None:
    spec = validate_spec({"goal": "g" * 1000, "metadata": nested(4)}, LIMITS)
    assert len(spec.goal) == 1000


def test_non_json_values_are_refused_not_raised() -> None:
    with pytest.raises(JobSpecError, match="not plain JSON"):
        validate_spec({"goal": "g", "metadata": {"x": float("nan")}})


def test_a_big_int_in_a_spec_is_refused_with_a_short_message() -> None:
    with pytest.raises(JobSpecError) as caught:
        validate_spec({"goal": "g", "max_rounds": 10**5000})
    assert len(str(caught.value)) < 400


def test_secret_values_never_appear_in_errors_or_reprs() -> None:
    with pytest.raises(JobSpecError) as caught:
        validate_spec({"goal": "g", "secrets": {"tok": 12345678}})
    assert "12345678" not in str(caught.value)
    spec = JobSpec(goal="g", secrets={"tok": "s3cr3t-value"})
    assert "s3cr3t" not in repr(spec) and "s3cr3t" not in str(spec)
    assert spec.public_dump()["secrets"] == {"tok": "***"}


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "semi;colon"])
def test_secret_names_are_checked(name: str) -> None:
    with pytest.raises(JobSpecError, match="secret name"):
        validate_spec({"goal": "g", "secrets": {name: "value"}})


def test_limits_are_read_from_the_environment() -> None:
    limits = Limits.from_env({"TANDEM_MAX_SPEC_BYTES": "2048", "TANDEM_MAX_TOOL_CALLS": "3"})
    assert (limits.spec_bytes, limits.tool_calls, limits.goal_chars) == (2048, 3, Limits().goal_chars)
