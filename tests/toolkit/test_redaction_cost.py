"""Redaction stays linear in the text whatever it holds (figures: ``python -m bench redaction``).

Every text here would take the redaction before issue 22 hours or years: nested repetitions backtracked
over runs of ``a-a-a-…`` (quadratic: 40 KB took 28 s), and each of 10,000 known secrets found in a
text cost a pass over all of it. The timeout only turns a hang into a failure; it is no speed check.
"""

from __future__ import annotations

import random
import string

import pytest

from tandem.toolkit import redaction
from tandem.toolkit.redaction import MASK, WINDOW, SecretRegistry, redact, redact_head, register_secret

MB = 1_000_000


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> SecretRegistry:
    """An empty process-wide registry for the test (10,000 test secrets must not outlive it)."""
    registry = SecretRegistry()
    monkeypatch.setattr(redaction, "secrets", registry)
    return registry


def _secrets(count: int, rnd: random.Random) -> list[str]:
    alphabet = string.ascii_letters + string.digits
    return ["sk-" + "".join(rnd.choices(alphabet, k=rnd.randint(12, 40))) for _ in range(count)]


@pytest.mark.timeout(300)
def test_fifty_megabytes_with_10000_known_secrets_and_hostile_runs(fresh_registry: SecretRegistry) -> None:
    rnd = random.Random(22)
    known = _secrets(10_000, rnd)
    register_secret(*known)
    filler = "".join(rnd.choices("acdefghijklmnopqrstuvwxyz  \n", k=4000))  # no "b": no "basic …"
    hostile = [  # (text, what it becomes)
        ("a-" * (2 * MB) + " password=hunter2-hunter2", "a-" * (2 * MB) + f" password={MASK}"),
        ("a." * (2 * MB) + "x://someone:pw-in-a-url@host/", "a." * (2 * MB) + f"x://{MASK}@host/"),
        ("?" + "a_" * MB + "token=qs-token-1234", "?" + "a_" * MB + f"token={MASK}"),
        ("Z" * (4 * MB) + " Bearer " + "b" * (2 * MB), "Z" * (4 * MB) + f" Bearer {MASK}"),
    ]
    parts: list[str] = []
    expected: list[str] = []
    for i, secret in enumerate(known):
        gap = filler[: rnd.randint(100, 4000)]
        parts += (gap, secret)
        expected += (gap, MASK)
        if i % 2500 == 0:
            parts.append(hostile[i // 2500][0] + "\n")
            expected.append(hostile[i // 2500][1] + "\n")
    padding = "x" * (50 * MB - sum(map(len, parts)))
    text = "".join(parts) + padding
    assert len(text) == 50 * MB

    assert redact(text) == "".join(expected) + padding


def test_a_value_longer_than_a_window_is_masked_whole() -> None:
    text = "api_key=" + "v" * (3 * WINDOW) + " after"
    assert redact(text) == f"api_key={MASK} after"


def test_a_secret_across_the_edge_of_a_window_is_found(fresh_registry: SecretRegistry) -> None:
    secret = "sk-" + "q" * 30
    register_secret(*_secrets(200, random.Random(1)), secret)  # enough for the indexed search
    text = "x" * (WINDOW - 10) + secret + "y" * WINDOW
    assert redact(text) == "x" * (WINDOW - 10) + MASK + "y" * WINDOW


@pytest.mark.parametrize("count", [1, 40, 3000], ids=["one", "few", "many"])
def test_every_occurrence_of_every_secret_is_masked(fresh_registry: SecretRegistry, count: int) -> None:
    """Secrets of every length class (4 to 70 characters), touching, overlapping and nested."""
    rnd = random.Random(count)
    known = ["".join(rnd.choices("abcd", k=rnd.randint(4, 70))) for _ in range(count)]
    register_secret(*known)
    for _ in range(20):
        text = "".join(rnd.choice([*known[:50], "-", "  ", "xyz", "ab"]) for _ in range(60))
        out = redact(text)
        assert not any(secret in out for secret in known), text


def test_the_head_of_a_long_text_reads_only_a_margin_past_the_cut(
    monkeypatch: pytest.MonkeyPatch, fresh_registry: SecretRegistry
) -> None:
    secret = "sk-straddling-the-cut-0001"
    register_secret(secret)
    read: list[int] = []
    original = redaction.redact

    def counting(text: str, *args: object, **kwargs: object) -> str:
        read.append(len(text))
        return original(text, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(redaction, "redact", counting)
    text = "x" * 95 + secret + "y" * (50 * MB)

    shown = redact_head(text, 100)

    assert shown == "x" * 95 + MASK + "y" * 2  # the secret the cut splits is masked whole
    assert read and max(read) <= 100 + redaction.head_margin()


def test_redact_head_without_a_limit_redacts_everything(fresh_registry: SecretRegistry) -> None:
    assert redact_head("token: abcdef " * 3, 0) == "token: *** " * 3
