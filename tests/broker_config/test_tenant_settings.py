"""``TANDEM_TENANTS`` and ``TANDEM_MAX_RUNNING_JOBS``: read, and refused with the tenant, field and value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tandem.broker_config.errors import SettingsError
from tandem.broker_config.tenant_settings import TenantPolicy, TenantSettings


def test_unset_is_off() -> None:
    tenants = TenantSettings.from_env({})
    assert not tenants.enabled and not tenants.admission and not tenants.quotas


def test_json_with_a_default() -> None:
    raw = {"default": {"max_running_jobs": 5}, "acme": {"weight": 3, "max_tokens": 1000, "max_cost_usd": 2}}
    tenants = TenantSettings.from_env({"TANDEM_TENANTS": json.dumps(raw), "TANDEM_MAX_RUNNING_JOBS": "40"})
    assert tenants.policy("acme") == TenantPolicy(None, 3.0, 1000, 2.0)
    assert tenants.policy("other") == TenantPolicy(max_running_jobs=5)
    assert tenants.max_running_jobs == 40 and tenants.admission and tenants.quotas
    assert tenants.shares() == {"d": [5, 1.0], "t": {"acme": [0, 3.0]}}


def test_a_file(tmp_path: Path) -> None:
    path = tmp_path / "tenants.yaml"
    path.write_text("acme:\n  max_running_jobs: 2\n  weight: 2\n")
    assert TenantSettings.from_env({"TANDEM_TENANTS": str(path)}).policy("acme").max_running_jobs == 2
    path = tmp_path / "tenants.json"
    path.write_text('{"acme": {"weight": 0.5}}')
    assert TenantSettings.from_env({"TANDEM_TENANTS": str(path)}).policy("acme").weight == 0.5


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        pytest.param('{"acme": {"weight": -1}}', ["'acme'", "'weight'", "-1"], id="negative-weight"),
        pytest.param('{"acme": {"weight": 0}}', ["'acme'", "'weight'", "= 0"], id="zero-weight"),
        pytest.param('{"b": {"max_running_jobs": 0}}', ["'b'", "'max_running_jobs'", "= 0"], id="zero-cap"),
        pytest.param('{"b": {"max_running_jobs": 2.5}}', ["'b'", "'max_running_jobs'", "2.5"], id="fraction"),
        pytest.param('{"b": {"max_tokens": "many"}}', ["'b'", "'max_tokens'", "'many'"], id="text"),
        pytest.param('{"b": {"max_cost_usd": -3}}', ["'b'", "'max_cost_usd'", "-3"], id="negative-cost"),
        pytest.param('{"b": {"weigth": 2}}', ["'b'", "'weigth'", "unknown field"], id="typo"),
        pytest.param('{"b": 3}', ["'b'", "3"], id="not-an-object"),
        pytest.param('{"a b": {}}', ["'a b'", "tenant id"], id="bad-tenant-id"),
        pytest.param("[1]", ["object of tenants"], id="a-list"),
        pytest.param("{nope", ["not valid JSON"], id="bad-json"),
        pytest.param("/no/such/file.json", ["/no/such/file.json", "readable file"], id="no-file"),
    ],
)
def test_refusals_name_the_tenant_the_field_and_the_value(raw: str, words: list[str]) -> None:
    with pytest.raises(SettingsError) as refused:
        TenantSettings.from_env({"TANDEM_TENANTS": raw})
    for word in words:
        assert word in str(refused.value)


@pytest.mark.parametrize("raw", ["0", "-2", "lots"])
def test_a_bad_fleet_cap_is_refused(raw: str) -> None:
    with pytest.raises(SettingsError, match="TANDEM_MAX_RUNNING_JOBS"):
        TenantSettings.from_env({"TANDEM_MAX_RUNNING_JOBS": raw})
