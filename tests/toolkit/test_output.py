"""``tandem.toolkit.output``: a tool's value rendered only as far as it is shown."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest

from tandem.toolkit.output import bytes_text_head, iter_json, render_head


class Odd:
    def __str__(self) -> str:
        return "odd"

    def __repr__(self) -> str:  # the test's id: the same in every pytest process (xdist)
        return "Odd()"


@pytest.mark.parametrize(
    "value",
    [
        None,
        0,
        -1.5,
        float("nan"),
        float("inf"),
        True,
        "héllo \"quoted\" \\ \n",
        [],
        {},
        (),
        [1, [2, {"a": None, "b": [True, False]}]],
        {"k": {"n": 1}, 3: "int key", 2.5: "float key", True: "bool key", None: "none key"},
        {"bytes": b"x", "odd": Odd(), "nested": [Odd(), (1, 2)]},
    ],
    ids=repr,
)
def test_iter_json_writes_what_json_dumps_writes(value: Any) -> None:
    assert "".join(iter_json(value)) == json.dumps(value, ensure_ascii=False, default=str)


def test_a_value_nested_past_the_recursion_limit_is_shown_up_to_the_cut() -> None:
    deep: list[Any] = []
    inner = deep
    for _ in range(200_000):
        inner.append([])
        inner = inner[0]
    text, size = render_head(deep, 8000)
    assert (text, size) == ("[" * 8000, None)  # the cut, and "more than" rendered


def test_a_value_that_contains_itself_is_shown_by_its_text() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    assert render_head(loop, 100) == ("[1, [...]]", 10)
    with pytest.raises(ValueError, match="Circular"):
        "".join(iter_json(loop))


class Huge:
    """Not JSON; its text is 20 million characters."""

    def __str__(self) -> str:
        return "O" * 20_000_000

    def __repr__(self) -> str:
        return "Huge()"


HUGE_VALUES = {
    "string-in-dict": lambda: {"log": "L" * 20_000_000, "lines": 20},
    "bytes": lambda: b"B" * 20_000_000,
    "bytes-with-quote": lambda: b"B" * 10_000 + b"'" + b"B" * 20_000_000,
    "bytes-in-list": lambda: [1, b"\x00" * 20_000_000],
    "string-key": lambda: {"K" * 20_000_000: 1},
    "bytes-key": lambda: {b"K" * 20_000_000: 1},
    "not-json": lambda: Huge(),
}


@pytest.mark.parametrize("make", HUGE_VALUES.values(), ids=HUGE_VALUES.keys())
def test_a_huge_value_costs_what_its_head_costs(make: Any) -> None:
    """A 20 MB string inside a value, ``bytes`` and the text of a value that is not JSON are
    encoded from their head only: rendering allocates memory in proportion to the limit, not to
    the value (each character encoded is allocated once, so this is the work done while holding
    the GIL: a lease keeper thread of the process would otherwise wait for it). The head is the
    full rendering's head."""
    value = make()
    tracemalloc.start()
    try:
        text, size = render_head(value, 8000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    huge_text = 20_000_000 if isinstance(value, Huge) else 0  # the tool's own __str__ makes it
    assert peak - huge_text < 1_000_000, peak
    assert size is None and len(text) == 8000
    assert text == "".join(iter_json(value))[:8000]  # the rendering of all of it, as json.dumps's


@pytest.mark.parametrize(
    "value",
    [b"", b"plain", b"it's", b'say "hi"', b"both ' and \"", b"\x00\xff\n\t\\", b"'" * 50 + b'"', b'"' * 50],
    ids=repr,
)
@pytest.mark.parametrize("cut", [1, 3, 10, 100])
def test_the_head_of_bytes_is_the_head_of_their_text(value: bytes, cut: int) -> None:
    assert bytes_text_head(value, cut)[:cut] == str(value)[:cut]
    assert len(bytes_text_head(value, cut)) >= min(cut, len(str(value)))
