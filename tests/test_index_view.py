"""The install tests' view of the package index leaves out exactly the wheels pip would skip here
(``tests/integration/index_view.py``): each file name below is kept by the view if and only if
pip's own check (``Wheel.supported``, with the tags pip supports on this interpreter) accepts it,
and every file that is not a wheel is kept. pip is asked in a process of its own: importing pip
turns setuptools' distutils shim off for the rest of the process (a later ``import setuptools``
fails)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.index_view import installable, without_shadowed_sdists

PIP_SAYS = """
import json, sys
from pip._internal.models.wheel import Wheel
from pip._internal.utils.compatibility_tags import get_supported
tags = get_supported()
print(json.dumps({"tags": [str(t) for t in tags],
                  "kept": {name: Wheel(name).supported(tags) for name in json.loads(sys.argv[1])}}))
"""
WHEELS = [
    "celery-5.7.0-py3-none-any.whl",
    "six-1.16.0-py2.py3-none-any.whl",
    "futures-3.4.0-py2-none-any.whl",
    "numpy-2.2.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "numpy-2.2.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "numpy-2.2.0-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl",
    "numpy-2.2.0-cp311-cp311-win_amd64.whl",
    "numpy-2.2.0-cp311-cp311-macosx_14_0_arm64.whl",
    "numpy-2.2.0-cp311-cp311-musllinux_1_2_x86_64.whl",
    "cryptography-46.0.0-cp37-abi3-manylinux_2_28_x86_64.whl",
    "cryptography-46.0.0-cp311-abi3-manylinux_2_34_x86_64.whl",
    "orjson-3.10.0-cp311-cp311-manylinux_2_5_x86_64.manylinux1_x86_64.whl",
    "pydantic_core-2.41.0-pp311-pypy311_pp73-manylinux_2_17_x86_64.whl",
    "greenlet-3.2.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
    "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl",
    "tokenizers-0.22.0-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "tandem_llm-0.2.0-1build-py3-none-any.whl",
    "Old_Name-1.0-CP311-CP311-MANYLINUX1_X86_64.whl",
]


@pytest.fixture(scope="module")
def pip_says() -> tuple[frozenset[str], dict[str, bool]]:
    """The tags pip supports here, and whether it takes each of ``WHEELS``."""
    done = subprocess.run(
        [sys.executable, "-c", PIP_SAYS, json.dumps(WHEELS)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    return frozenset(said["tags"]), dict(said["kept"])


@pytest.mark.parametrize("filename", WHEELS)
def test_a_wheel_is_kept_exactly_when_pip_would_take_it(
    pip_says: tuple[frozenset[str], dict[str, bool]], filename: str
) -> None:
    tags, kept = pip_says
    assert installable(filename, tags) == kept[filename]


@pytest.mark.parametrize(
    "filename",
    ["celery-5.7.0.tar.gz", "old-0.1.zip", "thing-1.0-py2.7.egg", "not-a-wheel.whl", "a-1-x.whl"],
)
def test_every_file_that_is_not_a_readable_wheel_is_kept(filename: str) -> None:
    assert installable(filename, frozenset({"py3-none-any"}))


def test_without_tags_every_file_is_kept() -> None:
    assert installable("numpy-2.2.0-cp311-cp311-win_amd64.whl", None)


def _files(*names: str, **fields: object) -> list[dict[str, object]]:
    return [{"filename": name, **fields} for name in names]


@pytest.mark.parametrize(
    ("files", "kept"),
    [
        pytest.param(
            _files("botocore-1.35.0.tar.gz", "botocore-1.35.0-py3-none-any.whl"),
            ["botocore-1.35.0-py3-none-any.whl"],
            id="a-wheel-of-the-version-shadows-its-sdist",
        ),
        pytest.param(
            _files("botocore-1.34.0.tar.gz", "botocore-1.35.0-py3-none-any.whl"),
            ["botocore-1.34.0.tar.gz", "botocore-1.35.0-py3-none-any.whl"],
            id="an-sdist-of-another-version-stays",
        ),
        pytest.param(
            [
                {"filename": "botocore-1.35.0.tar.gz"},
                {"filename": "botocore-1.35.0-py3-none-any.whl", "yanked": True},
            ],
            ["botocore-1.35.0.tar.gz", "botocore-1.35.0-py3-none-any.whl"],
            id="a-yanked-wheel-shadows-nothing",
        ),
        pytest.param(
            [
                {"filename": "botocore-1.35.0.tar.gz", "requires-python": ">=3.8"},
                {"filename": "botocore-1.35.0-py3-none-any.whl", "requires-python": ">=3.12"},
            ],
            ["botocore-1.35.0.tar.gz", "botocore-1.35.0-py3-none-any.whl"],
            id="a-wheel-for-other-pythons-shadows-nothing",
        ),
        pytest.param(
            _files("python-dateutil-2.8.2.tar.gz", "python_dateutil-2.8.2-py2.py3-none-any.whl"),
            ["python_dateutil-2.8.2-py2.py3-none-any.whl"],
            id="names-compare-canonically",
        ),
        pytest.param(
            _files("botocore-1.35.0.zip", "botocore-1.35-py3-none-any.whl"),
            ["botocore-1.35-py3-none-any.whl"],
            id="versions-compare-normalized",
        ),
        pytest.param(
            _files("weird_name.tar.gz", "botocore-latest.tar.gz", "botocore-1.35.0-py3-none-any.whl"),
            ["weird_name.tar.gz", "botocore-latest.tar.gz", "botocore-1.35.0-py3-none-any.whl"],
            id="an-unreadable-name-stays",
        ),
    ],
)
def test_an_sdist_is_left_out_only_when_a_wheel_pip_ranks_above_it_is_there(
    files: list[dict[str, object]], kept: list[str]
) -> None:
    project = "python-dateutil" if "dateutil" in files[0]["filename"] else "botocore"  # type: ignore[operator]
    assert [f["filename"] for f in without_shadowed_sdists(files, project)] == kept
