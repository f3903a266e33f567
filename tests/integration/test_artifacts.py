"""Large outputs by reference with real workers, a real Redis and a real ``tandem api``: a tool
returns 200 KB, the model reads a needle from its end through ``read_artifact``, and the clients
read the whole artifact back byte-identical; another tenant's token and an unknown handle get the
same 404. Clients are built from a URL and a token, as docs/api.md builds them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from tandem import AsyncClient, Client
from tandem.client.events import ToolResult
from tandem.client.handle import JobHandle
from tandem.client.http.errors import NotFound
from tandem.toolkit.artifacts import artifact_handle
from tests.integration.conftest import _make_cluster
from tests.integration.http_clients.world import FULL, OTHER, TOKENS, ApiProcess, World, spec
from tests.integration.tools import ARTIFACT_TEXT, NEEDLE

HANDLE = artifact_handle(0, 1, ARTIFACT_TEXT)
"""The handle of round 0's first call's output (derived from its text: ``tandem.toolkit.artifacts``)."""
PLAN = [
    [{"name": "report", "args": {}}],
    [{"name": "read_artifact", "args": {"handle": HANDLE, "offset": 199_900, "length": 100}}],
]


@pytest.fixture(scope="module")
def world(redis_base: str) -> Iterator[World]:
    gen = _make_cluster(
        redis_base,
        TANDEM_TOOLKIT="tests.integration.tools:artifact_toolkit",
        TANDEM_API_TOKENS=TOKENS,
    )
    cluster, _, _ = next(gen)
    cluster.start("thinker", "actor", "tools")
    api = ApiProcess(cluster.env)
    try:
        yield World(cluster, api)
    finally:
        api.stop()
        next(gen, None)  # the cluster's teardown checks that every key has a TTL


@pytest.fixture(scope="module")
def job(world: World) -> tuple[str, list[ToolResult]]:
    with Client(world.api.url, token=FULL) as api:
        remote = api.submit(spec("read the report's last line", PLAN))
        results = [e for e in remote.events() if isinstance(e, ToolResult)]
        assert remote.result(timeout=180).status == "completed"
        return remote.id, results


def test_the_model_reads_the_needle_at_the_end_through_read_artifact(
    job: tuple[str, list[ToolResult]],
) -> None:
    _, results = job
    made, page = results
    assert made.name == "report" and made.artifact is not None
    assert (made.artifact.handle, made.artifact.chars, made.artifact.bytes) == (HANDLE, 200_000, 200_000)
    assert NEEDLE not in made.output and HANDLE in made.output
    assert made.output.startswith(ARTIFACT_TEXT[:2000])
    assert page.name == "read_artifact" and page.status == "succeeded" and page.artifact is None
    assert NEEDLE in page.output
    assert page.output.splitlines()[-1] == "[end of the artifact]"


def test_every_client_reads_the_whole_artifact_back_byte_identical(
    world: World, job: tuple[str, list[ToolResult]]
) -> None:
    job_id, _ = job
    with Client(world.api.url, token=FULL) as api:
        assert api.artifact(job_id, HANDLE) == ARTIFACT_TEXT

    async def read() -> str:
        async with AsyncClient(world.api.url, token=FULL) as api:
            return await api.artifact(job_id, HANDLE)

    assert asyncio.run(read()) == ARTIFACT_TEXT
    raw = httpx.get(
        f"{world.api.url}/v1/jobs/{job_id}/artifacts/{HANDLE}",
        headers={"Authorization": f"Bearer {FULL}"},
        timeout=30,
    )
    assert raw.status_code == 200 and raw.content == ARTIFACT_TEXT.encode("utf-8")
    assert raw.headers["content-type"].startswith("text/plain")
    assert raw.headers["Tandem-Artifact-Bytes"] == "200000"
    handle = JobHandle(job_id, world.cluster.store, world.cluster.app)
    assert handle.artifact(HANDLE) == ARTIFACT_TEXT


def test_another_tenant_and_an_unknown_handle_get_the_same_404(
    world: World, job: tuple[str, list[ToolResult]]
) -> None:
    job_id, _ = job
    answers = []
    for token, job_ref, handle in [
        (OTHER, job_id, HANDLE),  # another tenant's job
        (FULL, job_id, "r0-c1-0000000000"),  # an unknown handle
        (FULL, job_id, "not-a-handle"),
        (FULL, "no-such-job", HANDLE),
    ]:
        with Client(world.api.url, token=token) as api, pytest.raises(NotFound) as caught:
            api.artifact(job_ref, handle)
        answers.append((caught.value.code, type(caught.value)))
    assert set(answers) == {("unknown_artifact", NotFound)}
    other = httpx.get(
        f"{world.api.url}/v1/jobs/{job_id}/artifacts/{HANDLE}",
        headers={"Authorization": f"Bearer {OTHER}"},
        timeout=30,
    )
    unknown = httpx.get(
        f"{world.api.url}/v1/jobs/{job_id}/artifacts/r0-c1-0000000000",
        headers={"Authorization": f"Bearer {FULL}"},
        timeout=30,
    )
    assert other.status_code == unknown.status_code == 404
    assert other.json()["error"]["code"] == unknown.json()["error"]["code"] == "unknown_artifact"
    assert "report" not in other.text and ARTIFACT_TEXT[:100] not in other.text
