"""No import cycles inside a package (``python -m tests.import_graph`` prints them).

An import inside a function counts like any other (it closes the cycle when the function runs);
only ``if TYPE_CHECKING:`` imports are left out. Packages that still have cycles are expected to
fail (``strict``: once a package's cycles are gone, its mark must go too).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.import_graph import PACKAGES, cycles, graph, package_cycles

STILL_CYCLIC: dict[str, str] = {}


@pytest.mark.parametrize(
    "package",
    [
        pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=STILL_CYCLIC[p]))
        if p in STILL_CYCLIC
        else p
        for p in PACKAGES
    ],
)
def test_a_package_has_no_import_cycle(package: str) -> None:
    assert package_cycles(package) == []


def test_no_cycle_runs_across_packages() -> None:
    crossing = [c for c in cycles(graph()) if len({m.split(".")[1] for m in c}) > 1]
    assert crossing == []


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_graph_sees_imports_in_functions_and_skips_type_checking(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "reasoner/__init__.py": "",
            "reasoner/a.py": "from tandem.reasoner import b\n",
            "reasoner/b.py": "def later():\n    from tandem.reasoner.a import x\n",
            "reasoner/c.py": "import typing\nif typing.TYPE_CHECKING:\n    from tandem.reasoner import d\n",
            "reasoner/d.py": "import tandem.reasoner.c\n",
            "reasoner/sub/__init__.py": "",
            "reasoner/sub/e.py": "from ..sub import f\n",
            "reasoner/sub/f.py": "from . import e\n",
        },
    )
    for package in PACKAGES[1:]:
        _write(tmp_path, {f"{package}/__init__.py": ""})

    edges = graph(tmp_path)

    assert edges["tandem.reasoner.b"] == {"tandem.reasoner.a"}  # the function body's import counts
    assert edges["tandem.reasoner.c"] == set()  # the TYPE_CHECKING one does not
    assert edges["tandem.reasoner.sub.e"] == {"tandem.reasoner.sub.f"}  # relative imports resolve
    assert package_cycles("reasoner", tmp_path) == [
        ["tandem.reasoner.a", "tandem.reasoner.b"],
        ["tandem.reasoner.sub.e", "tandem.reasoner.sub.f"],
    ]
