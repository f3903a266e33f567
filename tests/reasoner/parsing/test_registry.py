"""The names parsers are known by, and the public surface of ``tandem.reasoner.parsing``."""

from __future__ import annotations

import pytest

from tandem.reasoner import parsing
from tandem.reasoner.errors import ConfigurationError
from tandem.reasoner.parsing import REASONING_PARSERS, ReasoningParser, get_reasoning_parser

CONTRACT_NAMES = (
    "deepseek-r1",
    "deepseek-v3",
    "qwen3",
    "glm45",
    "kimi",
    "kimi-k2",
    "gpt-oss",
    "none",
    "think",
)


@pytest.mark.parametrize("name", CONTRACT_NAMES)
def test_every_contract_name_resolves(name: str) -> None:
    parser = get_reasoning_parser(name)
    assert isinstance(parser, ReasoningParser)
    assert parser.name == name
    assert get_reasoning_parser(name) is parser


def test_reasoning_parsers_lists_exactly_the_contract_names() -> None:
    assert sorted(REASONING_PARSERS) == sorted(CONTRACT_NAMES)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("qwen-3", id="unknown-name"),
        pytest.param("Qwen3", id="wrong-case"),
        pytest.param("", id="empty"),
    ],
)
def test_unknown_name_is_a_configuration_error(name: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        get_reasoning_parser(name)
    message = str(caught.value)
    assert repr(name) in message
    assert all(valid in message for valid in REASONING_PARSERS)


def test_exports_are_complete() -> None:
    public = {name for name in vars(parsing) if not name.startswith("_")}
    modules = {"base", "harmony", "harmony_format", "harmony_reader", "plain", "registry", "think_tags"}
    assert set(parsing.__all__) == public - modules - {"annotations"}


def test_parsing_does_not_import_celery() -> None:
    import subprocess
    import sys

    code = "import sys, tandem.reasoner.parsing; print('celery' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
