"""Tenants bound to signing certificates: the settings, the serializer that names the signer, and
the binding of a message's owner (``tandem.tasks.signers``; the real-worker test is
``tests/integration/test_signed_tenants.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tandem.broker_config.errors import SettingsError
from tandem.broker_config.signing import certificate_id, read_signing
from tandem.tasks.signers import SIGNER, ForeignTenant, SignerSerializer, bind_tenant
from tests.integration.test_security import _certificate


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    store = tmp_path_factory.mktemp("trusted")
    return {name: _certificate(store, name) for name in ("tandem", "team-a")}


def _env(certs: dict[str, tuple[Path, Path]], **extra: str) -> dict[str, str]:
    key, cert = certs["tandem"]
    return {
        "TANDEM_SIGNING_KEY": str(key),
        "TANDEM_SIGNING_CERT": str(cert),
        "TANDEM_SIGNING_CERT_STORE": str(cert.parent / "*.pem"),
        **extra,
    }


def test_tenants_map_certificate_ids_to_tenants(certs: dict[str, tuple[Path, Path]]) -> None:
    team_cert = str(certs["team-a"][1])
    signing = read_signing(_env(certs, TANDEM_SIGNING_TENANTS=json.dumps({"team-a": [team_cert]})), 600)
    assert signing is not None
    assert dict(signing.tenants) == {certificate_id(team_cert): "team-a"}
    assert certificate_id(team_cert) != certificate_id(str(certs["tandem"][1]))


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("{not json", "is not valid JSON"),
        ("[]", "is not a JSON object"),
        ('{"team a": "x.pem"}', "'team a' is not a tenant id"),
        ('{"team-a": "/nonexistent.pem"}', "'/nonexistent.pem' is not a readable certificate file"),
        ('{"team-a": 3}', "3 is not a readable certificate file"),
    ],
)
def test_bad_tenant_settings_say_what_to_fix(
    certs: dict[str, tuple[Path, Path]], raw: str, says: str
) -> None:
    with pytest.raises(SettingsError, match="TANDEM_SIGNING_TENANTS") as caught:
        read_signing(_env(certs, TANDEM_SIGNING_TENANTS=raw), 600)
    assert says in str(caught.value)


def test_one_certificate_acts_for_one_tenant(certs: dict[str, tuple[Path, Path]]) -> None:
    cert = str(certs["team-a"][1])
    with pytest.raises(SettingsError, match="given to both 'a' and 'b'"):
        read_signing(_env(certs, TANDEM_SIGNING_TENANTS=json.dumps({"a": cert, "b": cert})), 600)


def test_tenants_without_signing_are_refused() -> None:
    with pytest.raises(SettingsError, match="message signing is off"):
        read_signing({"TANDEM_SIGNING_TENANTS": '{"a": "x.pem"}'}, 600)


def _serializer(key: Path, cert: Path) -> SignerSerializer:
    from celery.security.certificate import Certificate, FSCertStore
    from celery.security.key import PrivateKey

    store = FSCertStore(str(cert.parent / "*.pem"))
    return SignerSerializer(PrivateKey(key.read_bytes()), Certificate(cert.read_bytes()), store, "sha256")


def test_the_serializer_names_the_certificate_that_signed(certs: dict[str, tuple[Path, Path]]) -> None:
    team = _serializer(*certs["team-a"])
    worker = _serializer(*certs["tandem"])
    body = [[], {"job_id": "j"}, {SIGNER: "forged by the sender"}]
    decoded = worker.deserialize(team.serialize(body))
    assert decoded[1] == {"job_id": "j"}
    assert decoded[2][SIGNER] == certificate_id(str(certs["team-a"][1]))  # verified, not the sender's


def _decide(job_id: str, decisions: Any = None, owner: str | None = None) -> None: ...


def _step(job_id: str, round_no: int) -> None: ...


def test_a_control_task_is_bound_to_the_signers_tenant() -> None:
    assert bind_tenant("tandem.decide", _decide, {"job_id": "j"}, {"job_id": "j"}, "team-a") == {
        "job_id": "j",
        "owner": "team-a",
    }
    same = {"job_id": "j", "owner": "team-a"}
    assert bind_tenant("tandem.decide", _decide, same, same, "team-a") == same
    other = {"job_id": "j", "owner": "team-b"}
    with pytest.raises(ForeignTenant, match="asks as owner 'team-b'"):
        bind_tenant("tandem.decide", _decide, other, other, "team-a")


def test_an_intake_gets_the_signers_tenant_and_no_other() -> None:
    spec: dict[str, Any] = {"goal": "g"}
    bound = bind_tenant("tandem.infer", _step, {"spec": spec}, {"spec": spec}, "team-a")
    assert bound == {"spec": {"goal": "g", "owner": "team-a"}} and spec == {"goal": "g"}
    theirs = {"spec": {"goal": "g", "owner": "team-b"}}
    with pytest.raises(ForeignTenant, match="spec names owner 'team-b'"):
        bind_tenant("tandem.infer", _step, theirs, theirs, "team-a")


def test_a_tenant_sends_no_internal_step() -> None:
    args = {"job_id": "j", "round_no": 0}
    with pytest.raises(ForeignTenant, match="internal steps come from workers"):
        bind_tenant("tandem.collect_tools", _step, args, args, "team-a")
