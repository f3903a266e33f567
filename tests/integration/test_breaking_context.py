"""Breaking tests of per-role context budgets (issue 34), written from README.md, docs/context.md,
docs/configuration.md, docs/events.md and docs/api.md alone, against real ``celery worker``
processes, a real Redis and local OpenAI-compatible hosts that keep every request they get.

Every request a host received is counted by docs/context.md's conservative rule
(``tests.integration.context_hosts.estimate``: the budget binds by it when no tokenizer is at hand,
as here) and checked against its role's budget: the window less the reply's reserve.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest
from redis import Redis

from tandem.client.handle import JobHandle
from tests.integration import context_hosts as hosts
from tests.integration import plan_model
from tests.integration.breaking_context_tools import NEEDLE, page_text
from tests.integration.conftest import RESULT_SECONDS, Cluster, _exclusive_db
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

pytestmark = pytest.mark.integration

WINDOW = {"thinker": 8000, "actor": 6000}
RESERVE = 500
BUDGET = {role: window - RESERVE for role, window in WINDOW.items()}
"""thinker 7,500, actor 5,500 tokens: a large Thinker beside a smaller Actor."""
TOOLKIT = "tests.integration.breaking_context_tools:toolkit"
Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]


def budget_env(windows: dict[str, int] = WINDOW, reserve: int | None = RESERVE) -> dict[str, str]:
    env = {f"TANDEM_{role.upper()}_CONTEXT_TOKENS": str(w) for role, w in windows.items()}
    if reserve is not None:
        env |= {f"TANDEM_{role.upper()}_MAX_TOKENS": str(reserve) for role in windows}
    return env


@contextmanager
def cluster_of(
    redis_base: str,
    thinker: Callable[[RecordedRequest], Reply | str],
    actor: Callable[[RecordedRequest], Reply | str],
    thinker_host: Mapping[str, Any] | None = None,
    actor_host: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[Hosts]:
    """Workers on a database of their own with the two scripted hosts; on the way out every worker
    is stopped and every tandem key must have had a TTL."""
    with (
        _exclusive_db() as db,
        OpenAIServer(thinker, **(thinker_host or {})) as thinker_server,
        OpenAIServer(actor, **(actor_host or {})) as actor_server,
    ):
        url = f"{redis_base}/{db}"
        Redis.from_url(url).flushdb()
        cluster = Cluster(
            url,
            {
                "TANDEM_BROKER_URL": url,
                "TANDEM_RESULT_BACKEND": url,
                "TANDEM_REDIS_URL": url,
                "TANDEM_TOOLKIT": TOOLKIT,
                "TANDEM_THINKER_MODEL": "openai/thinker-model",
                "TANDEM_THINKER_API_BASE": thinker_server.url,
                "TANDEM_THINKER_API_KEY": "test-key",
                "TANDEM_ACTOR_MODEL": "openai/actor-model",
                "TANDEM_ACTOR_API_BASE": actor_server.url,
                "TANDEM_ACTOR_API_KEY": "test-key",
                "TANDEM_TOOL_TIMEOUT": "30",
                # These tests check the fitting every request gets (rounds left out, with a
                # marker); summaries, on by default, would stand in for those rounds before the
                # budget is reached: tests/integration/test_compaction.py covers them.
                "TANDEM_COMPACT_AT": "0",
                **(env or {}),
            },
        )
        untimed: list[str] = []
        try:
            yield cluster, thinker_server, actor_server
        finally:
            cluster.stop()
            prefix = cluster.settings.prefix
            untimed = [
                k.decode() for k in cluster.redis.scan_iter(match=f"{prefix}:*") if cluster.redis.ttl(k) < 0
            ]
            cluster.redis.flushdb()
        assert not untimed, f"tandem keys without a TTL after the test: {untimed}"


@pytest.fixture(scope="module")
def budgets(redis_base: str) -> Iterator[Hosts]:
    """Thinker, actor and tools workers; the Thinker's window 8,000 tokens, the Actor's 6,000,
    each reply's cap 500 (``TANDEM_<ROLE>_CONTEXT_TOKENS``, ``TANDEM_<ROLE>_MAX_TOKENS``)."""
    with cluster_of(redis_base, hosts.thinker, plan_model.actor, env=budget_env()) as world:
        world[0].start("thinker", "actor", "tools")
        yield world


def of_job(host: OpenAIServer, mark: str) -> list[RecordedRequest]:
    """The requests ``host`` got for the job whose goal holds ``mark``."""
    return [r for r in host.requests if mark in hosts.goal_of(r) or mark in hosts.text_of(r)]


def over_budget(requests: list[RecordedRequest], budget: int) -> list[tuple[int, int]]:
    """(round, tokens) of each request over ``budget``."""
    return [
        (hosts.round_of(r), hosts.request_tokens(r)) for r in requests if hosts.request_tokens(r) > budget
    ]


def events_of(handle: JobHandle) -> list[Any]:
    return list(handle.events(timeout=30))


def wait_for(what: Callable[[], Any], timeout: float, message: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {message}")


# -- a long job on tight budgets ---------------------------------------------------------------


ROUNDS = 32


@pytest.fixture(scope="module")
def long_job(budgets: Hosts) -> tuple[JobHandle, Any, list[Any], str]:
    """A 32-round dual job: a 20 KB page (kept as an artifact) and a 3 KB page (shown whole) by
    turns, a person's message at round 3, a person's answer to ``ask_person`` at round 4, page 0's
    hidden needle read back through ``read_artifact`` at round 31."""
    cluster, _thinker, _actor = budgets
    mark = "GOAL-LONG-7f3a"
    goal = f"{mark} Read the whole archive, one page a round. ROUNDS={ROUNDS} ASK_AT=4 READ_AT={ROUNDS - 1}"
    handle = cluster.submit(goal=goal, max_rounds=ROUNDS + 2, ask_person=True)
    seen: list[Any] = []
    sent = False
    event: Any
    for event in handle.events(timeout=RESULT_SECONDS):
        seen.append(event)
        if event.type == "round_started" and event.round == 2 and not sent:
            handle.message("PERSON-NOTE: report every figure in euros, please.")
            sent = True
        if event.type == "question_asked":
            handle.answer("CODEWORD-BLUEBIRD-42", pause_id=event.pause_id)
    return handle, handle.result(timeout=RESULT_SECONDS), seen, mark


def test_no_request_of_a_32_round_job_with_large_outputs_passes_its_roles_budget(
    budgets: Hosts, long_job: tuple[JobHandle, Any, list[Any], str]
) -> None:
    """docs/context.md: "tandem keeps every request a model step sends inside its role's context
    budget" and "The Thinker and the Actor each fit their own view by their own budget"."""
    _, thinker_host, actor_host = budgets
    _handle, result, events, mark = long_job
    assert result.status == "completed", result
    assert result.rounds == ROUNDS
    for role, host in (("thinker", thinker_host), ("actor", actor_host)):
        requests = of_job(host, mark)
        assert len(requests) >= ROUNDS
        assert over_budget(requests, BUDGET[role]) == [], f"{role} requests over its budget {BUDGET[role]}"
        # untrimmed, the last requests would hold every page: several times the budget
        caps = {hosts.reply_cap(r) for r in requests}
        assert caps <= {RESERVE, None}, (
            f"{role}: a reply cap other than TANDEM_{role.upper()}_MAX_TOKENS: {caps}"
        )
    compactions = [e for e in events if e.type == "memory_compacted"]
    assert {c.role for c in compactions} == {"thinker", "actor"}
    for c in compactions:
        assert c.tokens_after <= BUDGET[c.role] < c.tokens_before, c
        assert c.how == "dropped" and c.rounds_summarized == 0
        first, last = c.rounds_dropped
        assert first == 0 and last <= c.round - 2, c  # the step's round and the one before are kept


def test_the_round_one_needle_is_still_read_at_round_31_through_read_artifact(
    budgets: Hosts, long_job: tuple[JobHandle, Any, list[Any], str]
) -> None:
    """docs/artifacts.md: "The model pages through the rest with the built-in tool
    `read_artifact(handle, offset, length)`"; docs/context.md: the round before the step's own is
    never left out "with that round's tool calls and their results"."""
    _, thinker_host, _ = budgets
    _handle, _result, events, mark = long_job
    reads = [e for e in events if e.type == "tool_result" and e.name == "read_artifact"]
    assert len(reads) == 1 and reads[0].round == ROUNDS - 2, reads
    assert reads[0].status == "succeeded" and NEEDLE in reads[0].output, reads[0].output
    last = [r for r in of_job(thinker_host, mark) if hosts.round_of(r) == ROUNDS]
    assert last and all(NEEDLE in hosts.text_of(r) for r in last)
    assert "needle-seen=yes" in hosts.text_of(of_job(budgets[2], mark)[-1])
    # round 0 itself was left out of the late requests (that is what made the needle hard to reach)
    assert all("PAGE-0-START" not in hosts.text_of(r) for r in last)


def test_what_is_never_left_out_is_in_every_request(
    budgets: Hosts, long_job: tuple[JobHandle, Any, list[Any], str]
) -> None:
    """docs/context.md: "Never left out: the system prompt and the tools; the task: the goal ...;
    every message from a person (`tandem.message`), and a person's answers to `ask_person` in the
    rounds left out (quoted in the note); the latest instruction and action: the step's own round
    and the round before it, with that round's tool calls and their results"."""
    _, thinker_host, actor_host = budgets
    _handle, result, events, mark = long_job
    assert result.status == "completed", result
    message_round = next(e.round for e in events if e.type == "message_received")  # from 0
    answer_round = next(e.round for e in events if e.type == "question_answered")  # from 0
    missing: list[str] = []
    for role, host in (("thinker", thinker_host), ("actor", actor_host)):
        for request in of_job(host, mark):
            k, text = hosts.round_of(request), hosts.text_of(request)
            if request["messages"][0]["role"] != "system" or not request["messages"][0]["content"]:
                missing.append(f"{role} round {k}: the system prompt")
            if mark not in text or "Read the whole archive" not in text:
                missing.append(f"{role} round {k}: the goal")
            if role == "actor" and k < ROUNDS and hosts.instruction(k) not in text:
                missing.append(f"actor round {k}: the latest instruction")
            if role == "thinker" and 2 <= k <= ROUNDS - 1 and k - 1 != 4 and k - 1 != ROUNDS - 1:
                previous = page_text(k - 2, hosts.page_kb(hosts.goal_of(request), k - 2))
                if f"PAGE-{k - 2}-START" not in text:
                    missing.append(f"thinker round {k}: the round before's tool result (page {k - 2})")
                elif len(previous) < 8000 and previous not in text:
                    missing.append(f"thinker round {k}: the round before's tool result, whole")
            if role == "thinker" and k - 1 > message_round and "PERSON-NOTE" not in text:
                missing.append(f"thinker round {k}: the person's message")
            if role == "thinker" and k - 1 > answer_round and "CODEWORD-BLUEBIRD-42" not in text:
                missing.append(f"thinker round {k}: the person's answer to ask_person")
    assert missing == []


# -- intake and follow-ups ------------------------------------------------------------------------


def test_a_goal_that_fits_the_thinker_but_not_the_actor_is_refused_at_intake_naming_both_numbers(
    budgets: Hosts,
) -> None:
    """docs/context.md: "A goal and context alone over a role's budget are refused at intake, with
    both numbers"; docs/configuration.md: "A job whose goal and context alone pass a role's budget
    is refused at intake, naming both numbers"."""
    cluster, thinker_host, actor_host = budgets
    mark = "GOAL-ACTOR-ONLY-19c2"
    goal = f"{mark} " + "read every ledger and letter " * 650  # about 6,300 tokens: under 7,500, over 5,500
    assert BUDGET["actor"] < hosts.estimate(goal) < BUDGET["thinker"] - 1000
    result = cluster.submit(goal=goal, max_rounds=3).result(timeout=RESULT_SECONDS)
    assert result.status == "failed", result
    error = result.error or ""
    assert re.search(r"5,?500", error), f"the Actor's budget is not named: {error}"
    numbers = [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", error)]
    assert any(n > BUDGET["actor"] for n in numbers), f"the goal's tokens are not named: {error}"
    assert of_job(thinker_host, mark) == [] and of_job(actor_host, mark) == [], "a request was sent"


def test_a_goal_and_context_each_under_the_budget_but_over_it_together_are_refused(budgets: Hosts) -> None:
    """docs/context.md: "A goal and context alone over a role's budget are refused at intake, with
    both numbers"."""
    cluster, thinker_host, actor_host = budgets
    mark = "GOAL-CONTEXT-5d11"
    half = "read every ledger and letter " * 400  # about 3,900 tokens each: 7,800 together
    result = cluster.submit(goal=f"{mark} {half}", context=half, max_rounds=3).result(timeout=RESULT_SECONDS)
    assert result.status == "failed", result
    assert re.search(r"5,?500|7,?500", result.error or ""), result.error
    assert of_job(thinker_host, mark) == [] and of_job(actor_host, mark) == []


def test_a_long_thread_takes_at_most_half_the_smallest_budget(budgets: Hosts) -> None:
    """docs/context.md: "A follow-up's thread (the earlier jobs' goals, messages and answers) takes
    at most half the smallest budget of the job's roles, besides `TANDEM_MAX_THREAD_CHARS`; the
    oldest entries go first"."""
    cluster, thinker_host, actor_host = budgets
    goals = [
        f"FOLLOW-{i}-BEGIN " + f"look again at shelf {i} and its ledgers " * 80 + f"FOLLOW-{i}-END ROUNDS=1"
        for i in range(6)
    ]
    # each about 1,100 tokens and 3,300 characters: six fit TANDEM_MAX_THREAD_CHARS (20,000), not 2,750 tokens
    assert all(1000 < hosts.estimate(g) < 1300 for g in goals) and sum(map(len, goals)) < 20_000
    handle = cluster.submit(goal=goals[0], max_rounds=2)
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    for goal in goals[1:]:
        handle = handle.follow_up(goal)
        assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    last_goal = goals[-1]
    for role, host in (("thinker", thinker_host), ("actor", actor_host)):
        requests = [r for r in host.requests if "FOLLOW-5-BEGIN" in hosts.text_of(r)]
        assert requests
        assert over_budget(requests, BUDGET[role]) == []
        for request in requests:
            text = hosts.text_of(request)
            assert last_goal.split(" ROUNDS")[0] in text
            kept = [i for i in range(5) if goals[i] in text]
            thread = sum(hosts.estimate(goals[i]) for i in kept)
            assert thread <= min(BUDGET.values()) // 2, (
                f"{role}: the thread's goals {kept} take {thread} tokens"
            )
            assert kept == list(range(5 - len(kept), 5)), f"{role}: not the newest entries kept: {kept}"


# -- resume and fork of a fitted job ----------------------------------------------------------------


def stored(cluster: Cluster, job_id: str) -> list[str]:
    return [m.model_dump_json() for m in cluster.store.memory(job_id).get_messages()]


def test_resume_and_fork_of_a_fitted_job_read_the_original_memory(budgets: Hosts) -> None:
    """docs/context.md: "Only the request is changed: the job's memory in Redis keeps every round,
    so clients, `resume` and `fork` read the originals"."""
    cluster, thinker_host, _ = budgets
    mark = "GOAL-RESUME-3b7e"
    handle = cluster.submit(goal=f"{mark} Page on. NEVER_DONE KB=3", max_rounds=12)
    first = handle.result(timeout=RESULT_SECONDS)
    assert first.status == "truncated", first
    compacted = [e for e in events_of(handle) if e.type == "memory_compacted"]
    assert compacted, "the job's requests were never fitted: the test proves nothing"
    before = stored(cluster, handle.id)
    outputs = "".join(before)
    for n in range(11):  # the last round's calls may wait for a resume
        assert json.dumps(page_text(n, 3))[1:-1] in outputs, f"page {n} is not in the stored memory whole"

    handle.resume(max_rounds=16)
    resumed = handle.result(timeout=RESULT_SECONDS)
    assert resumed.status == "truncated" and resumed.rounds == 16, resumed
    after = stored(cluster, handle.id)
    assert after[: len(before)] == before, "the resumed run changed the stored rounds"
    assert all(json.dumps(page_text(n, 3))[1:-1] in "".join(after) for n in range(15))
    assert over_budget(of_job(thinker_host, mark), BUDGET["thinker"]) == []

    sent_before_fork = thinker_host.request_count
    fork = handle.fork(3, max_rounds=5)
    forked = fork.result(timeout=RESULT_SECONDS)
    assert forked.status == "truncated", forked
    fork_requests = [r for r in of_job(thinker_host, mark) if r.number > sent_before_fork]
    assert fork_requests and hosts.round_of(fork_requests[0]) == 4, [hosts.round_of(r) for r in fork_requests]
    text = hosts.text_of(fork_requests[0])
    for n in range(3):  # rounds 0..2, left out of the source's late requests, fit the fork's
        assert page_text(n, 3) in text, f"the fork's first request lacks round {n}'s original page"
    forked_memory = stored(cluster, fork.id)
    source_rounds = [m for m in before if json.loads(m)["round"] < 3]
    assert [m for m in forked_memory if json.loads(m)["round"] < 3] == source_rounds


# -- the window the host reports ------------------------------------------------------------------


VLLM_WINDOW = 4096
LLAMA_WINDOW = 4096


def vllm_actor(window: int) -> Callable[[RecordedRequest], Reply]:
    """The Actor's host as vLLM answers with ``--max-model-len <window>``: a request whose prompt
    and reply cap together pass the window is refused (its prompt counted by words, fewer than its
    tokens, so the host is lenient)."""

    def answer(request: RecordedRequest) -> Reply:
        cap = hosts.reply_cap(request) or 0
        words = sum(len(str(m.get("content") or "").split()) for m in request["messages"])
        if cap + words > window:
            return Reply(
                status=400,
                error=f"This model's maximum context length is {window} tokens. However, you requested "
                f"{cap + words} tokens ({words} in the messages, {cap} in the completion).",
            )
        return plan_model.actor(request)

    return answer


def reported_window_job(
    redis_base: str, actor: Callable[[RecordedRequest], Reply], actor_window: int = VLLM_WINDOW
) -> tuple[Any, list[Any], OpenAIServer, OpenAIServer, str]:
    """A 14-round job on hosts that report their windows (no ``TANDEM_<ROLE>_CONTEXT_TOKENS``, no
    ``TANDEM_<ROLE>_MAX_TOKENS``): the Thinker's as llama.cpp does, the Actor's as vLLM does."""
    with cluster_of(
        redis_base,
        hosts.thinker,
        actor,
        thinker_host={"props": {"default_generation_settings": {"n_ctx": LLAMA_WINDOW}}},
        actor_host={"max_model_len": actor_window},
    ) as (cluster, thinker_host, actor_host):
        cluster.start("thinker", "actor", "tools")
        mark = "GOAL-REPORTED-a41c"
        handle = cluster.submit(goal=f"{mark} Read a page a round. ROUNDS=14 KB=1", max_rounds=16)
        result = handle.result(timeout=RESULT_SECONDS)
        events = events_of(handle)
    return result, events, thinker_host, actor_host, mark


def test_the_window_the_host_reports_bounds_every_request_with_a_quarter_kept_for_the_reply(
    redis_base: str,
) -> None:
    """docs/context.md: each role's window is "what the host reports: llama.cpp's server (`GET
    /props`: `default_generation_settings.n_ctx`) or vLLM (`GET /v1/models`: `max_model_len`)";
    "Part of the window is kept for the reply: ... else the reply cap up to a quarter of the
    window. A request may take the rest: the budget"."""
    result, events, thinker_host, actor_host, mark = reported_window_job(redis_base, plan_model.actor)
    assert any(p.rstrip("/").endswith("/props") for p in thinker_host.discovery_requests)
    assert any(p.rstrip("/").endswith("/models") for p in actor_host.discovery_requests)
    assert result.status == "completed", result.error
    assert any(e.type == "memory_compacted" and e.role == "thinker" for e in events), "never fitted"
    budgets = {"thinker": LLAMA_WINDOW - LLAMA_WINDOW // 4, "actor": VLLM_WINDOW - VLLM_WINDOW // 4}
    for role, host in (("thinker", thinker_host), ("actor", actor_host)):
        assert over_budget(of_job(host, mark), budgets[role]) == [], f"{role} over {budgets[role]}"


def test_a_vllm_host_reporting_its_window_never_refuses_a_request_for_length(redis_base: str) -> None:
    """docs/context.md: a long job "goes on instead of failing with the host's 'the request exceeds
    the available context size'"; "Part of the window is kept for the reply: ... else the reply cap
    up to a quarter of the window" (vLLM refuses a request whose prompt and `max_tokens` together
    pass `--max-model-len`, the window it reports)."""
    result, _events, _thinker_host, actor_host, mark = reported_window_job(
        redis_base, vllm_actor(VLLM_WINDOW)
    )
    too_long = [
        (hosts.round_of(r), hosts.request_tokens(r), hosts.reply_cap(r))
        for r in of_job(actor_host, mark)
        if hosts.request_tokens(r) + (hosts.reply_cap(r) or 0) > VLLM_WINDOW
    ]
    assert too_long == [], f"the Actor's prompt and reply cap together pass the {VLLM_WINDOW}-token window"
    assert result.status == "completed", result.error


def test_a_job_fails_for_length_only_when_what_is_always_kept_is_over_the_budget(redis_base: str) -> None:
    """docs/context.md: "The job never fails for length while what is always kept fits. When it
    does not ..., the step fails the job with a reason naming the tokens the request needs and the
    budget". (The Actor's window, 3,072 tokens as vLLM reports it, holds its system prompt and two
    rounds of 1 KB pages only just: the job may end either way, but a refusal must be for a need
    over the budget.)"""
    result, _events, _thinker_host, _actor_host, _mark = reported_window_job(
        redis_base, plan_model.actor, actor_window=3072
    )
    if result.status == "completed":
        return
    error = result.error or ""
    needs = re.search(r"needs ([\d,]+) tokens", error)
    budget = re.search(r"budget of ([\d,]+) tokens", error)
    assert needs and budget, error
    need, limit = (int(m.group(1).replace(",", "")) for m in (needs, budget))
    assert need > limit, f"failed for length needing {need:,} tokens of a {limit:,}-token budget: {error}"


# -- a worker killed mid-job on a tight budget ----------------------------------------------------


def test_a_worker_killed_mid_job_on_a_tight_budget_leaves_nothing_twice(redis_base: str) -> None:
    """docs/context.md: "The choice depends only on the stored messages, so a step run twice sends
    the same request"; docs/events.md: `memory_compacted` is "written when the rounds left out
    change, with the step's commit" and a `tool_result` "is published once, for the run whose result
    was stored"; docs/artifacts.md: "a call run twice (a redelivered step) that returns the same
    text stores one artifact" and the artifacts hash has "the same TTL as its record"."""
    gate = hosts.Gate(round_=10)
    windows = {"thinker": 6000, "actor": 5000}
    with cluster_of(
        redis_base, gate, plan_model.actor, env={"TANDEM_LEASE_SECONDS": "2", **budget_env(windows)}
    ) as (
        cluster,
        thinker_host,
        _actor_host,
    ):
        group = cluster.start("thinker", "actor", "tools")
        mark = "GOAL-KILL-0e9d"
        handle = cluster.submit(goal=f"{mark} Read a page a round. ROUNDS=14 SLOW_AT=7", max_rounds=16)
        wait_for(
            lambda: any(c["name"] == "slow_page_started" for c in cluster.tool_calls()),
            120,
            "the slow call to start",
        )
        cluster.kill(group, "tools")
        cluster.start("tools", name="tools-2")
        assert gate.reached.wait(300), "the Thinker's round-10 request never came"
        cluster.kill(group, "thinker")
        cluster.start("thinker", name="thinker-2")
        gate.release.set()
        result = handle.result(timeout=RESULT_SECONDS)
        events = events_of(handle)
        prefix = cluster.settings.prefix
        keys = [k.decode() for k in cluster.redis.scan_iter(match=f"{prefix}:*{handle.id}*")]
        untimed = [k for k in keys if cluster.redis.ttl(k) < 0]
        artifacts = {
            k.decode(): v for k, v in cluster.redis.hgetall(f"{prefix}:{{{handle.id}}}:artifacts").items()
        }
        requests = of_job(thinker_host, mark)
    assert result.status == "completed", result
    assert untimed == [], f"keys without a TTL: {untimed}"
    tenth = [r["messages"] for r in requests if hosts.round_of(r) == 10]
    assert len(tenth) >= 2, "the killed step was not sent again"
    assert all(m == tenth[0] for m in tenth), "the step run twice sent another request"
    assert over_budget(requests, windows["thinker"] - RESERVE) == []

    def twice(kind: str, key: Callable[[Any], Any]) -> list[Any]:
        seen = [key(e) for e in events if e.type == kind]
        return sorted({k for k in seen if seen.count(k) > 1})

    assert twice("tool_result", lambda e: (e.round, e.index)) == []
    assert twice("memory_compacted", lambda e: (e.round, e.role)) == []
    assert twice("round_started", lambda e: e.round) == []
    assert any(e.type == "memory_compacted" for e in events), "never fitted: the test proves nothing"
    made = {e.artifact.handle for e in events if e.type == "tool_result" and e.artifact is not None}
    texts = {k: v for k, v in artifacts.items() if k != "#bytes"}
    assert set(texts) == made
    assert int(artifacts["#bytes"]) == sum(len(v) for v in texts.values()), "an artifact counted twice"


# -- a real llama.cpp server with a 2,048-token context -------------------------------------------


def readable(reason: str | None) -> bool:
    """A reason a person reads: words, no traceback, no object repr."""
    return bool(reason) and not re.search(r"Traceback|File \"|object at 0x|^\w+\(|\w+Error\(", reason or "")


LONG_REAL_MODEL = "TANDEM_TEST_LONG_REAL_MODEL"
"""Set to run the 30-round job against a real llama.cpp server (skipped otherwise)."""


def test_a_30_round_job_against_a_2048_token_llama_server_never_passes_its_context(redis_base: str) -> None:
    """The issue's figure, as docs/context.md states it: "tandem keeps every request a model step
    sends inside its role's context budget ... so such a job goes on instead of failing with the
    host's 'the request exceeds the available context size'"; "Set `TANDEM_<ROLE>_CONTEXT_TOKENS`
    to the window the host really serves (llama.cpp's `-c` ...) when it does not report it"; tokens
    are counted by "the host's tokenize endpoint: ... llama-cpp-python's `/extras/tokenize/count`".

    The Thinker is SmolLM2-135M on llama.cpp's server (``--n_ctx 2048``), every reply capped at 32
    tokens; the Actor (a scripted host, its window 16,000 tokens) calls ``page`` (3 KB) every
    round, so the Thinker's conversation outgrows the window within a few rounds."""
    from tests.integration.llama_server import MODEL_ALIAS, LlamaServer, require_real_model
    from tests.integration.recording_proxy import RecordingProxy

    if not os.environ.get(LONG_REAL_MODEL):
        # Thirty real calls of up to 1,500 prompt tokens: 5 to 10 minutes of CPU on 2 cores, more
        # than the rest of the real-model tests together. A figure of issue 34, run on demand.
        pytest.skip(f"a long real-model run: set {LONG_REAL_MODEL}=1 to run it")
    require_real_model()
    window, cap = 2048, 32
    with LlamaServer(n_ctx=window) as server, RecordingProxy(server.root) as proxy:
        env = {
            "TANDEM_THINKER_MODEL": f"hosted_vllm/{MODEL_ALIAS}",
            "TANDEM_THINKER_API_BASE": proxy.url,
            "TANDEM_THINKER_API_KEY": "sk-local",
            "TANDEM_THINKER_TEMPERATURE": "0",
            "TANDEM_THINKER_TIMEOUT": "600",
            "TANDEM_JOB_TIMEOUT": "1200",
            # As a user runs it: summaries on (the model summarizes its own older rounds).
            "TANDEM_COMPACT_AT": "0.8",
            **budget_env({"thinker": window}, reserve=cap),
            **budget_env({"actor": 16_000}),
        }
        with cluster_of(redis_base, hosts.thinker, hosts.always_page, env=env) as (cluster, _stub, _actor):
            cluster.start("thinker", "actor", "tools")
            handle = cluster.submit(goal="[ctx-2048] Read the archive one page a round.", max_rounds=30)
            result = handle.result(timeout=RESULT_SECONDS * 2)
            events = events_of(handle)
        proxy.wait_idle(60)
        log = server.access_log()
    chats = [e for e in proxy.exchanges if e.chat]
    refused = [(e.status, e.text[:200]) for e in proxy.exchanges if e.status >= 400]
    prompts = [(e.usage or {}).get("prompt_tokens", 0) for e in chats]
    print(
        f"\nllama.cpp n_ctx {window}: {result.status} after {result.rounds} rounds; {len(chats)} chat "
        f"requests, largest prompt {max(prompts, default=0)} tokens (server's count); "
        f"{sum(e.type == 'memory_compacted' for e in events)} memory_compacted events; "
        f"reason {result.error!r}"
    )
    assert refused == [], f"the server refused requests: {refused}"
    assert [line for line in log if line[2] >= 400] == []
    assert chats and all(e.status == 200 for e in chats)
    assert max(prompts) + cap <= window, f"a prompt of {max(prompts)} tokens leaves no room for the reply"
    assert result.rounds >= 10 or result.status == "completed", result
    assert any(e.type == "memory_compacted" for e in events), "the job never outgrew the window"
    assert result.status in ("completed", "truncated"), result.error
    if result.status != "completed":
        assert readable(result.error), f"not a readable reason: {result.error!r}"


# -- a host that counts tokens ---------------------------------------------------------------------


def words(request: RecordedRequest) -> int:
    """A request's tokens as the test hosts' tokenize endpoint counts them (``tokenize="llama.cpp"``:
    a token a word): every message's content, and the tools offered."""
    total = sum(len(str(m.get("content") or "").split()) for m in request["messages"])
    if request.get("tools"):
        total += len(json.dumps(request["tools"]).split())
    return total


def test_a_host_with_a_tokenizer_bounds_every_request_by_its_own_count(redis_base: str) -> None:
    """docs/context.md: "Tokens are counted with the model's tokenizer where one is at hand (...
    else the host's tokenize endpoint: llama.cpp's `/tokenize` ...)"; "no request of the role is
    sent over [the window] less the reply's reserve" (docs/configuration.md)."""
    windows = {"thinker": 2400, "actor": 2400}
    with cluster_of(
        redis_base,
        hosts.thinker,
        plan_model.actor,
        thinker_host={"tokenize": "llama.cpp"},
        actor_host={"tokenize": "llama.cpp"},
        env=budget_env(windows, reserve=200),
    ) as (cluster, thinker_host, actor_host):
        cluster.start("thinker", "actor", "tools")
        mark = "GOAL-TOKENIZED-62b0"
        handle = cluster.submit(goal=f"{mark} Read a page a round. ROUNDS=16 KB=3", max_rounds=18)
        result = handle.result(timeout=RESULT_SECONDS)
        events = events_of(handle)
    assert result.status == "completed", result.error
    assert thinker_host.tokenize_requests, "the host's tokenize endpoint was never asked"
    assert any(e.type == "memory_compacted" for e in events), "never fitted: the test proves nothing"
    for role, host in (("thinker", thinker_host), ("actor", actor_host)):
        requests = of_job(host, mark)
        over = [(hosts.round_of(r), words(r)) for r in requests if words(r) > windows[role] - 200]
        assert over == [], f"{role} requests over the budget by the host's own count"


def test_tandem_watch_shows_the_fitting(
    budgets: Hosts, long_job: tuple[JobHandle, Any, list[Any], str]
) -> None:
    """docs/context.md: "the job publishes `memory_compacted` ..., `tandem watch` shows it"."""
    import os
    import subprocess
    import sys

    cluster, _, _ = budgets
    handle, _result, events, _mark = long_job
    first = next(e for e in events if e.type == "memory_compacted")
    done = subprocess.run(
        [sys.executable, "-m", "tandem.workers.cli", "watch", handle.id],
        env={**os.environ, **cluster.env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if re.search(r"compact|left out|dropped", line, re.I)]
    assert lines, f"tandem watch shows no fitting: {done.stdout[-1500:]} {done.stderr[-500:]}"
    assert any(f"{first.tokens_before:,}" in line or str(first.tokens_before) in line for line in lines), (
        lines[:3]
    )


# -- pauses, cancels and settings around fitted requests ---------------------------------------------


def test_an_approval_pause_and_a_cancel_of_a_fitted_job_lose_nothing_and_fit_nothing_twice(
    budgets: Hosts,
) -> None:
    """Issue 34's edge cases, as the docs state them: docs/context.md "The choice depends only on
    the stored messages, so a step run twice sends the same request"; docs/events.md
    `memory_compacted` is "written when the rounds left out change, with the step's commit";
    docs/distributed.md a cancelled job resumes "from its last stored step"."""
    cluster, thinker_host, _ = budgets
    mark = "GOAL-PAUSE-c07d"
    handle = cluster.submit(goal=f"{mark} Read a page a round. ROUNDS=18 NOTIFY_AT=9", max_rounds=20)
    cancelled = False
    event: Any
    for event in handle.events(timeout=RESULT_SECONDS):
        if event.type == "approval_requested":
            handle.approve(1)
        if event.type == "round_started" and event.round == 12 and not cancelled:
            handle.cancel()
            cancelled = True
        if event.type == "final":
            break
    first = handle.result(timeout=RESULT_SECONDS)
    assert first.status == "cancelled", first
    handle.resume()
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result.error
    events = events_of(handle)
    requests = of_job(thinker_host, mark)
    assert over_budget(requests, BUDGET["thinker"]) == []
    notified = [r for r in requests if hosts.round_of(r) == 10]
    assert notified and all("notified ann@example.com" in hosts.text_of(r) for r in notified)
    compacted = [(e.round, e.role, tuple(e.rounds_dropped)) for e in events if e.type == "memory_compacted"]
    assert compacted, "never fitted: the test proves nothing"
    assert len(compacted) == len({c[:2] for c in compacted}), (
        f"a round's fitting published twice: {compacted}"
    )
    results = [(e.round, e.index) for e in events if e.type == "tool_result"]
    assert len(results) == len(set(results)), "a tool result published twice"
    stored = [m for m in cluster.store.memory(handle.id).get_messages() if m.role in ("thinker", "actor")]
    assert len(stored) == len({(m.round, m.role) for m in stored}), "a round stored twice"


def test_memory_compacted_is_published_only_when_the_rounds_left_out_change(
    long_job: tuple[JobHandle, Any, list[Any], str],
) -> None:
    """docs/context.md: "Each time the rounds left out change, the job publishes
    `memory_compacted`"; docs/events.md: `tokens_before`, `tokens_after` are "the request's tokens
    without and with rounds left out"."""
    _handle, _result, events, _mark = long_job
    for role in ("thinker", "actor"):
        mine = [e for e in events if e.type == "memory_compacted" and e.role == role]
        assert mine, role
        ranges = [tuple(e.rounds_dropped) for e in mine]
        assert all(a != b for a, b in itertools.pairwise(ranges)), f"{role}: unchanged: {ranges}"
        assert all(e.tokens_after < e.tokens_before for e in mine)
        assert [e.round for e in mine] == sorted({e.round for e in mine})


def test_a_reply_cap_not_below_the_window_refuses_the_roles_jobs_saying_so(redis_base: str) -> None:
    """docs/context.md: "`TANDEM_<ROLE>_MAX_TOKENS` when it is set (it must be below the window, or
    the role's jobs are refused saying so)"."""
    with cluster_of(
        redis_base,
        hosts.thinker,
        plan_model.actor,
        env={"TANDEM_ACTOR_CONTEXT_TOKENS": "4000", "TANDEM_ACTOR_MAX_TOKENS": "4000"},
    ) as (cluster, _thinker_host, actor_host):
        cluster.start("thinker", "actor", "tools")
        result = cluster.submit(goal="GOAL-CAP-1a2b ROUNDS=3", max_rounds=4).result(timeout=RESULT_SECONDS)
    assert result.status == "failed", result
    assert "TANDEM_ACTOR_MAX_TOKENS" in (result.error or ""), result.error
    assert of_job(actor_host, "GOAL-CAP-1a2b") == []


def test_a_window_under_256_tokens_stops_the_process_naming_the_variable() -> None:
    """docs/configuration.md: `TANDEM_<ROLE>_CONTEXT_TOKENS` is "the model's context window in tokens
    (at least 256)"; "a bad value stops the process with the variable's name and value"."""
    import subprocess
    import sys

    code = (
        "from tandem.broker_config import Settings; "
        "Settings.from_env({'TANDEM_THINKER_CONTEXT_TOKENS': '255'})"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "TANDEM_THINKER_CONTEXT_TOKENS" in done.stderr and "255" in done.stderr, done.stderr[-500:]


def test_a_react_job_fitted_to_the_actors_budget_never_parts_a_call_from_its_result(redis_base: str) -> None:
    """docs/context.md: "mono and ReAct jobs use the Actor's" budget; never left out: "the task: the
    goal and the context"; "a call is never shown without its result, nor a result without its call"
    (an OpenAI-compatible host refuses a request that parts them)."""
    with cluster_of(redis_base, hosts.thinker, hosts.react_host, env=budget_env({"actor": 5000})) as (
        cluster,
        _thinker_host,
        actor_host,
    ):
        cluster.start("actor", "tools")
        mark = "GOAL-REACT-8e21"
        handle = cluster.submit(
            goal=f"{mark} Read every page of the archive.",
            context="CONTEXT-MARK-44: the archive is in the basement.",
            reasoner="react",
            tools=["page"],
            max_rounds=2 * hosts.REACT_PAGES + 4,
        )
        result = handle.result(timeout=RESULT_SECONDS)
        events = events_of(handle)
    requests = of_job(actor_host, mark)
    parted = [(i, hosts.pairing_error(r)) for i, r in enumerate(requests) if hosts.pairing_error(r)]
    assert parted == [], f"requests that part a call from its result: {parted}"
    assert result.status == "completed", result.error
    assert any(e.type == "memory_compacted" for e in events), "never fitted: the test proves nothing"
    assert over_budget(requests, 5000 - RESERVE) == []
    assert all("CONTEXT-MARK-44" in hosts.text_of(r) for r in requests), "the context was left out"


# -- in process -------------------------------------------------------------------------------------


def test_in_process_a_long_dual_run_fits_each_roles_budget_and_keeps_every_round() -> None:
    """docs/in-process.md: "Each model service has its own context budget:
    `LiteLlmModelService(..., context_tokens=8192, reply_reserve=1024)` ... A long run keeps every
    request inside it by leaving its oldest rounds out of that request (`outcome.messages` keeps them
    all)"; docs/artifacts.md: "It works the same in process and on workers" and
    "`ReasonerOutcome.artifacts` maps each handle to its text"."""
    from tandem.reasoner import DualModelReasoner, LiteLlmModelService, Task
    from tandem.toolkit import Tool

    def page(n: int, kb: int) -> str:
        """Return page ``n`` of the archive, ``kb`` thousand characters long.

        Args:
            n: the page number.
            kb: its size in thousands of characters.
        """
        return page_text(n, kb)

    rounds = 24
    with OpenAIServer(hosts.thinker) as thinker_host, OpenAIServer(plan_model.actor) as actor_host:
        thinker = LiteLlmModelService(
            "openai/thinker-model",
            api_base=thinker_host.url,
            api_key="in-process-key",
            context_tokens=WINDOW["thinker"],
            reply_reserve=RESERVE,
        )
        actor = LiteLlmModelService(
            "openai/actor-model",
            api_base=actor_host.url,
            api_key="in-process-key",
            context_tokens=WINDOW["actor"],
            reply_reserve=RESERVE,
        )
        goal = f"GOAL-INPROC-5a5a Read the archive. ROUNDS={rounds} READ_AT={rounds - 1}"
        outcome = DualModelReasoner(thinker=thinker, actor=actor).run(
            Task(goal=goal, tools=[Tool.from_function(page)], max_rounds=rounds + 2)
        )
        thinker_requests, actor_requests = thinker_host.requests, actor_host.requests
    assert outcome.status == "completed", outcome.error
    assert over_budget(thinker_requests, BUDGET["thinker"]) == []
    assert over_budget(actor_requests, BUDGET["actor"]) == []
    assert any("PAGE-0-START" not in hosts.text_of(r) for r in thinker_requests), "never fitted"
    results = [r for m in outcome.messages for r in m.function_results]
    assert all(any(f"PAGE-{n}-START" in r.output for r in results) for n in range(rounds - 2))
    handle, _length = hosts.needle_handle(goal)
    assert outcome.artifacts.get(handle) == page_text(0, 20)
    read = [r for r in results if r.name == "read_artifact"]
    assert read and NEEDLE in read[0].output
