"""``tandem.toolkit.output``: a tool's value rendered only as far as it is shown."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tandem.toolkit.output import iter_json, render_head


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
