"""Breaking tests of large tool outputs kept as artifacts (issue 34), written from README.md,
docs/artifacts.md, docs/api.md, docs/events.md and docs/configuration.md alone, against real
``celery worker`` processes, a real Redis and a real ``tandem api``; the HTTP clients are built
from a URL and a token as docs/api.md builds them.

The module's job (``job``): round 0 returns a 3,000-character page of 3-byte UTF-8 (8,960 bytes,
over ``TANDEM_ARTIFACT_BYTES``) and a 20,000-character page whose needle sits at its end; round 1
pages through both with ``read_artifact`` and asks for what does not exist; round 2 returns a page
holding credentials 15,000 characters in.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tandem import Client
from tandem.client.handle import JobHandle
from tandem.client.http.errors import NotFound, Unauthorized
from tests.integration.breaking_context_tools import (
    BEARER,
    NEEDLE,
    PASSWORD,
    WIDE_TEXT,
    handle_of,
    page_text,
)
from tests.integration.conftest import RESULT_SECONDS, _make_cluster
from tests.integration.http_clients.world import ApiProcess, World
from tests.integration.plan_model import goal_with_plan

pytestmark = pytest.mark.integration

FULL = "breaking-artifacts-full-token-01"
OTHER = "breaking-artifacts-other-tenant1"
NO_READ = "breaking-artifacts-no-read-scope"
SCOPES = ["submit", "read", "control", "approve"]
TOKENS = json.dumps(
    {
        FULL: {"tenant": "team-a", "scopes": SCOPES},
        OTHER: {"tenant": "team-b", "scopes": SCOPES},
        NO_READ: {"tenant": "team-a", "scopes": ["submit", "control"]},
    }
)
MEMORY_TTL = 115
"""Seconds an ended job's keys live: above the broker's visibility timeout of this world
(``TANDEM_TASK_TIME_LIMIT`` 30 + 4 x ``TANDEM_LEASE_SECONDS`` 5 + 60 = 110)."""
PAGE0 = page_text(0, 20)
WIDE = handle_of(0, 1, WIDE_TEXT)
BIG = handle_of(0, 2, PAGE0)
PLAN = [
    [{"name": "wide_page", "args": {"n": 1}}, {"name": "page", "args": {"n": 0, "kb": 20}}],
    [
        {"name": "read_artifact", "args": {"handle": BIG, "offset": 19_900, "length": 100}},
        {"name": "read_artifact", "args": {"handle": WIDE, "offset": 2_990, "length": 10}},
        {"name": "read_artifact", "args": {"handle": "r0-c9-0000000000", "offset": 0, "length": 10}},
        {"name": "read_artifact", "args": {"handle": BIG, "offset": 20_000, "length": 10}},
        {"name": "read_artifact", "args": {"handle": BIG, "offset": -1, "length": 10}},
        {"name": "read_artifact", "args": {"handle": BIG, "offset": 0, "length": -5}},
        {"name": "read_artifact", "args": {"handle": BIG, "offset": 0, "length": 0}},
        {"name": "read_artifact", "args": {"handle": WIDE, "offset": 0, "length": 0}},
        {"name": "read_artifact", "args": {"handle": "#bytes", "offset": 0, "length": 10}},
    ],
    [{"name": "secret_page", "args": {}}],
]


@pytest.fixture(scope="module")
def world(redis_base: str) -> Iterator[World]:
    gen = _make_cluster(
        redis_base,
        TANDEM_TOOLKIT="tests.integration.breaking_context_tools:toolkit",
        TANDEM_API_TOKENS=TOKENS,
        TANDEM_MEMORY_TTL=str(MEMORY_TTL),
        TANDEM_TASK_TIME_LIMIT="30",
        TANDEM_LEASE_SECONDS="5",
        TANDEM_TOOL_TIMEOUT="30",
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
def job(world: World) -> tuple[str, list[Any]]:
    with Client(world.api.url, token=FULL) as api:
        remote = api.submit({"goal": goal_with_plan("read the archive", PLAN), "max_rounds": 6})
        results = [e for e in remote.events() if e.type == "tool_result"]
        outcome = remote.result(timeout=RESULT_SECONDS)
    assert outcome.status == "completed", outcome
    return remote.id, results


def result_of(results: list[Any], round_: int, index: int) -> Any:
    (found,) = [r for r in results if (r.round, r.index) == (round_, index)]
    return found


def get(world: World, token: str, job_id: str, handle: str) -> httpx.Response:
    return httpx.get(
        f"{world.api.url}/v1/jobs/{job_id}/artifacts/{handle}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def test_an_output_over_the_byte_limit_reaches_the_model_as_a_preview_and_a_handle(
    job: tuple[str, list[Any]],
) -> None:
    """docs/artifacts.md: "An output longer than `TANDEM_ARTIFACT_BYTES` (UTF-8 bytes, 8000 by
    default) is kept whole as an artifact ... the model reads a preview instead: the output's head,
    then one line with the artifact's handle, its total size and how to read on"; "The preview is
    the output's first quarter of `TANDEM_MAX_OUTPUT_CHARS` characters (2,000 by default)"."""
    _, results = job
    big = result_of(results, 0, 2)
    assert big.artifact is not None and big.artifact.handle == BIG
    assert (big.artifact.chars, big.artifact.bytes) == (20_000, 20_000)
    assert big.output.startswith(PAGE0[:2000]) and PAGE0[:2001] not in big.output
    assert NEEDLE not in big.output
    last = big.output.splitlines()[-1]
    assert BIG in last and "20000 characters (20000 bytes)" in last, last
    assert f"read_artifact(handle='{BIG}', offset=2000" in last, last


def test_an_output_of_few_characters_but_many_bytes_is_kept_and_read_back_byte_for_byte(
    world: World, job: tuple[str, list[Any]]
) -> None:
    """docs/artifacts.md: outputs "longer than this in UTF-8 bytes" are kept; over HTTP "the text as
    UTF-8 (`text/plain`), byte for byte as kept, with `Tandem-Artifact-Chars` and
    `Tandem-Artifact-Bytes` headers"."""
    job_id, results = job
    wide = result_of(results, 0, 1)
    assert wide.artifact is not None and wide.artifact.handle == WIDE
    assert (wide.artifact.chars, wide.artifact.bytes) == (3_000, 8_960)
    assert wide.output.startswith(WIDE_TEXT[:2000]) and "WIDE-END" not in wide.output
    answer = get(world, FULL, job_id, WIDE)
    assert answer.status_code == 200
    assert answer.content == WIDE_TEXT.encode("utf-8")
    assert answer.headers["content-type"].startswith("text/plain")
    assert (answer.headers["Tandem-Artifact-Chars"], answer.headers["Tandem-Artifact-Bytes"]) == (
        "3000",
        "8960",
    )
    with Client(world.api.url, token=FULL) as api:
        assert api.artifact(job_id, WIDE) == WIDE_TEXT
        assert api.artifact(job_id, BIG) == PAGE0


def test_read_artifact_pages_by_characters_framed_and_fails_for_what_does_not_exist(
    job: tuple[str, list[Any]],
) -> None:
    """docs/artifacts.md: one call returns a page "framed by where it is and where the next page
    starts" (`[artifact '<handle>': characters 199900 to 200000 of 200000]` ... `[end of the
    artifact]`); "It fails, saying what to ask instead, for a handle the job does not hold, an
    `offset` at or past the end, a negative `offset` or `length`"."""
    _, results = job
    end = result_of(results, 1, 1)
    assert end.status == "succeeded", end.output
    lines = end.output.splitlines()
    assert lines[0] == f"[artifact '{BIG}': characters 19900 to 20000 of 20000]", lines[0]
    assert NEEDLE in end.output and lines[-1] == "[end of the artifact]"
    wide = result_of(results, 1, 2)
    assert wide.status == "succeeded", wide.output
    assert wide.output.splitlines()[0] == f"[artifact '{WIDE}': characters 2990 to 3000 of 3000]"
    assert WIDE_TEXT[-10:] in wide.output
    for index in (3, 4, 5, 6):
        refused = result_of(results, 1, index)
        assert refused.status == "failed", (index, refused.output)
        assert refused.output.strip(), index


def test_a_page_holds_the_characters_its_frame_names(job: tuple[str, list[Any]]) -> None:
    """docs/artifacts.md: "One call returns at most `TANDEM_MAX_OUTPUT_CHARS` characters, its frame
    included ..., framed by where it is and where the next page starts, so a model that reads on
    from the offset the frame names skips nothing"."""
    _, results = job
    first = result_of(results, 1, 7)
    assert first.status == "succeeded", first.output
    lines = first.output.splitlines()
    framed = re.fullmatch(rf"\[artifact '{re.escape(BIG)}': characters 0 to (\d+) of 20000\]", lines[0])
    assert framed, lines[0]
    end = int(framed.group(1))
    assert len(first.output) <= 8000 and end >= 7000, (len(first.output), end)  # one output, most of it page
    assert PAGE0[:end] in first.output, (
        f"the page framed as characters 0 to {end} does not hold them; it ends: " + repr(first.output[-150:])
    )
    assert f"offset={end}" in lines[-1], f"no line saying where the next page starts: {lines[-1]!r}"


def test_a_page_over_the_byte_limit_is_never_kept_as_an_artifact_again(job: tuple[str, list[Any]]) -> None:
    """docs/artifacts.md: `read_artifact`'s "pages are never kept as artifacts again" (the wide
    page's 3,000 characters are 8,960 bytes: over `TANDEM_ARTIFACT_BYTES`)."""
    _, results = job
    whole = result_of(results, 1, 8)
    assert whole.status == "succeeded", whole.output[:300]
    assert whole.artifact is None, "a read_artifact page was kept as an artifact"
    assert WIDE_TEXT in whole.output


def test_the_byte_count_field_is_no_handle(world: World, job: tuple[str, list[Any]]) -> None:
    """docs/artifacts.md: the hash's field `#bytes` holds "the bytes of them all", not an output;
    `read_artifact` "fails ... for a handle the job does not hold", and "An unknown handle ... get[s]
    the same 404 (`unknown_artifact`)"."""
    job_id, results = job
    read = result_of(results, 1, 9)
    assert read.status == "failed", read.output
    unknown = get(world, FULL, job_id, "r0-c1-0123456789")
    counted = get(world, FULL, job_id, "%23bytes")
    assert (counted.status_code, counted.json()["error"]["code"]) == (404, "unknown_artifact"), counted.text
    assert counted.text.replace("#bytes", "<X>") == unknown.text.replace("r0-c1-0123456789", "<X>")
    for handle in ("..%2F..%2Fstate", "r0-c1-0123456789%00"):  # nothing else of the job's keys is read
        answer = get(world, FULL, job_id, handle)
        assert answer.status_code == 404, (handle, answer.status_code, answer.text[:200])
        assert "running" not in answer.text and "completed" not in answer.text
    direct = JobHandle(job_id, world.cluster.store, world.cluster.app)
    with pytest.raises(Exception) as caught:
        direct.artifact("#bytes")
    assert type(caught.value).__name__ == "UnknownArtifactError"


def test_a_kept_output_is_redacted_in_the_stored_text_past_any_cut(
    world: World, job: tuple[str, list[Any]]
) -> None:
    """docs/artifacts.md: "Artifacts are redacted when they are kept, as every output is: the job's
    secrets and credential-shaped text are masked in the stored text too"; docs/security.md names
    `Bearer ...` and `password: ...` pairs as credential-shaped."""
    job_id, results = job
    kept = result_of(results, 2, 1)
    assert kept.artifact is not None
    with Client(world.api.url, token=FULL) as api:
        text = api.artifact(job_id, kept.artifact.handle)
    assert text.startswith("SECRET-PAGE") and len(text) > 15_000
    assert BEARER not in text and PASSWORD not in text
    assert "***" in text


def test_another_tenants_job_answers_exactly_as_an_unknown_handle(
    world: World, job: tuple[str, list[Any]]
) -> None:
    """docs/artifacts.md: "An unknown handle, an unknown or expired job and another tenant's job all
    get the same 404 (`unknown_artifact`)"; docs/api.md: `read` is the scope "for status, events,
    artifacts"."""
    job_id, _ = job
    unknown = "r0-c1-0123456789"
    other = get(world, OTHER, job_id, BIG)
    missing = get(world, FULL, job_id, unknown)
    no_job = get(world, FULL, "00000000-0000-0000-0000-000000000000", BIG)

    def shape(answer: httpx.Response, *names: str) -> tuple[int, str, dict[str, str], str]:
        body = answer.text
        for name in names:
            body = body.replace(name, "<X>")
        headers = {k: v for k, v in answer.headers.items() if k.lower() not in ("date", "content-length")}
        return answer.status_code, answer.headers.get("content-type", ""), headers, body

    assert other.status_code == 404 and other.json()["error"]["code"] == "unknown_artifact"
    assert shape(other, BIG) == shape(missing, unknown), (other.text, missing.text)
    assert shape(no_job, BIG, "00000000-0000-0000-0000-000000000000") == shape(other, BIG, job_id)
    assert PAGE0[:50] not in other.text
    with Client(world.api.url, token=OTHER) as api, pytest.raises(NotFound) as caught:
        api.artifact(job_id, BIG)
    assert caught.value.code == "unknown_artifact"
    with Client(world.api.url, token=NO_READ) as api, pytest.raises(Unauthorized) as refused:
        api.artifact(job_id, BIG)
    assert refused.value.code == "missing_scope"


def test_the_direct_client_reads_the_whole_text_and_refuses_an_unknown_handle(
    world: World, job: tuple[str, list[Any]]
) -> None:
    """docs/artifacts.md: "`JobHandle.artifact` raises `UnknownArtifactError` for a handle the job
    does not hold"; "clients read the whole text"."""
    job_id, _ = job
    handle = JobHandle(job_id, world.cluster.store, world.cluster.app)
    assert handle.artifact(BIG) == PAGE0
    with pytest.raises(Exception) as caught:
        handle.artifact("r0-c2-ffffffffff")
    assert type(caught.value).__name__ == "UnknownArtifactError"


def test_a_fork_reads_its_own_copy_and_a_follow_up_reads_none(
    world: World, job: tuple[str, list[Any]]
) -> None:
    """docs/artifacts.md: "A fork gets its own copy of the artifacts its kept rounds name (under its
    own id ...)"; "A follow-up in a thread is a new job and does not read an earlier job's
    artifacts"."""
    job_id, _ = job
    with Client(world.api.url, token=FULL) as api:
        fork = api.fork(job_id, 2)
        assert fork.result(timeout=RESULT_SECONDS).status == "completed"
        assert fork.artifact(BIG) == PAGE0 and fork.artifact(WIDE) == WIDE_TEXT
        follow = api.follow_up(job_id, goal_with_plan("read the last job's page", [PLAN[1][:1]]))
        results: list[Any] = [e for e in follow.events() if e.type == "tool_result"]
        assert follow.result(timeout=RESULT_SECONDS).status == "completed"
        with pytest.raises(NotFound):
            follow.artifact(BIG)
    (read,) = results
    assert read.name == "read_artifact" and read.status == "failed", read.output
    assert NEEDLE not in read.output
    prefix = world.cluster.settings.prefix
    assert world.cluster.redis.ttl(f"{prefix}:{{{fork.id}}}:artifacts") > 0


def test_a_tools_worker_killed_mid_round_stores_each_artifact_once(world: World) -> None:
    """docs/artifacts.md: "a call run twice (a redelivered step) that returns the same text stores
    one artifact", and `#bytes` is "the bytes of them all"; docs/events.md: a call's `tool_result`
    "is published once, for the run whose result was stored"."""
    cluster = world.cluster
    plan = [
        [
            {"name": "page", "args": {"n": 4, "kb": 20}},
            {"name": "slow_page", "args": {"n": 6, "kb": 12, "seconds": 6}},
        ]
    ]
    handle = cluster.submit(goal=goal_with_plan("kill a worker mid-round", plan), max_rounds=4)

    def started() -> bool:
        return any(c["name"] == "slow_page_started" and c["job"] == handle.id for c in cluster.tool_calls())

    wait_for(started, 120, "the slow call to start")
    group = next(g for g in cluster.groups if "tools" in g.processes and g.processes["tools"].poll() is None)
    cluster.kill(group, "tools")
    cluster.start("tools", name=f"tools-{time.monotonic_ns()}")
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    events: list[Any] = [e for e in handle.events(timeout=30) if e.type == "tool_result"]
    assert sorted((e.round, e.index) for e in events) == [(0, 1), (0, 2)]
    prefix = cluster.settings.prefix
    key = f"{prefix}:{{{handle.id}}}:artifacts"
    stored = {k.decode(): v for k, v in cluster.redis.hgetall(key).items()}
    texts = {k: v for k, v in stored.items() if k != "#bytes"}
    assert set(texts) == {handle_of(0, 1, page_text(4, 20)), handle_of(0, 2, page_text(6, 12))}
    assert int(stored["#bytes"]) == sum(len(v) for v in texts.values()), "an artifact counted twice"
    untimed = [
        k for k in cluster.redis.scan_iter(match=f"{prefix}:*{handle.id}*") if cluster.redis.ttl(k) < 0
    ]
    assert untimed == []


def test_artifacts_expire_with_their_job(world: World) -> None:
    """docs/artifacts.md: the artifacts hash is "one of the job's keys: ... the same TTL as its
    record, memory and events"; "an unknown or expired job ... get the same 404"."""
    cluster = world.cluster
    with Client(world.api.url, token=FULL) as api:
        remote = api.submit({"goal": goal_with_plan("one big page", [PLAN[0][1:]]), "max_rounds": 3})
        assert remote.result(timeout=RESULT_SECONDS).status == "completed"
        handle = handle_of(0, 1, PAGE0)
        assert remote.artifact(handle) == PAGE0
    prefix = cluster.settings.prefix
    record, artifacts = f"{prefix}:{{{remote.id}}}:state", f"{prefix}:{{{remote.id}}}:artifacts"
    ttl_record, ttl_artifacts = cluster.redis.ttl(record), cluster.redis.ttl(artifacts)
    assert 0 < ttl_artifacts <= MEMORY_TTL and abs(ttl_record - ttl_artifacts) <= 2, (
        ttl_record,
        ttl_artifacts,
    )
    wait_for(lambda: not cluster.redis.exists(record), MEMORY_TTL + 30, "the job's record to expire")
    assert not cluster.redis.exists(artifacts), "the artifacts outlived their job's record"
    expired = get(world, FULL, remote.id, handle)
    unknown = get(world, FULL, remote.id, "r0-c1-0123456789")
    assert expired.status_code == unknown.status_code == 404
    assert expired.json()["error"]["code"] == unknown.json()["error"]["code"] == "unknown_artifact"


def wait_for(what: Callable[[], Any], timeout: float, message: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {message}")


def test_an_output_that_would_pass_the_memory_limit_is_cut_saying_so(redis_base: str) -> None:
    """docs/artifacts.md: "They count against the job's memory limit (`TANDEM_MAX_MEMORY_BYTES`
    ...): the conversation and the artifacts together. An output that would bring them over it is
    not kept: it is cut to `TANDEM_MAX_OUTPUT_CHARS` as any output, with one more line saying `[the
    whole output was not kept: it would bring the job's memory over its limit of N bytes
    (TANDEM_MAX_MEMORY_BYTES)]`"."""
    limit = 70_000
    gen = _make_cluster(
        redis_base,
        TANDEM_TOOLKIT="tests.integration.breaking_context_tools:toolkit",
        TANDEM_MAX_MEMORY_BYTES=str(limit),
    )
    cluster, _, _ = next(gen)
    try:
        cluster.start("thinker", "actor", "tools")
        plan = [
            [{"name": "page", "args": {"n": 0, "kb": 20}}],
            [{"name": "page", "args": {"n": 2, "kb": 20}}],
            [{"name": "page", "args": {"n": 4, "kb": 30}}],
        ]
        handle = cluster.submit(goal=goal_with_plan("three big pages", plan), max_rounds=5)
        result = handle.result(timeout=RESULT_SECONDS)
        results = [e for e in handle.events(timeout=30) if e.type == "tool_result"]
        prefix = cluster.settings.prefix
        stored = {
            k.decode(): v for k, v in cluster.redis.hgetall(f"{prefix}:{{{handle.id}}}:artifacts").items()
        }
    finally:
        next(gen, None)
    first, second, third = (result_of(results, r, 1) for r in (0, 1, 2))
    assert first.artifact is not None and second.artifact is not None
    assert third.artifact is None
    assert "[output cut: showing the first 8000 of 30000 characters]" in third.output
    assert third.output.endswith(
        "[the whole output was not kept: it would bring the job's memory over its limit "
        f"of {limit} bytes (TANDEM_MAX_MEMORY_BYTES)]"
    ), third.output[-300:]
    assert set(stored) - {"#bytes"} == {first.artifact.handle, second.artifact.handle}
    assert int(stored["#bytes"]) == 40_000
    assert result.status in ("completed", "failed"), result
    if result.status == "failed":
        assert "TANDEM_MAX_MEMORY_BYTES" in (result.error or ""), result.error
