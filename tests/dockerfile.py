"""The repository's ``Dockerfile`` read as data, for the tests that run its lines without Docker.

Only the instructions the image uses are read (``ENV``, ``WORKDIR``, ``COPY``, ``RUN``, ``USER``,
``CMD``); a line continued with ``\\`` is joined first, and comments are dropped.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


@dataclass
class Dockerfile:
    """The instructions of one Dockerfile that the tests run or check."""

    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    copies: list[tuple[list[str], str]] = field(default_factory=list)
    """Each ``COPY``: its sources (relative to the build context) and its destination."""
    runs: list[str] = field(default_factory=list)
    user: str = "root"
    cmd: list[str] = field(default_factory=list)

    @property
    def pip_install(self) -> list[str]:
        """The arguments after ``pip install`` of the one ``RUN`` that installs tandem."""
        found = []
        for run in self.runs:
            for command in re.split(r"\s*&&\s*", run):
                words = shlex.split(command)
                if words[:2] == ["pip", "install"]:
                    found.append(words[2:])
        assert len(found) == 1, f"the Dockerfile should install with one `pip install`, found {found}"
        return found[0]

    @property
    def uid(self) -> int:
        """The uid ``useradd`` gives the image's user (``--uid``)."""
        for run in self.runs:
            for command in re.split(r"\s*&&\s*", run):
                words = shlex.split(command)
                if words[:1] == ["useradd"] and words[-1] == self.user and "--uid" in words:
                    return int(words[words.index("--uid") + 1])
        raise AssertionError(f"no `useradd --uid N {self.user}` in the Dockerfile")


def read(path: Path = DOCKERFILE) -> Dockerfile:
    """Parse ``path``."""
    text = re.sub(r"\\\n", " ", path.read_text())
    image = Dockerfile()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                image.env[key] = value
        elif instruction == "WORKDIR":
            image.workdir = rest.strip()
        elif instruction == "COPY":
            *sources, destination = shlex.split(rest)
            image.copies.append((sources, destination))
        elif instruction == "RUN":
            image.runs.append(rest.strip())
        elif instruction == "USER":
            image.user = rest.strip()
        elif instruction == "CMD":
            image.cmd = json.loads(rest)
    return image


def ignored(name: str) -> bool:
    """Whether ``.dockerignore`` keeps a file or folder of this base name out of the build context
    (its ``**/<pattern>`` and top-level patterns, matched on the name: enough for this repository)."""
    patterns = [
        line.strip().removeprefix("**/")
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return any(fnmatch.fnmatch(name, pattern) for pattern in patterns)


def build_context(image: Dockerfile, target: Path) -> Path:
    """Lay out in ``target`` what the image's ``COPY`` lines put in its ``WORKDIR`` (symbolic links
    kept as links, as ``COPY`` keeps them), and return it."""
    target.mkdir(parents=True, exist_ok=True)
    for sources, destination in image.copies:
        for source in sources:
            origin = ROOT / source
            if destination.endswith("/") or destination in (".", "./"):
                placed = target / destination / origin.name
            else:
                placed = target / destination
            if origin.is_dir():
                shutil.copytree(
                    origin,
                    placed,
                    symlinks=True,
                    ignore=lambda _dir, names: [n for n in names if ignored(n)],
                )
            else:
                placed.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, placed)
    return target
