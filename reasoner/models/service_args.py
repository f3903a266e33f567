"""The arguments of ``LiteLlmModelService``, checked when it is made: a developer's mistake is one
``ConfigurationError`` that names the argument, before any call is sent."""

from __future__ import annotations

from typing import Any

from tandem.reasoner.errors import ConfigurationError
from tandem.reasoner.host_auth import api_base_refusal, both_credentials
from tandem.reasoner.tool_choice import TOOL_CHOICES

__all__ = ["check_arguments"]


def check_arguments(
    model: Any, timeout: Any, tool_choice: Any, api_base: str | None, api_key: str | None
) -> None:
    """``ConfigurationError`` unless ``model`` is a model string, ``timeout`` a positive number of
    seconds, ``tool_choice`` one of ``TOOL_CHOICES``, and the host gets one credential: the user
    part of ``api_base`` or ``api_key``, not both (``tandem.reasoner.host_auth``)."""
    if not isinstance(model, str) or not model.strip():
        raise ConfigurationError(
            f"model must be a LiteLLM model string such as 'openai/gpt-4o', not {model!r}"
        )
    if timeout is None or timeout <= 0:
        raise ConfigurationError(f"timeout must be a positive number of seconds, not {timeout!r}")
    if tool_choice not in TOOL_CHOICES:
        choices = ", ".join(TOOL_CHOICES)
        raise ConfigurationError(f"tool_choice must be one of {choices}, not {tool_choice!r}")
    if both_credentials(api_base, api_key):
        raise ConfigurationError(api_base_refusal(api_base, api_key, "api_base", "api_key"))
