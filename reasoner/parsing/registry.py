"""The parsers by name: the values ``reasoning_parser=`` accepts.

Think-tag formats (``<think>…</think>`` unless noted), and what ``thinking=None`` means:

* ``think``: reasoning only if the output opens with ``<think>``; the model service's default.
* ``deepseek-r1``: the output starts in reasoning (the template already wrote ``<think>``).
* ``deepseek-v3``: reasoning only if the output opens with ``<think>``.
* ``qwen3``, ``glm45``: reasoning only if the output opens with ``<think>``; a ``<tool_call>``
  written before ``</think>`` ends reasoning and stays in the content.
* ``kimi``: ``◁think▷…◁/think▷``; reasoning only if the output opens with ``◁think▷``.
* ``kimi-k2``: the output starts in reasoning (Kimi K2 thinks by default; vLLM's parser agrees);
  a ``<|tool_calls_section_begin|>`` written before ``</think>`` ends reasoning, kept as content.

And the others: ``gpt-oss`` (Harmony channels, see :mod:`tandem.reasoner.parsing.harmony`) and
``none`` (everything is content).

Kimi K2 Thinking writes ``<think>`` tags (the ``◁think▷`` pair belongs to the earlier Kimi
thinking models); its tool-call section may open before ``</think>`` and then ends reasoning.
Models whose template writes the opening tag itself (DeepSeek-R1, Qwen3 "Thinking-2507")
need ``thinking=True`` or the ``deepseek-r1`` parser.
"""

from __future__ import annotations

from tandem.reasoner.errors import ConfigurationError
from tandem.reasoner.parsing.base import ReasoningParser
from tandem.reasoner.parsing.harmony import HarmonyParser
from tandem.reasoner.parsing.plain import PlainParser
from tandem.reasoner.parsing.think_tags import ThinkTagParser

_PARSERS: dict[str, ReasoningParser] = {
    parser.name: parser
    for parser in (
        ThinkTagParser("think"),
        ThinkTagParser("deepseek-r1", reasoning_by_default=True),
        ThinkTagParser("deepseek-v3"),
        ThinkTagParser("qwen3", interrupt_tags=("<tool_call>",)),
        ThinkTagParser("glm45", interrupt_tags=("<tool_call>",)),
        ThinkTagParser("kimi", start_tag="◁think▷", end_tag="◁/think▷"),
        ThinkTagParser(
            "kimi-k2", interrupt_tags=("<|tool_calls_section_begin|>",), reasoning_by_default=True
        ),
        HarmonyParser("gpt-oss"),
        PlainParser("none"),
    )
}

REASONING_PARSERS: tuple[str, ...] = tuple(_PARSERS)
"""Every name :func:`get_reasoning_parser` accepts."""


def get_reasoning_parser(name: str) -> ReasoningParser:
    """Return the parser called ``name`` (shared and stateless: safe to use from many threads).

    Raises :class:`~tandem.reasoner.errors.ConfigurationError` for an unknown name, listing the valid ones.
    """
    try:
        return _PARSERS[name]
    except (KeyError, TypeError):
        valid = ", ".join(REASONING_PARSERS)
        raise ConfigurationError(f"unknown reasoning parser {name!r}: use one of {valid}") from None
