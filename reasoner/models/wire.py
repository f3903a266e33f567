"""What tandem sends a model host: the chat messages and tool settings of a request, in the shape
the most hosts accept.

* **An assistant turn carries text content, never ``null``.** A turn that only calls tools goes
  out as ``{"role": "assistant", "content": "", "tool_calls": [...]}``. OpenAI, vLLM, SGLang and
  llama.cpp take ``""``; llama-cpp-python's server refuses ``null`` by its request schema (HTTP 500
  with a validation error), and LiteLLM drops a ``null`` content from the message, which that
  server's tool-calling template then fails on (HTTP 500, ``'dict object' has no attribute
  'content'``). No host is known to need ``null``, so there is no setting for it.
* **``tool_choice`` goes with the tools.** Whenever a request offers tools it names the role's
  ``tool_choice`` (``TANDEM_<ROLE>_TOOL_CHOICE``, ``"auto"`` by default): OpenAI and vLLM read a
  missing one as ``"auto"``, but llama-cpp-python (``--chat_format chatml-function-calling``)
  offers no tool call at all without one. ``"omit"`` sends none (a host that refuses the field).

Both hold on the direct HTTP path and through LiteLLM: ``LiteLlmModelService`` builds every
request with ``chat_messages`` and ``tool_fields``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tandem.reasoner.tool_choice import DEFAULT_TOOL_CHOICE, TOOL_CHOICES

__all__ = ["DEFAULT_TOOL_CHOICE", "TOOL_CHOICES", "chat_messages", "merged_extra_body", "tool_fields"]


def chat_messages(sys_prompt: str, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's messages: the system prompt (when not empty), then ``messages`` as they are,
    except an assistant turn whose ``content`` is ``None`` or missing, which gets ``""`` (a copy:
    the caller's message is not changed)."""
    chat: list[dict[str, Any]] = [{"role": "system", "content": sys_prompt}] if sys_prompt else []
    for message in messages:
        if message.get("role") == "assistant" and message.get("content") is None:
            message = {**message, "content": ""}
        chat.append(message)
    return chat


def tool_fields(tools: list[dict[str, Any]] | None, tool_choice: str) -> dict[str, Any]:
    """The request fields that offer ``tools`` (OpenAI tool schemas): ``tools`` and, unless
    ``tool_choice`` is ``"omit"``, ``tool_choice``; nothing when no tools are offered."""
    if not tools:
        return {}
    if tool_choice == "omit":
        return {"tools": tools}
    return {"tools": tools, "tool_choice": tool_choice}


def merged_extra_body(extra_body: Mapping[str, Any] | None, thinking: bool | None) -> dict[str, Any]:
    """The fields merged into every request body: ``thinking`` as ``chat_template_kwargs``
    (``enable_thinking`` and ``thinking``), then ``extra_body`` (its ``chat_template_kwargs`` win)."""
    merged: dict[str, Any] = {}
    if thinking is not None:
        merged["chat_template_kwargs"] = {"enable_thinking": thinking, "thinking": thinking}
    for key, value in (extra_body or {}).items():
        if key == "chat_template_kwargs" and isinstance(value, Mapping):
            merged["chat_template_kwargs"] = {**merged.get("chat_template_kwargs", {}), **value}
        else:
            merged[key] = value
    return merged
