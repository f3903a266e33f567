"""The README's and the guides' examples run, their links lead somewhere, and what they name exists.

The README is the front page and ``docs/*.md`` are the guides. Every ```` ```python ```` block of
them runs, each in a fresh namespace, unless the line before its fence says why not:
``<!-- not run: needs Redis and running workers -->``. Such a block is still compiled and its import
statements run, so a name the docs import must exist (the integration tests run the same calls
against local stand-ins). Every link between the pages, ``bench/RESULTS.md`` and the repository must
point to a file that exists and, with ``#anchor``, to a heading of that file.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
GUIDES = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *GUIDES]
LINKED_PAGES = [*PAGES, ROOT / "bench" / "RESULTS.md"]
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>.*?)\s*-->")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int  # of the opening fence, from 1
    language: str
    code: str
    not_run: str | None  # the reason given on the line before the fence, if any

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``; a fence may be indented (inside a list item)."""
    lines = page.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = re.match(r"^(\s*)```(\w*)", lines[i])
        if not opening:
            i += 1
            continue
        indent, language = opening.group(1), opening.group(2)
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        body = [line[len(indent) :] if line.startswith(indent) else line for line in lines[i + 1 : end]]
        marker = NOT_RUN.search(lines[i - 1]) if i > 0 else None
        reason = marker.group("reason") if marker else None
        blocks.append(Block(page, i + 1, language, "\n".join(body) + "\n", reason))
        i = end + 1
    return blocks


def _prose(page: Path) -> str:
    """The page without its fenced blocks (links and headings in code are not links or headings)."""
    text = page.read_text()
    return re.sub(r"^\s*```.*?^\s*```[ \t]*$", "", text, flags=re.S | re.M)


PYTHON = [b for page in PAGES for b in _blocks(page) if b.language == "python"]
RUNNABLE = [b for b in PYTHON if b.not_run is None]
SHOWN = [b for b in PYTHON if b.not_run is not None]


def test_the_in_process_quickstart_runs() -> None:
    block = next(b for b in _blocks(ROOT / "README.md") if b.language == "python" and "demo_model" in b.code)
    assert block.not_run is None
    namespace: dict[str, object] = {}
    exec(compile(block.code, block.where, "exec"), namespace)
    outcome = namespace["outcome"]
    assert outcome.status == "completed"  # type: ignore[attr-defined]


def test_the_pages_hold_examples_that_run_and_say_why_the_others_do_not() -> None:
    assert len(RUNNABLE) >= 10, [b.where for b in RUNNABLE]
    assert {b.page.name for b in RUNNABLE} >= {"README.md", "in-process.md", "approvals.md", "toolkit.md"}
    for block in SHOWN:
        assert block.not_run, f"{block.where}: say why the example is not run"


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.where for b in RUNNABLE])
def test_a_python_example_runs(block: Block) -> None:
    exec(compile(block.code, block.where, "exec"), {"__name__": "docs_example"})


@pytest.mark.parametrize("block", SHOWN, ids=[b.where for b in SHOWN])
def test_an_example_not_run_compiles_and_its_imports_exist(block: Block) -> None:
    tree = ast.parse(block.code, block.where)
    imports: list[ast.stmt] = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    exec(compile(ast.Module(body=imports, type_ignores=[]), block.where, "exec"), {})


def test_every_yaml_example_parses() -> None:
    examples = [b for page in PAGES for b in _blocks(page) if b.language == "yaml"]
    assert len(examples) >= 3
    for block in examples:
        assert isinstance(yaml.safe_load(block.code), dict), block.where


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup and punctuation dropped, lower case, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", _prose(page), re.M):
        slug = _slug(heading)
        n = 0
        while (candidate := slug if n == 0 else f"{slug}-{n}") in anchors:
            n += 1
        anchors.add(candidate)
    return anchors


def _links(page: Path) -> list[str]:
    prose = re.sub(r"`[^`\n]*`", "", _prose(page))  # code spans hold no links
    return re.findall(r"\]\(([^)\s]+)\)", prose)


def test_the_slugs_follow_githubs_rule() -> None:
    assert _slug("Function calls (prompt mode)") == "function-calls-prompt-mode"
    assert _slug("Scale, third round") == "scale-third-round"
    assert _slug("`tandem api` and the job console") == "tandem-api-and-the-job-console"
    assert _slug("Model hosts: pointing each role") == "model-hosts-pointing-each-role"


@pytest.mark.parametrize("page", LINKED_PAGES, ids=[str(p.relative_to(ROOT)) for p in LINKED_PAGES])
def test_every_link_points_to_a_file_and_heading_that_exist(page: Path) -> None:
    broken = []
    for link in _links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", link):  # http:, https:, mailto:
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no file {target}")
        elif anchor and (target.suffix != ".md" or anchor not in _anchors(target)):
            broken.append(f"{link}: no heading #{anchor} in {target.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_readme_links_every_guide_and_the_benchmark_history() -> None:
    linked = {(ROOT / link.partition("#")[0]).resolve() for link in _links(ROOT / "README.md")}
    assert len(GUIDES) >= 6
    missing = [g.name for g in GUIDES if g.resolve() not in linked]
    assert not missing, f"README.md links no page {missing}"
    assert (ROOT / "bench" / "RESULTS.md").resolve() in linked


def test_the_readme_is_a_front_page() -> None:
    assert len(README.splitlines()) <= 400


def test_every_test_the_docs_name_exists() -> None:
    sources = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("*.py"))
    defined = set(re.findall(r"^\s*(?:async )?def (test_\w+)", sources, re.M))
    missing = []
    for page in PAGES:
        text = page.read_text()
        for path in re.findall(r"`(tests/[\w/]+\.py)(?:::\w+)?`", text):
            if not (ROOT / path).exists():
                missing.append(f"{page.name}: {path}")
        for name in re.findall(r"`(test_\w+)`", text):
            if name not in defined:
                missing.append(f"{page.name}: {name}")
    assert not missing, missing


def test_every_setting_is_in_the_configuration_reference() -> None:
    settings = (ROOT / "broker_config" / "settings.py").read_text()
    reference = (ROOT / "docs" / "configuration.md").read_text()
    names = set(re.findall(r"\"((?:TANDEM|FLOWER)_[A-Z_]+)\"", settings))
    role_suffixes = set(re.findall(r"f\"\{p\}([A-Z_]+)\"", settings))
    assert {"TANDEM_BROKER_URL", "FLOWER_BASIC_AUTH"} <= names and {"MODEL", "RPM"} <= role_suffixes
    missing = sorted(n for n in names if f"`{n}`" not in reference)
    missing += [
        f"TANDEM_<ROLE>_{s}"
        for s in sorted(role_suffixes)
        if not any(f"`TANDEM_{role}_{s}`" in reference for role in ("<ROLE>", "THINKER", "ACTOR"))
    ]
    assert not missing, f"docs/configuration.md does not list {missing}"


def test_the_two_commands_exist_and_ci_runs_the_test_command() -> None:
    commands = re.findall(r"^make (\w+)", README, re.M)
    assert commands[:2] == ["demo", "test"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "make --no-print-directory test" in (ROOT / ".ci" / "run").read_text()


def test_docker_compose_has_redis_with_aof_and_a_password_one_service_per_role_and_flower_with_auth() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert "--appendonly" in services["redis"]["command"]
    for role in ("thinker", "actor", "tools"):
        assert services[role]["command"][:3] == ["tandem", "worker", role]
        assert services[role]["image"] == services["flower"]["image"]
    flower = services["flower"]
    assert flower["environment"]["FLOWER_BASIC_AUTH"].startswith("${FLOWER_BASIC_AUTH:?")  # no default
    assert not any("--basic-auth" in part for part in flower["command"])  # never on the command line
    assert all(str(p).startswith("127.0.0.1:") for p in flower["ports"])
    assert not any("API_KEY" in k or "MODEL" in k or "SECRETS" in k for k in flower["environment"])
    assert "--requirepass" in services["redis"]["command"] and "ports" not in services["redis"]
    for role in ("thinker", "actor", "tools"):
        assert ":${REDIS_PASSWORD:?" in services[role]["environment"]["TANDEM_BROKER_URL"]
