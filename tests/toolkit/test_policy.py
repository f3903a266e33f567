"""``ToolPolicy``: the worker decides which tools a job may use; a job's ``tools`` only narrows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tandem.toolkit.loader import load_toolkit
from tandem.toolkit.policy import ToolPolicy, ToolPolicyError

KNOWN = ["add", "search", "shell", "web.fetch", "web.post", "drop_table"]
POLICY = ToolPolicy(allow=("add", "search", "web.*"), grant=("shell", "web.post"), deny=("drop_table",))


def test_the_default_policy_permits_every_tool() -> None:
    assert ToolPolicy().for_job(KNOWN, None) == KNOWN


def test_a_job_without_tools_gets_the_allow_list_minus_grants_and_denials() -> None:
    assert POLICY.for_job(KNOWN, None) == ["add", "search", "web.fetch"]


def test_a_job_gets_a_granted_tool_only_by_naming_it() -> None:
    assert POLICY.for_job(KNOWN, ["shell", "add"]) == ["shell", "add"]


@pytest.mark.parametrize(
    ("requested", "words"),
    [
        pytest.param(["drop_table"], ["'drop_table'", "not permitted"], id="denied"),
        pytest.param(["nope"], ["unknown tools ['nope']"], id="unknown"),
        pytest.param(["add", "rm"], ["unknown tools ['rm']"], id="one-unknown"),
    ],
)
def test_a_job_cannot_widen_the_policy(requested: list[str], words: list[str]) -> None:
    with pytest.raises(ToolPolicyError) as caught:
        POLICY.for_job(KNOWN, requested)
    message = str(caught.value)
    assert all(w in message for w in words)
    assert "the tools a job may name: add, search, shell, web.fetch, web.post" in message


def test_a_denied_tool_is_never_permitted_even_if_allowed() -> None:
    policy = ToolPolicy(allow=("*",), deny=("shell",))
    assert "shell" not in policy.for_job(KNOWN, None)
    with pytest.raises(ToolPolicyError):
        policy.for_job(KNOWN, ["shell"])


def test_policy_from_json_yaml_and_a_file(tmp_path: Path) -> None:
    as_json = json.dumps({"allow": ["add"], "grant": ["shell"]})
    assert ToolPolicy.from_text(as_json) == ToolPolicy(allow=("add",), grant=("shell",))
    assert ToolPolicy.from_text("allow: [add]\ndeny: [shell]\n") == ToolPolicy(
        allow=("add",), deny=("shell",)
    )
    path = tmp_path / "policy.yaml"
    path.write_text("policy:\n  allow: [search]\n")
    assert ToolPolicy.from_text(str(path)) == ToolPolicy(allow=("search",))


@pytest.mark.parametrize(
    "text",
    ['{"allow": "x", "bogus": 1}', '{"grant": [1]}', "[1, 2]", '{"deny": [""]}'],
)
def test_a_malformed_policy_names_the_problem(text: str) -> None:
    with pytest.raises(ToolPolicyError, match="TANDEM_TOOL_POLICY"):
        ToolPolicy.from_text(text)


def test_the_toolkit_yaml_policy_section(tmp_path: Path) -> None:
    path = tmp_path / "toolkit.yaml"
    path.write_text(
        "tools:\n  - function: tests.toolkit.test_policy:add\n"
        "actions:\n  - {name: compute, tools: [add]}\n"
        "policy:\n  allow: []\n  grant: [add]\n"
    )
    toolkit = load_toolkit(path)
    assert toolkit.policy == ToolPolicy(allow=(), grant=("add",))


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


# -- grants by tenant ---------------------------------------------------------------------------

TENANTS = ToolPolicy.from_mapping({"allow": ["*"], "grant": {"team-a": ["shell"], "*": ["web.post"]}})


def test_a_grant_only_tool_goes_only_to_the_tenants_the_operator_grants_it_to() -> None:
    assert TENANTS.for_job(KNOWN, ["shell", "add"], "team-a") == ["shell", "add"]
    for owner in ("team-b", "default"):
        with pytest.raises(ToolPolicyError, match=f"\\['shell'\\] are not permitted .* to tenant '{owner}'"):
            TENANTS.for_job(KNOWN, ["shell"], owner)
    # "*" grants to every tenant; a grant-only tool is never a default tool, even with allow ["*"].
    assert all(TENANTS.for_job(KNOWN, ["web.post"], owner) for owner in ("team-a", "team-b", "default"))
    assert TENANTS.for_job(KNOWN, None, "team-a") == ["add", "search", "web.fetch", "drop_table"]


def test_the_old_list_form_grants_to_the_default_tenant_only() -> None:
    assert POLICY.for_job(KNOWN, ["shell"]) == ["shell"]  # a deployment without tenants: as before
    with pytest.raises(ToolPolicyError, match="to tenant 'team-a'"):
        POLICY.for_job(KNOWN, ["shell"], "team-a")  # a job cannot grant itself a tool by naming it


@pytest.mark.parametrize(
    "grant",
    [{"a b": ["shell"]}, {"team-a": ""}, {"team-a": [1]}],
    ids=["bad-tenant", "blank", "not-names"],
)
def test_a_malformed_tenant_grant_is_refused(grant: object) -> None:
    with pytest.raises(ToolPolicyError, match="policy: "):
        ToolPolicy.from_mapping({"grant": grant})
