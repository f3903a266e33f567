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
