"""Sealed ``JobSpec.secrets``: encrypted before they are stored, unsealed only for the tools."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from tandem.tasks.errors import JobSpecError
from tandem.tasks.sealing import SecretBox, is_sealed
from tandem.tasks.spec import JobSpec
from tandem.toolkit.redaction import redact

KEY = Fernet.generate_key().decode()


def test_seal_then_unseal_round_trips_and_registers_nothing_process_wide() -> None:
    box = SecretBox(KEY)
    sealed = box.seal_spec(JobSpec(goal="g", secrets={"db": "sealing-test-pw-1"}))
    assert is_sealed(sealed.secrets["db"]) and "sealing-test-pw-1" not in sealed.model_dump_json()
    assert box.seal_spec(sealed) == sealed  # sealing twice changes nothing
    assert box.unseal(sealed) == {"db": "sealing-test-pw-1"}
    # A job's secrets mask only its own records (its SecretScope), never every text of the process.
    assert redact("error: sealing-test-pw-1") == "error: sealing-test-pw-1"


def test_without_a_key_secrets_are_refused_not_stored_in_clear() -> None:
    with pytest.raises(JobSpecError, match="TANDEM_SECRETS_KEY"):
        SecretBox(None).seal_spec(JobSpec(goal="g", secrets={"db": "x"}))
    assert SecretBox(None).seal_spec(JobSpec(goal="g")) == JobSpec(goal="g")


def test_another_key_cannot_unseal() -> None:
    sealed = SecretBox(KEY).seal_spec(JobSpec(goal="g", secrets={"db": "value-1"}))
    with pytest.raises(JobSpecError, match="cannot be unsealed"):
        SecretBox(Fernet.generate_key().decode()).unseal(sealed)


def test_a_secret_unseals_only_in_a_job_of_the_tenant_it_was_sealed_for() -> None:
    box = SecretBox(KEY)
    mine = box.seal_spec(JobSpec(goal="g", owner="team-a", secrets={"db": "tenant-a-pw-1"}))
    assert box.unseal(mine) == {"db": "tenant-a-pw-1"}
    # The sealed value copied into another tenant's spec (sealing leaves a sealed value as it is).
    stolen = box.seal_spec(JobSpec(goal="g", owner="team-b", secrets=dict(mine.secrets)))
    with pytest.raises(JobSpecError, match="sealed for another tenant than this job's owner 'team-b'"):
        box.unseal(stolen)


def test_a_value_sealed_before_owners_unseals_for_the_default_tenant_only() -> None:
    fernet = Fernet(KEY.encode())
    old = "sealed:v1:" + fernet.encrypt(b"old-pw-1").decode()
    assert SecretBox(KEY).unseal(JobSpec(goal="g", secrets={"db": old})) == {"db": "old-pw-1"}
    with pytest.raises(JobSpecError, match="another tenant"):
        SecretBox(KEY).unseal(JobSpec(goal="g", owner="team-a", secrets={"db": old}))
