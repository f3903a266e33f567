"""Conformance with the peers' own reasoning-parser tests: SGLang, vLLM and LightLLM.

Every vector below is transcribed, as data, from a test of one of those projects (the ``source``
column names the repository and the file; the id ends with the test's name there). The peer's
parser is mapped to ours and to the ``thinking`` its configuration stands for:

* SGLang detectors with ``force_reasoning=False`` → ``thinking=None``; forced → ``thinking=True``
  (``BaseReasoningFormatDetector`` with ``<think>`` tags → ``think``; ``Qwen3Detector`` →
  ``qwen3``; ``Glm45Detector`` → ``glm45``; ``KimiDetector`` → ``kimi``; ``KimiK2Detector`` →
  ``kimi-k2``; ``DeepSeekR1Detector`` → ``deepseek-r1``; ``HarmonyParser``/``GptOssDetector`` →
  ``gpt-oss``).
* vLLM: ``qwen3`` assumes the chat template enabled thinking → ``thinking=True``;
  ``enable_thinking=False`` / ``thinking=False`` → ``thinking=False``; ``deepseek_r1``, ``glm45``,
  ``kimi_k2`` and ``openai_gptoss`` with no switch → ``thinking=None``.
* LightLLM: ``force_reasoning=True`` → ``thinking=True``, else ``None``; token ids in its tests are
  written as words (``</think>`` for the id that stands for it).

Expected values are the peer's, with ``None`` written as ``""``. Where a peer only asserts that a
piece of text is present (``assertIn``), the value here is our full result, which contains it, and
the id says so (``-contains``). Where peers disagree (or a peer disagrees with itself between its
streaming and whole-output readers), the id ends in ``-chosen`` and the value is the behaviour
stated in the README's parser table.

Each vector is checked parsed whole, streamed in every one-cut chunking and one character at a
time, and in the peer's own chunks when its test streamed given pieces; ``DELTAS`` checks the
per-chunk output the peers assert while streaming.

Not transcribed: vectors of formats tandem has no parser for (Hunyuan, Nemotron, Gemma 4, MiniMax),
of request plumbing (``continue_final_message``, ``stream_reasoning=False``, structural tags), of
token-id APIs (``is_reasoning_end`` on prompts holding user turns), LightLLM's stop-sequence state
(which tokens may end a stop string, not a split), and three SGLang Harmony vectors written with
``<message|>``, a typo for ``<|message|>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tandem.reasoner.parsing import ParsedToolCall, ReasoningSplit, get_reasoning_parser
from tests.reasoner.parsing.chunking import chunkings, feed_all

SGLANG_REASONING = "sgl-project/sglang test/registered/unit/parser/test_reasoning_parser.py"
SGLANG_HARMONY = "sgl-project/sglang test/registered/unit/parser/test_harmony_parser.py"
VLLM_R1 = "vllm-project/vllm tests/reasoning/test_deepseekr1_reasoning_parser.py"
VLLM_V3 = "vllm-project/vllm tests/reasoning/test_deepseekv3_reasoning_parser.py"
VLLM_QWEN3 = "vllm-project/vllm tests/reasoning/test_qwen3_reasoning_parser.py"
VLLM_GLM45 = "vllm-project/vllm tests/reasoning/test_glm4_moe_reasoning_parser.py"
VLLM_KIMI_K2 = "vllm-project/vllm tests/reasoning/test_kimi_k2_reasoning_parser.py"
VLLM_GPT_OSS = "vllm-project/vllm tests/reasoning/test_gptoss_reasoning_parser.py"
LIGHTLLM_TOKENS = "ModelTC/LightLLM unit_tests/server/test_reasoning_token_usage.py"
LIGHTLLM_STRUCTURED = (
    "ModelTC/LightLLM unit_tests/server/router/model_infer/structured_output/test_reasoning.py"
)


@dataclass(frozen=True)
class Vector:
    """One transcribed case: the peer's output text and the split it expects."""

    source: str
    parser: str
    thinking: bool | None
    text: str
    reasoning: str
    content: str
    calls: tuple[tuple[str, str], ...] = ()
    chunks: tuple[str, ...] | None = None
    """The pieces the peer's test streamed, when it streamed given pieces."""

    def expected(self) -> ReasoningSplit:
        calls = [ParsedToolCall(name=name, arguments=arguments) for name, arguments in self.calls]
        return ReasoningSplit(self.reasoning, self.content, calls)


def v(id: str, source: str, parser: str, thinking: bool | None, text: str, reasoning: str, content: str,
      calls: tuple[tuple[str, str], ...] = (), chunks: tuple[str, ...] | None = None) -> Any:  # fmt: skip
    if chunks is not None:
        assert "".join(chunks) == text, id
    return pytest.param(Vector(source, parser, thinking, text, reasoning, content, calls, chunks), id=id)


def streamed(id: str, source: str, parser: str, thinking: bool | None, chunks: tuple[str, ...],
             reasoning: str, content: str, calls: tuple[tuple[str, str], ...] = ()) -> Any:  # fmt: skip
    return v(id, source, parser, thinking, "".join(chunks), reasoning, content, calls, chunks)


# fmt: off
# -- SGLang: think tags ------------------------------------------------------------------------
S = SGLANG_REASONING
K2_CALL = "<|tool_calls_section_begin|><|tool_call_begin|>"
SGLANG_THINK_TAGS = [
    v("sglang-base-test_detect_and_parse_normal_text", S, "think", None, "This is normal text", "",
      "This is normal text"),
    v("sglang-base-test_detect_and_parse_with_start_token", S, "think", None, "<think>This is reasoning",
      "This is reasoning", ""),
    v("sglang-base-test_detect_and_parse_complete_reasoning", S, "think", None,
      "<think>This is reasoning</think>This is normal", "This is reasoning", "This is normal"),
    v("sglang-base-test_detect_and_parse_force_reasoning", S, "think", True, "This should be reasoning",
      "This should be reasoning", ""),
    v("sglang-base-test_parse_streaming_increment_normal", S, "think", None, "Hello world", "",
      "Hello world"),
    streamed("sglang-base-test_parse_streaming_increment_end_token", S, "think", None,
             ("<think>", "reasoning", "</think>normal text"), "reasoning", "normal text"),
    v("sglang-base-test_parse_streaming_increment_mixed_content", S, "think", None,
      "<think>reasoning</think>normal", "reasoning", "normal"),
    streamed("sglang-buffer-test_partial_end_tag_buffer_loss_bug", S, "think", None, ("</", "answer"), "",
             "</answer"),
    streamed("sglang-buffer-test_partial_start_tag_buffer_preservation", S, "think", None,
             ("<th", "is is text"), "", "<this is text"),
    streamed("sglang-buffer-test_partial_end_tag_in_reasoning_mode", S, "think", None,
             ("<think>", "some reasoning", "</", "think>normal text"), "some reasoning", "normal text"),
    streamed("sglang-buffer-test_multiple_partial_fragments", S, "think", None, ("<", "/", "random>"), "",
             "</random>"),
    streamed("sglang-buffer-test_edge_case_exact_token_match", S, "think", None,
             ("<", "t", "h", "i", "n", "k>"), "", ""),
    v("sglang-r1-test_detect_and_parse_r1_format", S, "deepseek-r1", None,
      "I need to think about this. The answer is 42.", "I need to think about this. The answer is 42.", ""),
    v("sglang-r1-test_detect_and_parse_with_end_token", S, "deepseek-r1", None,
      "I think this is the answer</think>The final answer is 42.", "I think this is the answer",
      "The final answer is 42."),
    v("sglang-r1-test_detect_and_parse_with_start_token", S, "deepseek-r1", None,
      "<think>I need to think about this.</think>The answer is 42.", "I need to think about this.",
      "The answer is 42."),
    v("sglang-qwen3-test_detect_and_parse_qwen3_format", S, "qwen3", None,
      "<think>Let me think about this problem</think>The answer is 42.", "Let me think about this problem",
      "The answer is 42."),
    v("sglang-qwen3-test_detect_and_parse_without_thinking", S, "qwen3", None,
      "Direct answer without thinking.", "", "Direct answer without thinking."),
    v("sglang-qwen3-forced-test_detect_and_parse_qwen3_forced_reasoning_format", S, "qwen3", True,
      "I need to think about this step by step.</think>The answer is 42.",
      "I need to think about this step by step.", "The answer is 42."),
    v("sglang-qwen3-forced-test_detect_and_parse_with_start_token", S, "qwen3", True,
      "<think>I need to think about this.</think>The answer is 42.", "I need to think about this.",
      "The answer is 42."),
    streamed("sglang-qwen3-forced-test_streaming_qwen3_forced_reasoning_format", S, "qwen3", True,
             ("I need to", " think about this.", "</think>The answer is 42."),
             "I need to think about this.", "The answer is 42."),
    v("sglang-kimi-test_detect_and_parse_kimi_format", S, "kimi", None,
      "◁think▷Let me consider this carefully◁/think▷The answer is 42.", "Let me consider this carefully",
      "The answer is 42."),
    v("sglang-kimi-test_detect_and_parse_kimi_no_thinking", S, "kimi", None,
      "Direct answer without thinking tokens.", "", "Direct answer without thinking tokens."),
    streamed("sglang-kimi-test_streaming_kimi_format", S, "kimi", None,
             ("◁thi", "nk▷Start", "thinking...", "◁/think▷answer"), "Startthinking...", "answer"),
    v("sglang-kimi-k2-test_detect_and_parse_tool_interrupt", S, "kimi-k2", None, f"<think>thinking{K2_CALL}",
      "thinking", K2_CALL),
    streamed("sglang-kimi-k2-test_streaming_tool_interrupt", S, "kimi-k2", None,
             ("<think>", "reasoning", "<|tool_calls_section_begin|>"), "reasoning",
             "<|tool_calls_section_begin|>"),
    streamed("sglang-kimi-k2-test_streaming_after_interrupt_is_normal", S, "kimi-k2", None,
             ("<think>", "reasoning<|tool_calls_section_begin|>", "<|tool_call_begin|>"), "reasoning",
             K2_CALL),
    v("sglang-glm45-test_detect_and_parse_normal_reasoning", S, "glm45", None,
      "<think>Let me think about this step by step</think>The answer is 42.",
      "Let me think about this step by step", "The answer is 42."),
    v("sglang-glm45-test_detect_and_parse_tool_interrupt", S, "glm45", None,
      "<think>I need to think<tool_call>tool call data", "I need to think", "<tool_call>tool call data"),
    v("sglang-glm45-test_detect_and_parse_multiple_tool_calls_find", S, "glm45", None,
      "<think>thinking<tool_call>first tool<tool_call>second tool<tool_call>final tool", "thinking",
      "<tool_call>first tool<tool_call>second tool<tool_call>final tool"),
    v("sglang-glm45-test_detect_and_parse_truncated_reasoning", S, "glm45", None, "<think>This is incomplete",
      "This is incomplete", ""),
    v("sglang-glm45-test_detect_and_parse_normal_text_only", S, "glm45", None,
      "Just the answer without any reasoning.", "", "Just the answer without any reasoning."),
    streamed("sglang-glm45-test_streaming_normal_flow", S, "glm45", None, ("<think>", "thinking...",
             "</think>answer"), "thinking...", "answer"),
    streamed("sglang-glm45-test_streaming_tool_interrupt_split_tokens", S, "glm45", None,
             ("<think>", "thinking", "<tool_call>", "tool args"), "thinking", "<tool_call>tool args"),
    streamed("sglang-glm45-test_streaming_empty_reasoning_with_tool", S, "glm45", None,
             ("<think>", "<tool_call>tool call"), "", "<tool_call>tool call"),
    v("sglang-glm45-test_forced_reasoning_mode-1", S, "glm45", True, "This is reasoning", "This is reasoning",
      ""),
    v("sglang-glm45-test_forced_reasoning_mode-2", S, "glm45", True, "More reasoning<tool_call>tool call",
      "More reasoning", "<tool_call>tool call"),
    v("sglang-parser-test_parse_non_stream", S, "qwen3", None, "<think>Let me think</think>The answer is 42.",
      "Let me think", "The answer is 42."),
    v("sglang-parser-test_parse_non_stream_preserves_payload_whitespace", S, "qwen3", None,
      "<think>\nLet me think\n</think>\n\nThe answer is 42.\n", "\nLet me think\n",
      "\n\nThe answer is 42.\n"),
    v("sglang-parser-test_parse_non_stream_strips_repeated_leading_start_tokens", S, "qwen3", None,
      "<think><think>Let me think</think>The answer is 42.", "Let me think", "The answer is 42."),
    streamed("sglang-parser-test_parse_stream_chunk_preserves_payload_whitespace", S, "qwen3", None,
             ("<think>", "\nLet me think\n</think>\n\nThe answer is 42.\n"), "\nLet me think\n",
             "\n\nThe answer is 42.\n"),
    streamed("sglang-parser-test_parse_stream_chunk", S, "qwen3", None, ("<think>", "thinking...",
             "</think>answer"), "thinking...", "answer"),
    v("sglang-parser-test_glm45_tool_interruption", S, "glm45", None, "<think>thinking<tool_call>tool call",
      "thinking", "<tool_call>tool call"),
    streamed("sglang-parser-test_glm45_tool_interruption-stream", S, "glm45", None,
             ("<think>", "reasoning", "<tool_call>", "tool args"), "reasoning", "<tool_call>tool args"),
    v("sglang-parser-test_kimik2_tool_interruption", S, "kimi-k2", None, f"<think>thinking{K2_CALL}",
      "thinking", K2_CALL),
    streamed("sglang-parser-test_kimik2_tool_interruption-stream", S, "kimi-k2", None,
             ("<think>", "reasoning", "<|tool_calls_section_begin|>", "<|tool_call_begin|>"), "reasoning",
             K2_CALL),
    v("sglang-integration-test_deepseek_r1_complete_response-contains", S, "deepseek-r1", None,
      "I need to solve this step by step. First, I'll analyze the problem. The given equation is x + 2 = 5. "
      "To solve for x, I subtract 2 from both sides: x = 5 - 2 = 3.</think>The answer is x = 3.",
      "I need to solve this step by step. First, I'll analyze the problem. The given equation is x + 2 = 5. "
      "To solve for x, I subtract 2 from both sides: x = 5 - 2 = 3.", "The answer is x = 3."),
    streamed("sglang-integration-test_qwen3_streaming_scenario-contains", S, "qwen3", None,
             ("<think>", "Let me analyze this problem.", " I need to consider multiple factors.", "</think>",
              "Based on my analysis, the solution is to use a different approach."),
             "Let me analyze this problem. I need to consider multiple factors.",
             "Based on my analysis, the solution is to use a different approach."),
    streamed("sglang-integration-test_kimi_streaming_scenario-contains", S, "kimi", None,
             ("◁thi", "nk▷", "Let me analyze this problem.", " I need to consider multiple factors.", "◁/th",
              "ink▷", "The answer is 42."),
             "Let me analyze this problem. I need to consider multiple factors.", "The answer is 42."),
    v("sglang-integration-test_empty_reasoning_blocks", S, "qwen3", None, "<think></think>Just the answer.",
      "", "Just the answer."),
    v("sglang-integration-test_qwen3_forced_reasoning_complete_response-contains", S, "qwen3", True,
      "Let me solve this step by step. The equation is x + 2 = 5. Subtracting 2 from both sides gives x = 3."
      "</think>The solution is x = 3.",
      "Let me solve this step by step. The equation is x + 2 = 5. Subtracting 2 from both sides gives x = 3.",
      "The solution is x = 3."),
    streamed("sglang-integration-test_qwen3_forced_reasoning_streaming_scenario-contains", S, "qwen3", True,
             ("I need to analyze", " this problem carefully.", " Let me break it down.", "</think>",
              "The final answer is 42."),
             "I need to analyze this problem carefully. Let me break it down.", "The final answer is 42."),
]

# -- SGLang: Harmony (gpt-oss), token form and stripped form ------------------------------------
H = SGLANG_HARMONY
CALL_SF = '<|channel|>commentary to=functions.get_weather<|message|>{"location":"SF"}<|call|>'
CALL_NYC = '<|channel|>commentary to=functions.get_temp<|message|>{"location":"NYC"}<|call|>'
BOSTON = '<|channel|>commentary to=functions.get_weather<|message|>{"city":"Boston"}<|call|>'
SGLANG_HARMONY_VECTORS = [
    v("sglang-canonical-test_parse_single_analysis_block", H, "gpt-oss", None,
      "<|channel|>analysis<|message|>Let me think about this<|end|>", "Let me think about this", ""),
    v("sglang-canonical-test_parse_single_commentary_block", H, "gpt-oss", None,
      "<|channel|>commentary<|message|>User-visible message<|end|>", "", "User-visible message"),
    v("sglang-canonical-test_parse_single_final_block", H, "gpt-oss", None,
      "<|start|>assistant<|channel|>final<|message|>The answer is 42<|return|>", "", "The answer is 42"),
    v("sglang-canonical-test_parse_tool_call_commentary", H, "gpt-oss", None,
      '<|channel|>commentary to=functions.get_weather<|message|>{"location": "SF"}<|call|>', "", "",
      (("get_weather", '{"location": "SF"}'),)),
    v("sglang-canonical-test_parse_tool_call_analysis", H, "gpt-oss", None,
      '<|channel|>analysis to=browser.search<|message|>{"query": "SGLang"}<|call|>', "", "",
      (("browser.search", '{"query": "SGLang"}'),)),
    v("sglang-canonical-test_parse_complex_sequence", H, "gpt-oss", None,
      "<|channel|>analysis<|message|>Need to use function get_weather.<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_weather<|message|>"
      '{"location":"San Francisco"}<|call|>',
      "Need to use function get_weather.", "", (("get_weather", '{"location":"San Francisco"}'),)),
    v("sglang-canonical-test_parse_with_interspersed_text", H, "gpt-oss", None,
      "Some text <|channel|>analysis<|message|>reasoning<|end|> more text "
      "<|start|>assistant<|channel|>final<|message|>answer<|return|> trailing text",
      "reasoning", "Some text  more text answer trailing text"),
    v("sglang-canonical-test_parse_incomplete_block", H, "gpt-oss", None,
      "<|channel|>analysis<|message|>partial content", "partial content", ""),
    v("sglang-canonical-test_parse_partial_token_suffix", H, "gpt-oss", None, "complete text <|ret", "",
      "complete text "),
    v("sglang-canonical-test_parse_tool_response_message", H, "gpt-oss", None,
      '<|start|>functions.get_weather to=assistant<|message|>{"sunny": true}<|end|>', "", '{"sunny": true}'),
    v("sglang-canonical-test_parse_empty_content_blocks", H, "gpt-oss", None,
      "<|channel|>analysis<|message|><|end|>", "", ""),
    v("sglang-canonical-test_parse_commentary_filler_between_blocks", H, "gpt-oss", None,
      CALL_SF + "commentary" + CALL_NYC, "", "",
      (("get_weather", '{"location":"SF"}'), ("get_temp", '{"location":"NYC"}'))),
    v("sglang-canonical-test_canonical_standalone_end_token_filtered", H, "gpt-oss", None,
      "<|end|><|start|><|channel|>final<|message|>answer<|end|>", "", "answer"),
    v("sglang-text-test_parse_analysis_then_final", H, "gpt-oss", None,
      "analysis I need to think about this. assistantfinal The answer is 42.", "I need to think about this.",
      "The answer is 42."),
    v("sglang-text-test_parse_commentary_then_final", H, "gpt-oss", None,
      "commentary User-visible preamble. assistantfinal The answer is 42.", "",
      "User-visible preamble.The answer is 42."),
    v("sglang-text-test_parse_final_only", H, "gpt-oss", None, "assistantfinal The direct answer.", "",
      "The direct answer."),
    v("sglang-text-test_parse_analysis_only-chosen", H, "gpt-oss", None,
      "analysis This is reasoning content.",
      "This is reasoning content.", ""),
    v("sglang-text-test_parse_partial_analysis_streaming-chosen", H, "gpt-oss", None,
      "analysis partial content", "partial content", ""),
    v("sglang-text-test_parse_incomplete_assistantfinal-chosen", H, "gpt-oss", None,
      "analysis reasoning content assistantfin", "reasoning content assistantfin", ""),
    v("sglang-text-test_parse_case_insensitive", H, "gpt-oss", None,
      "ANALYSIS reasoning ASSISTANTFINAL answer",
      "reasoning", "answer"),
    v("sglang-text-test_parse_plain_text_fallback", H, "gpt-oss", None,
      "Just plain text without any markers.",
      "", "Just plain text without any markers."),
    v("sglang-text-test_parse_analysis_no_space_after_header", H, "gpt-oss", None,
      "analysisThe user typed random strings. We should respond politely.assistantfinalIt looks like "
      "you're testing. How can I help?",
      "The user typed random strings. We should respond politely.",
      "It looks like you're testing. How can I help?"),
    v("sglang-text-test_text_strategy_commentary_only-contains", H, "gpt-oss", None,
      "commentary: just a comment here", "", ": just a comment here"),
    v("sglang-text-test_text_strategy_commentary_with_hold-contains", H, "gpt-oss", None,
      "commentary: discussion assistant", "", ": discussion assistant"),
    v("sglang-parser-test_strategy_selection_canonical", H, "gpt-oss", None,
      "<|channel|>analysis<|message|>test<|end|>", "test", ""),
    v("sglang-parser-test_strategy_selection_text", H, "gpt-oss", None, "analysis test content",
      "test content",
      ""),
    streamed("sglang-parser-test_strategy_selection_delayed-chosen", H, "gpt-oss", None,
             ("some", " analysis content"), "", "some analysis content"),
    streamed("sglang-parser-test_streaming_canonical_format", H, "gpt-oss", None,
             ("<|channel|>analysis<|message|>", "reasoning content", "<|end|>",
              "<|start|>assistant<|channel|>final<|message|>", "final answer", "<|return|>"),
             "reasoning content", "final answer"),
    streamed("sglang-parser-test_streaming_text_format-contains", H, "gpt-oss", None,
             ("analysis reasoning", " content assistantfinal", " the answer"), "reasoning content",
             "the answer"),
    streamed("sglang-parser-test_streaming_commentary_filler", H, "gpt-oss", None,
             ("<|channel|>commentary to=functions.get_weather", "<|message|>", '{"location":"SF"}',
             "<|call|>",
              "comment", "ary", "<|channel|>commentary to=functions.get_temp", "<|message|>",
              '{"location":"NYC"}', "<|call|>", "comment", "ary", "<|start|>assistant<|channel|>final",
              "<|message|>Done<|return|>"),
             "", "Done", (("get_weather", '{"location":"SF"}'), ("get_temp", '{"location":"NYC"}'))),
    v("sglang-parser-test_repetitive_tool_calls_with_commentary_filler", H, "gpt-oss", None,
      "<|channel|>analysis<|message|>Need to get weather<|end|><|start|>assistant" + BOSTON + "commentary"
      + BOSTON + "commentary" + BOSTON + "<|channel|>analysis<|message|>Tool not responding<|end|>"
      "<|start|>assistant<|channel|>final<|message|>Unable to fetch weather data<|return|>",
      "Need to get weatherTool not responding", "Unable to fetch weather data",
      (("get_weather", '{"city":"Boston"}'),) * 3),
    v("sglang-integration-test_complete_reasoning_flow", H, "gpt-oss", None,
      '<|channel|>analysis<|message|>User asks: "What is 2 + 2?" Simple arithmetic. Provide answer.<|end|>'
      "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>",
      'User asks: "What is 2 + 2?" Simple arithmetic. Provide answer.', "2 + 2 = 4."),
    v("sglang-integration-test_tool_call_sequence", H, "gpt-oss", None,
      "<|channel|>analysis<|message|>Need to use function get_weather.<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
      '{"location":"San Francisco"}<|call|>',
      "Need to use function get_weather.", "", (("get_weather", '{"location":"San Francisco"}'),)),
    v("sglang-integration-test_preamble_sequence", H, "gpt-oss", None,
      "<|channel|>analysis<|message|>Long chain of thought<|end|>"
      "<|start|>assistant<|channel|>commentary<|message|>**Action plan**: 1. Generate file 2. "
      "Start server<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.generate_file<|message|>"
      '{"template": "basic_html"}<|call|>',
      "Long chain of thought", "**Action plan**: 1. Generate file 2. Start server",
      (("generate_file", '{"template": "basic_html"}'),)),
    v("sglang-integration-test_tool_response_handling", H, "gpt-oss", None,
      "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"
      '{"sunny": true, "temperature": 20}<|end|>', "", '{"sunny": true, "temperature": 20}'),
    v("sglang-integration-test_text_fallback_formats-1", H, "gpt-oss", None,
      "analysis thinking assistantfinal answer", "thinking", "answer"),
    v("sglang-integration-test_text_fallback_formats-2", H, "gpt-oss", None, "assistantfinal direct answer",
      "",
      "direct answer"),
    streamed("sglang-integration-test_streaming_property_canonical", H, "gpt-oss", None,
             ("<|channel|>", "analysis", "<|message|>", "reasoning content", "<|end|>", "<|start|>assistant",
              "<|channel|>final", "<|message|>", "final ", "content"), "reasoning content", "final content"),
    streamed("sglang-integration-test_streaming_property_text", H, "gpt-oss", None,
             ("analysis reason", "ing content assistant", "final final answer"), "reasoning content",
             "final answer"),
    v("sglang-edge-test_malformed_channel_headers-chosen", H, "gpt-oss", None,
      "<|channel|>unknown<|message|>content<|end|>", "", "content"),
    v("sglang-edge-test_mixed_unknown_tokens-contains", H, "gpt-oss", None,
      "text <|weird|> more text <|channel|>analysis<|message|>content<|end|>", "content",
      "text <|weird|> more text "),
    v("sglang-edge-test_empty_input", H, "gpt-oss", None, "", "", ""),
    v("sglang-edge-test_whitespace_preservation", H, "gpt-oss", None,
      "<|channel|>analysis<|message|>  content with spaces  <|end|>", "  content with spaces  ", ""),
    streamed("sglang-edge-test_streaming_whitespace_preservation", H, "gpt-oss", None,
             ("analysis The user typed ", '"wapppa". Not a question.'),
             'The user typed "wapppa". Not a question.',
             ""),
    v("sglang-edge-test_consecutive_blocks_same_type", H, "gpt-oss", None,
      "<|channel|>analysis<|message|>first reasoning<|end|>"
      "<|channel|>analysis<|message|>second reasoning<|end|>",
      "first reasoningsecond reasoning", ""),
    streamed("sglang-buffer-test_multiple_end_markers_data_loss", H, "gpt-oss", None,
             ("<|channel|>analysis<|message|>First reasoning<|end|><|channel|>analysis<|message|>Second "
              "reasoning<|end|>", "<|start|>assistant<|channel|>final<|message|>Final answer<|return|>"),
             "First reasoningSecond reasoning", "Final answer"),
    streamed("sglang-buffer-test_partial_reasoning_before_end_marker", H, "gpt-oss", None,
             ("<|channel|>analysis<|message|>Let me think", "<|end|>",
             "<|channel|>analysis<|message|> carefully",
              "<|end|>", "<|start|>assistant<|channel|>final<|message|>Answer: 42<|return|>"),
             "Let me think carefully", "Answer: 42"),
    streamed("sglang-buffer-test_strategy_switching_content_loss-contains", H, "gpt-oss", None,
             ("analysis partial", "<|channel|>analysis<|message|>content<|end|><|start|>assistant<|channel|>"
              "final<|message|>Answer<|return|>"), "partialcontent", "Answer"),
    streamed("sglang-buffer-test_tool_call_chunk_boundary_issue", H, "gpt-oss", None,
             ('<|channel|>commentary to=functions.get_weather<|message|>{"location":"SF',
              '","unit":"celsius"}<|call|><|start|>assistant<|channel|>final<|message|>Done<|return|>'),
             "", "Done", (("get_weather", '{"location":"SF","unit":"celsius"}'),)),
    streamed("sglang-buffer-test_buffer_state_loss_after_reset", H, "gpt-oss", None,
             ("<|channel|>analysis<|message|>First<|end|><|channel|>analysis<|message|>Second partial",
              "<|end|><|start|>assistant<|channel|>final<|message|>Done<|return|>"),
             "FirstSecond partial", "Done"),
    # GptOssDetector in the reasoning-parser suite delegates to the same Harmony reader.
    v("sglang-gptoss-test_detect_and_parse_with_analysis_and_final", S, "gpt-oss", None,
      "<|start|><|channel|>analysis<|message|>thinking hard<|end|>"
      "<|channel|>final<|message|>the answer<|end|>",
      "thinking hard", "the answer"),
    v("sglang-gptoss-test_detect_and_parse_normal_only", S, "gpt-oss", None,
      "<|start|><|channel|>final<|message|>just the answer<|end|>", "", "just the answer"),
    streamed("sglang-gptoss-test_streaming_analysis_then_final", S, "gpt-oss", None,
             ("<|start|><|channel|>analysis<|message|>", "reasoning part", "<|end|>",
              "<|channel|>final<|message|>answer", "<|end|>"), "reasoning part", "answer"),
    v("sglang-gptoss-test_streaming_with_tool_call-contains", S, "gpt-oss", None,
      "<|start|><|channel|>analysis<|message|>think<|end|><|call|>tool_data<|return|>"
      "<|channel|>final<|message|>result<|end|>", "think", "tool_dataresult"),
    v("sglang-gptoss-test_detect_and_parse_tool_call_raw_text-contains", S, "gpt-oss", None,
      "<|start|><|channel|>analysis<|message|>think<|end|><|call|>function_data<|return|>"
      "<|channel|>final<|message|>result<|end|>", "think", "function_dataresult"),
    streamed("sglang-gptoss-test_streaming_tool_call_raw_text-contains", S, "gpt-oss", None,
             ("<|start|><|channel|>analysis<|message|>reason<|end|>", "<|call|>tool_payload<|return|>",
              "<|channel|>final<|message|>done<|end|>"), "reason", "tool_payloaddone"),
]

# -- vLLM --------------------------------------------------------------------------------------
R1, Q3, GLM, K2, V3, OSS = VLLM_R1, VLLM_QWEN3, VLLM_GLM45, VLLM_KIMI_K2, VLLM_V3, VLLM_GPT_OSS
TOOL_CALL_BODY = (
    "<tool_call>\n<function=bash>\n<parameter=command>\ncat /etc/hosts\n</parameter>\n</function>\n"
    "</tool_call>"
)
REASONING_START = "<|end|><|start|>assistant<|channel|>analysis<|message|>"
FINAL_PREFIX = "<|end|><|start|>assistant<|channel|>final"
VLLM_VECTORS = [
    v("vllm-r1-simple_reasoning", R1, "deepseek-r1", None,
      "This is a reasoning section</think>This is the rest",
      "This is a reasoning section", "This is the rest"),
    v("vllm-r1-complete_reasoning", R1, "deepseek-r1", None, "This is a reasoning section</think>",
      "This is a reasoning section", ""),
    v("vllm-r1-no_content_token", R1, "deepseek-r1", None, "This is content", "This is content", ""),
    v("vllm-r1-multiple_lines", R1, "deepseek-r1", None, "This\nThat</think>This is the rest\nThat",
      "This\nThat", "This is the rest\nThat"),
    v("vllm-r1-shortest", R1, "deepseek-r1", None, "</think>This is the rest", "", "This is the rest"),
    v("vllm-r1-reasoning_with_think", R1, "deepseek-r1", None,
      "<think>This is a reasoning section</think>This is the rest", "This is a reasoning section",
      "This is the rest"),
    v("vllm-r1-complete_reasoning_with_think", R1, "deepseek-r1", None,
      "<think>This is a reasoning section</think>",
      "This is a reasoning section", ""),
    v("vllm-r1-multiple_lines_with_think", R1, "deepseek-r1", None,
      "<think>This\nThat</think>This is the rest\nThat",
      "This\nThat", "This is the rest\nThat"),
    v("vllm-r1-think_no_end", R1, "deepseek-r1", None, "<think>This is a reasoning section",
      "This is a reasoning section", ""),
    v("vllm-r1-empty", R1, "deepseek-r1", None, "", "", ""),
    v("vllm-r1-new_line-chosen", R1, "deepseek-r1", None,
      "\n<think>This is a reasoning section</think>\nThis is the rest", "This is a reasoning section",
      "\nThis is the rest"),
    v("vllm-v3-test_identity_reasoning_parser_basic", V3, "deepseek-v3", False, "This is some output", "",
      "This is some output"),
    v("vllm-v3-test_count_reasoning_tokens_delegates-thinking", V3, "deepseek-v3", True,
      "<think>one two three</think>four", "one two three", "four"),
    v("vllm-v3-test_count_reasoning_tokens_delegates-no-thinking", V3, "deepseek-v3", False,
      "<think>one two three</think>four", "", "<think>one two three</think>four"),
    v("vllm-qwen3-without_start_token", Q3, "qwen3", True,
      "This is a reasoning section</think>This is the rest",
      "This is a reasoning section", "This is the rest"),
    v("vllm-qwen3-without_start_token_complete_reasoning", Q3, "qwen3", True,
      "This is a reasoning section</think>",
      "This is a reasoning section", ""),
    v("vllm-qwen3-with_think", Q3, "qwen3", True,
      "<think>This is a reasoning section</think>This is the rest",
      "This is a reasoning section", "This is the rest"),
    v("vllm-qwen3-without_think", Q3, "qwen3", True, "This is the rest", "This is the rest", ""),
    v("vllm-qwen3-complete_reasoning", Q3, "qwen3", True, "<think>This is a reasoning section</think>",
      "This is a reasoning section", ""),
    v("vllm-qwen3-multiline_reasoning", Q3, "qwen3", True,
      "<think>This is a reasoning\nsection</think>This is the rest\nThat", "This is a reasoning\nsection",
      "This is the rest\nThat"),
    v("vllm-qwen3-only_open_tag", Q3, "qwen3", True, "<think>This is a reasoning section",
      "This is a reasoning section", ""),
    v("vllm-qwen3-truncated_no_start_token", Q3, "qwen3", True, "This is a reasoning section",
      "This is a reasoning section", ""),
    v("vllm-qwen3-tool_call_no_think_end", Q3, "qwen3", True, "I need to read the file.\n\n" + TOOL_CALL_BODY,
      "I need to read the file.\n\n", TOOL_CALL_BODY),
    v("vllm-qwen3-tool_call_with_think_no_end", Q3, "qwen3", True,
      "<think>I need to read the file.\n\n" + TOOL_CALL_BODY, "I need to read the file.\n\n", TOOL_CALL_BODY),
    streamed("vllm-qwen3-start_token_grouped_with_text", Q3, "qwen3", True,
             ("<think>This is a reasoning section", "</think>", "This is the rest"),
             "This is a reasoning section",
             "This is the rest"),
    streamed("vllm-qwen3-end_token_grouped_with_content", Q3, "qwen3", True,
             ("reasoning section", "</think>This is the rest"), "reasoning section", "This is the rest"),
    streamed("vllm-qwen3-start_and_end_in_one_delta_no_content", Q3, "qwen3", True,
             ("<think>reasoning</think>",),
             "reasoning", ""),
    streamed("vllm-qwen3-no_start_end_grouped_with_content", Q3, "qwen3", True,
             ("reasoning section", "</think>content"), "reasoning section", "content"),
    streamed("vllm-qwen3-tool_call_implicit_reasoning_end", Q3, "qwen3", True,
             ("I need to read the file.\n\n", "<tool_call>\n<function=bash>"), "I need to read the file.\n\n",
             "<tool_call>\n<function=bash>"),
    v("vllm-qwen3-thinking_disabled_plain_content", Q3, "qwen3", False, "This is plain content", "",
      "This is plain content"),
    v("vllm-qwen3-thinking_disabled_no_think_tokens", Q3, "qwen3", False,
      "Some output without think tokens", "",
      "Some output without think tokens"),
    v("vllm-qwen3-thinking_disabled_with_tool_call", Q3, "qwen3", False,
      "I need to read the file.\n\n" + TOOL_CALL_BODY, "", "I need to read the file.\n\n" + TOOL_CALL_BODY),
    v("vllm-glm45-with_think", GLM, "glm45", None,
      "<think>This is a reasoning section</think>This is the rest",
      "This is a reasoning section", "This is the rest"),
    v("vllm-glm45-without_think", GLM, "glm45", None, "This is the rest", "", "This is the rest"),
    v("vllm-glm45-complete_reasoning", GLM, "glm45", None, "<think>This is a reasoning section</think>",
      "This is a reasoning section", ""),
    v("vllm-glm45-multiline_reasoning", GLM, "glm45", None,
      "<think>This is a reasoning\nsection</think>This is the rest\nThat", "This is a reasoning\nsection",
      "This is the rest\nThat"),
    v("vllm-glm45-empty_think_block", GLM, "glm45", None, "<think></think>This is the rest", "",
      "This is the rest"),
    v("vllm-glm45-empty_think_block_no_content", GLM, "glm45", None, "<think></think>", "", ""),
    v("vllm-glm45-only_open_tag-chosen", GLM, "glm45", None, "<think>This is a reasoning section",
      "This is a reasoning section", ""),
    v("vllm-kimi-k2-test_extract_reasoning_with_think_tags", K2, "kimi-k2", None,
      "<think>step by step reasoning</think>final answer", "step by step reasoning", "final answer"),
    v("vllm-kimi-k2-test_extract_reasoning_empty_thinking", K2, "kimi-k2", None,
      "<think></think>final answer", "",
      "final answer"),
    v("vllm-kimi-k2-test_extract_reasoning_implicit_start", K2, "kimi-k2", None,
      "implicit reasoning with no tags",
      "implicit reasoning with no tags", ""),
    v("vllm-kimi-k2-test_extract_reasoning_tool_section_ends_reasoning", K2, "kimi-k2", None,
      "some reasoning<|tool_calls_section_begin|>tool call data", "some reasoning",
      "<|tool_calls_section_begin|>tool call data"),
    streamed("vllm-kimi-k2-test_streaming_reasoning_then_content", K2, "kimi-k2", None,
             ("<think>", "step one", "</think>", "answer"), "step one", "answer"),
    streamed("vllm-kimi-k2-test_streaming_tool_section_ends_reasoning", K2, "kimi-k2", None,
             ("<think>thinking", "<|tool_calls_section_begin|>"), "thinking", "<|tool_calls_section_begin|>"),
    v("vllm-kimi-k2-test_parser_selection_thinking_disabled", K2, "kimi-k2", False,
      "<think>step by step reasoning</think>final answer", "",
      "<think>step by step reasoning</think>final answer"),
    v("vllm-gptoss-BASIC_CONTENT", OSS, "gpt-oss", None,
      REASONING_START + "This is reasoning" + FINAL_PREFIX + "<|message|>This is the rest",
      "This is reasoning",
      "This is the rest"),
    v("vllm-gptoss-BASIC_REASONING_ONLY", OSS, "gpt-oss", None, REASONING_START + "This is reasoning<|end|>",
      "This is reasoning", ""),
    v("vllm-gptoss-COMPLEX_CONTENT_INCOMPLETE_PREFIX_ONLY", OSS, "gpt-oss", None,
      REASONING_START + "This is reasoning" + FINAL_PREFIX, "This is reasoning", ""),
    v("vllm-gptoss-COMPLEX_CONTENT_SUFFIX_ONLY", OSS, "gpt-oss", None,
      REASONING_START + "This is reasoning<|message|>", "This is reasoning", ""),
    v("vllm-gptoss-COMPLEX_CONTENT_1_NO_SUFFIX", OSS, "gpt-oss", None,
      REASONING_START + "This is reasoning" + FINAL_PREFIX + "<|constrain|> JSON ", "This is reasoning", ""),
    v("vllm-gptoss-COMPLEX_CONTENT_1", OSS, "gpt-oss", None,
      REASONING_START + "This is reasoning" + FINAL_PREFIX + "<|constrain|> JSON <|message|>",
      "This is reasoning",
      ""),
    v("vllm-gptoss-COMPLEX_CONTENT_1_WITH_CONTENT", OSS, "gpt-oss", None,
      REASONING_START + "This is reasoning" + FINAL_PREFIX + "<|constrain|> JSON <|message|>This is the rest",
      "This is reasoning", "This is the rest"),
    v("vllm-gptoss-COMPLEX_CONTENT_2", OSS, "gpt-oss", None,
      REASONING_START + "This is reasoning" + FINAL_PREFIX
      + "<|constrain|>ReplyAction <|message|>This is the rest",
      "This is reasoning", "This is the rest"),
]

# -- LightLLM ----------------------------------------------------------------------------------
LT, LS = LIGHTLLM_TOKENS, LIGHTLLM_STRUCTURED
LIGHTLLM_VECTORS = [
    v("lightllm-test_counts_tokens_until_single_token_closing_marker", LT, "qwen3", True,
      "one two three</think>four", "one two three", "four"),
    v("lightllm-test_counts_all_tokens_when_generation_is_truncated_before_closing_marker", LT, "qwen3", True,
      "one two", "one two", ""),
    v("lightllm-test_does_not_count_when_reasoning_is_disabled", LT, "qwen3", None, "one two</think>", "",
      "one two</think>"),
    v("lightllm-test_counts_for_always_reasoning_detector", LT, "deepseek-r1", None, "one two</think>",
      "one two",
      ""),
    v("lightllm-test_deepseek_r1_json_answer_stays_in_content", LS, "deepseek-r1", None,
      'Let me think.</think>{"ok":true}', "Let me think.", '{"ok":true}'),
    streamed("lightllm-test_deepseek_r1_json_answer_stays_in_content-stream", LS, "deepseek-r1", None,
             tuple('Let me think.</think>{"ok":true}'), "Let me think.", '{"ok":true}'),
]

# fmt: on

VECTORS = SGLANG_THINK_TAGS + SGLANG_HARMONY_VECTORS + VLLM_VECTORS + LIGHTLLM_VECTORS


@pytest.mark.parametrize("vector", VECTORS)
def test_parsed_whole(vector: Vector) -> None:
    parser = get_reasoning_parser(vector.parser)
    assert parser.parse(vector.text, vector.thinking) == vector.expected()


@pytest.mark.parametrize("vector", VECTORS)
def test_streamed_in_the_peers_chunks_and_in_any_chunking(vector: Vector) -> None:
    parser = get_reasoning_parser(vector.parser)
    if vector.chunks is not None:
        assert feed_all(parser, vector.chunks, vector.thinking) == vector.expected()
    for chunks in chunkings(vector.text):
        assert feed_all(parser, chunks, vector.thinking) == vector.expected(), chunks


@dataclass(frozen=True)
class Deltas:
    """A peer's streaming test: the pieces fed and the ``(reasoning, content)`` each one released."""

    source: str
    parser: str
    thinking: bool | None
    steps: tuple[tuple[str, str, str], ...]


def d(id: str, source: str, parser: str, thinking: bool | None, *steps: tuple[str, str, str]) -> Any:
    return pytest.param(Deltas(source, parser, thinking, steps), id=id)


# fmt: off
DELTAS = [
    d("sglang-base-test_parse_streaming_increment_partial_token", S, "think", None, ("<thi", "", "")),
    d("sglang-base-test_parse_streaming_increment_partial_token-in-reasoning", S, "think", True,
      ("</thi", "", "")),
    d("sglang-base-test_parse_streaming_increment_reasoning_content", S, "think", None, ("<think>", "", ""),
      ("reasoning content", "reasoning content", "")),
    d("sglang-base-test_parse_streaming_increment_end_token", S, "think", None, ("<think>", "", ""),
      ("reasoning", "reasoning", ""), ("</think>normal text", "", "normal text")),
    d("sglang-base-test_parse_streaming_increment_mixed_content", S, "think", None,
      ("<think>reasoning</think>normal", "reasoning", "normal")),
    d("sglang-qwen3-forced-test_streaming_qwen3_forced_reasoning_format", S, "qwen3", True,
      ("I need to", "I need to", ""), (" think about this.", " think about this.", ""),
      ("</think>The answer is 42.", "", "The answer is 42.")),
    d("sglang-kimi-test_streaming_kimi_format", S, "kimi", None, ("◁thi", "", ""), ("nk▷Start", "Start", ""),
      ("thinking...", "thinking...", ""), ("◁/think▷answer", "", "answer")),
    d("sglang-kimi-k2-test_streaming_tool_interrupt", S, "kimi-k2", None, ("<think>", "", ""),
      ("reasoning", "reasoning", ""), ("<|tool_calls_section_begin|>", "", "<|tool_calls_section_begin|>")),
    d("sglang-kimi-k2-test_streaming_after_interrupt_is_normal", S, "kimi-k2", None, ("<think>", "", ""),
      ("reasoning<|tool_calls_section_begin|>", "reasoning", "<|tool_calls_section_begin|>"),
      ("<|tool_call_begin|>", "", "<|tool_call_begin|>")),
    d("sglang-glm45-test_streaming_normal_flow", S, "glm45", None, ("<think>", "", ""),
      ("thinking...", "thinking...", ""), ("</think>answer", "", "answer")),
    d("sglang-glm45-test_streaming_tool_interrupt_split_tokens", S, "glm45", None, ("<think>", "", ""),
      ("thinking", "thinking", ""), ("<tool_call>", "", "<tool_call>"), ("tool args", "", "tool args")),
    d("sglang-glm45-test_streaming_empty_reasoning_with_tool", S, "glm45", None, ("<think>", "", ""),
      ("<tool_call>tool call", "", "<tool_call>tool call")),
    d("sglang-parser-test_parse_stream_chunk_preserves_payload_whitespace", S, "qwen3", None, ("<think>",
      "", ""),
      ("\nLet me think\n</think>\n\nThe answer is 42.\n", "\nLet me think\n", "\n\nThe answer is 42.\n")),
    d("sglang-buffer-test_partial_start_tag_buffer_preservation", S, "think", None, ("<th", "", ""),
      ("is is text", "", "<this is text")),
    d("sglang-buffer-test_partial_end_tag_in_reasoning_mode", S, "think", None, ("<think>", "", ""),
      ("some reasoning", "some reasoning", ""), ("</", "", ""), ("think>normal text", "", "normal text")),
    d("sglang-buffer-test_edge_case_exact_token_match", S, "think", None, ("<", "", ""), ("t", "", ""),
      ("h", "", ""), ("i", "", ""), ("n", "", ""), ("k>", "", "")),
    d("sglang-continue-test_streaming_returns_empty_when_in_reasoning_and_end_buffered", S, "think", True,
      ("</", "", "")),
    d("vllm-kimi-k2-test_streaming_reasoning_then_content", K2, "kimi-k2", None, ("<think>", "", ""),
      ("step one", "step one", ""), ("</think>", "", ""), ("answer", "", "answer")),
    d("vllm-kimi-k2-test_streaming_tool_section_ends_reasoning", K2, "kimi-k2", None,
      ("<think>thinking", "thinking", ""), ("<|tool_calls_section_begin|>", "",
      "<|tool_calls_section_begin|>")),
    d("sglang-harmony-test_parse_incomplete_block", H, "gpt-oss", None,
      ("<|channel|>analysis<|message|>partial content", "partial content", "")),
    d("sglang-harmony-test_parse_partial_token_suffix", H, "gpt-oss", None,
      ("<|channel|>final<|message|>complete text <|ret", "", "complete text ")),
    d("sglang-harmony-test_parse_incomplete_assistantfinal", H, "gpt-oss", None,
      ("analysis reasoning content assistantfin", "reasoning content", "")),
    d("sglang-harmony-test_text_strategy_commentary_with_hold", H, "gpt-oss", None,
      ("commentary: discussion assistant", "", ": discussion")),
]
# fmt: on


@pytest.mark.parametrize("case", DELTAS)
def test_each_chunk_releases_what_the_peer_releases(case: Deltas) -> None:
    stream = get_reasoning_parser(case.parser).stream(case.thinking)
    for chunk, reasoning, content in case.steps:
        delta = stream.feed(chunk)
        assert (delta.reasoning, delta.content) == (reasoning, content), chunk


def test_every_vector_cites_a_peer_file() -> None:
    sources = {param.values[0].source for param in VECTORS}
    assert all(source.split(" ")[0] in {"sgl-project/sglang", "vllm-project/vllm", "ModelTC/LightLLM"}
               for source in sources)  # fmt: skip
    assert len(VECTORS) == len({param.id for param in VECTORS})
