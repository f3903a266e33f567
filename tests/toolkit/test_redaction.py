"""``tandem.toolkit.redaction``: known secrets and credential-shaped text become ``***``."""

from __future__ import annotations

import logging

import pytest

from tandem.toolkit.redaction import (
    MASK,
    RedactingFilter,
    SecretRegistry,
    redact,
    redact_data,
    redact_known,
    register_secret,
    register_url,
)


@pytest.mark.parametrize(
    ("text", "hidden", "kept"),
    [
        pytest.param("redis://:hunter2pw@redis:6379/0", "hunter2pw", "@redis:6379/0", id="redis-password"),
        pytest.param("https://user:pa55word@gpu-1/v1", "pa55word", "gpu-1/v1", id="http-userinfo"),
        pytest.param("https://gpu/v1?api_key=abcd1234&x=1", "abcd1234", "x=1", id="query-api-key"),
        pytest.param("GET /mcp?token=zzzz9999 HTTP", "zzzz9999", "GET /mcp?token=", id="query-token"),
        pytest.param(
            "Authorization: Bearer sk-live-0123456789", "sk-live-0123456789", "Authorization", id="bearer"
        ),
        pytest.param('{"api_key": "sk-abcdef"}', "sk-abcdef", '"api_key"', id="json-pair"),
        pytest.param("OPENAI_API_KEY=sk-xyz123 python", "sk-xyz123", "python", id="env-pair"),
        pytest.param("X-Auth-Token: t0k3n-value", "t0k3n-value", "X-Auth-Token", id="header-pair"),
    ],
)
def test_credential_shapes_are_masked(text: str, hidden: str, kept: str) -> None:
    out = redact(text)
    assert hidden not in out and MASK in out and kept in out


@pytest.mark.parametrize(
    "text",
    [
        "the reply was cut at TANDEM_ACTOR_MAX_TOKENS=4096",
        "prompt_tokens=120 completion_tokens=80",
        "Valid tool names: add, search_docs.",
        "https://gpu-1:8000/v1/chat/completions",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_registered_secrets_are_masked_anywhere_longest_first() -> None:
    register_secret("plain-secret-value", "plain-secret")
    assert redact("x plain-secret-value y plain-secret z") == f"x {MASK} y {MASK} z"
    assert redact_known("password = input()") == "password = input()"  # shape rules off for content


def test_short_or_non_string_values_are_not_registered() -> None:
    registry = SecretRegistry()
    for value in ("", "ab", None, 12345):
        registry.add(value)
    assert registry.values() == ()


def test_the_registry_is_bounded_and_never_drops_what_it_holds() -> None:
    registry = SecretRegistry(capacity=3)
    for i in range(5):
        registry.add(f"secret-{i}")
    assert set(registry.values()) == {"secret-0", "secret-1", "secret-2"}


def test_register_url_registers_the_password_not_the_user() -> None:
    register_url("redis://default:Url-Pass-77@h:6379/0")
    assert redact("auth failed for Url-Pass-77") == f"auth failed for {MASK}"
    assert "default" in redact("user default")


def test_redact_data_walks_json_and_masks_secret_named_keys() -> None:
    data = {"headers": {"Authorization": "Basic dXNlcjpwYXNz", "X-Api-Key": "k-1234"}, "n": 3, "l": ["a"]}
    out = redact_data(data, extra=["k-1234"])
    assert out["headers"]["X-Api-Key"] == MASK and MASK in out["headers"]["Authorization"]
    assert out["n"] == 3 and out["l"] == ["a"]


def test_redact_never_raises() -> None:
    class Broken:
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert redact(Broken()) == MASK


def test_the_log_filter_masks_messages_arguments_and_tracebacks() -> None:
    register_secret("log-secret-123")
    record = logging.LogRecord("t", logging.ERROR, __file__, 1, "key %s", ("log-secret-123",), None)
    try:
        raise ValueError("boom log-secret-123")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    assert RedactingFilter().filter(record)
    assert record.getMessage() == f"key {MASK}"
    assert (
        record.exc_text is not None and "log-secret-123" not in record.exc_text and "boom" in record.exc_text
    )
