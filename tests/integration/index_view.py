"""The package index as pip sees it on this machine, served on loopback to the install tests' pip.

The pip of a fresh Python 3.11 virtual environment (23.2) reads every file of every release on a
project's index page and checks each wheel's tags against the ~900 tags it supports: for the
``worker`` extra's ~100 projects that is ~100,000 files and some 20 s of CPU per install, most of
an install's time, spent on wheels for other platforms and Pythons. This view serves the upstream
index's pages (the PEP 691 JSON form) without the wheels that match none of the tags pip supports
here, which pip would skip itself (its ``Wheel.supported``), nor the source distributions that a
wheel of their version outranks (``without_shadowed_sdists``), which pip would never pick: pip
resolves, downloads and installs the same files, from the same URLs, as from the index itself,
with a sixth of the files to read.

Everything else passes as it came: the other source distributions, yanked files, ``requires-python``, the
hashes and metadata fields, a page that is not JSON, an error status. A page is fetched once per
test session (kept in the session's folder, shared by its processes).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

JSON_PAGE = "application/vnd.pypi.simple.v1+json"
DEFAULT_UPSTREAM = "https://pypi.org/simple"
ATTEMPTS = 3


def supported_tags(python: Path) -> list[str] | None:
    """The tags the pip of ``python``'s environment installs wheels for (``py-abi-platform``), or
    None when that pip does not say (the view then leaves every file in)."""
    code = (
        "import json\nfrom pip._internal.utils.compatibility_tags import get_supported\n"
        "print(json.dumps([str(t) for t in get_supported()]))"
    )
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, check=False)
    return list(json.loads(done.stdout)) if done.returncode == 0 else None


def installable(filename: str, tags: frozenset[str] | None) -> bool:
    """Whether pip could pick ``filename``: any file but a wheel, a wheel whose name it cannot
    read (pip reports it), or a wheel one of whose tags it supports (any, without ``tags``)."""
    if tags is None or not filename.endswith(".whl"):
        return True
    fields = filename[: -len(".whl")].split("-")
    if len(fields) < 5:
        return True
    pythons, abis, platforms = (field.lower().split(".") for field in fields[-3:])
    return any(f"{p}-{a}-{q}" in tags for p in pythons for a in abis for q in platforms)


def _version(filename: str, project: str) -> Version | None:
    """The version a wheel's or a source distribution's file name states (None if unreadable)."""
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        name, version = parse_sdist_filename(filename)
    except (InvalidSdistFilename, InvalidWheelFilename, InvalidVersion):
        return None
    return version if canonicalize_name(name) == canonicalize_name(project) else None


def without_shadowed_sdists(files: list[dict[str, Any]], project: str) -> list[dict[str, Any]]:
    """``files`` (a JSON page's, after ``installable``) without the source distributions of a
    version that also has a wheel pip takes here, not yanked, with the same ``requires-python``:
    pip ranks a supported wheel above the source distribution of its version (``CandidateEvaluator``:
    after hashes, yanking and ``--prefer-binary``, the version, then the wheel's tag, which no
    source distribution has), so it never picks one of those; it still reads, parses and sorts
    each (half of botocore's and boto3's 9,000 files). Any file whose name it cannot read stays."""
    wheels: set[tuple[Version, object]] = set()
    for f in files:
        if f["filename"].endswith(".whl") and not f.get("yanked"):
            version = _version(f["filename"], project)
            if version is not None:
                wheels.add((version, f.get("requires-python")))
    kept = []
    for f in files:
        if not f["filename"].endswith(".whl"):
            version = _version(f["filename"], project)
            if version is not None and (version, f.get("requires-python")) in wheels:
                continue
        kept.append(f)
    return kept


def upstream_index(python: Path) -> str:
    """The index pip uses when told nothing else: ``PIP_INDEX_URL``, pip's configured
    ``index-url``, or the public index."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"].rstrip("/")
    done = subprocess.run(
        [str(python), "-m", "pip", "config", "get", "global.index-url"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return (done.stdout.strip() if done.returncode == 0 else "") or DEFAULT_UPSTREAM


class IndexView:
    """The view, on a free loopback port, in a thread of this process."""

    def __init__(self, upstream: str, tags: list[str] | None, pages: Path) -> None:
        self.upstream = upstream.rstrip("/")
        self.tags = None if tags is None else frozenset(t.lower() for t in tags)
        self.pages = pages
        pages.mkdir(parents=True, exist_ok=True)
        view = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, kind, body = view.page(self.path)
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, name="index-view", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/simple"

    def page(self, path: str) -> tuple[int, str, bytes]:
        """The status, content type and body for ``path`` (``/simple/<project>/``)."""
        name = path.removeprefix("/simple").strip("/").replace("/", "_") or "_root"
        kept = self.pages / f"{name}.json"
        if kept.exists():
            return 200, JSON_PAGE, kept.read_bytes()
        status, kind, body = self._fetch(path.removeprefix("/simple"))
        if status != 200 or not kind.startswith(JSON_PAGE):
            return status, kind, body
        data = json.loads(body)
        files = [f for f in data.get("files", []) if installable(f["filename"], self.tags)]
        data["files"] = without_shadowed_sdists(files, str(data.get("name", name)))
        body = json.dumps(data).encode()
        part = kept.with_name(f"{kept.name}.{os.getpid()}.{threading.get_ident()}")
        part.write_bytes(body)
        part.replace(kept)
        return 200, JSON_PAGE, body

    def _fetch(self, rest: str) -> tuple[int, str, bytes]:
        request = urllib.request.Request(f"{self.upstream}{rest}", headers={"Accept": JSON_PAGE})
        for attempt in range(ATTEMPTS):
            try:
                with urllib.request.urlopen(request, timeout=120) as reply:
                    return reply.status, reply.headers.get("Content-Type", ""), reply.read()
            except urllib.error.HTTPError as error:
                if error.code < 500 or attempt == ATTEMPTS - 1:
                    return error.code, error.headers.get("Content-Type", "text/plain"), error.read()
            except OSError as error:
                if attempt == ATTEMPTS - 1:
                    return 502, "text/plain", f"{self.upstream}{rest}: {error}".encode()
            time.sleep(1 + attempt)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
