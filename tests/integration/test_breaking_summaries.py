"""Breaking tests of durable compaction, summaries ON (issue 34), written from docs/context.md,
docs/events.md (``memory_compacted``), docs/configuration.md and docs/artifacts.md alone, against
real ``celery worker`` processes, a real Redis and two local OpenAI-compatible hosts that keep
every request they get.

One cluster serves the module: the Thinker's window 6,000 tokens and the Actor's 9,000, each
reply capped at 500 (budgets 5,500 and 8,500; ``TANDEM_COMPACT_AT`` at its default, 0.8), the
Actor's summaries written by ``TANDEM_ACTOR_SUMMARY_MODEL``, the Thinker's by its own model. Each
job's goal starts with a mark (``JOB-...``) the hosts look its ``Plan`` up by: how many rounds,
whether each round also calls ``notify`` (a person approves it), which summary requests fail and
how, which one is held until the test lets it go. The Thinker instructs ``page(n=k-1, kb=2)`` at
round ``k`` (from 1), so round ``n``'s (from 0) tool result, and only it, holds ``PAGE-<n>-START``:
the rounds a summary request read are the pages it holds. Requests are counted by docs/context.md's
conservative rule (``context_hosts.estimate``: no tokenizer is at hand for these models).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tandem.client.handle import JobHandle
from tandem.reasoner.context.summary import SUMMARY_PROMPT
from tandem.reasoner.messages import ModelMessage
from tandem.tasks.state.keys import live_shard_key, live_shard_of
from tests.event_order import order_problems
from tests.integration import context_hosts as hosts
from tests.integration import plan_model
from tests.integration.breaking_context_tools import NEEDLE, handle_of, page_text
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

pytestmark = pytest.mark.integration

WINDOW = {"thinker": 6000, "actor": 9000}
CAP = 500
BUDGET = {role: window - CAP for role, window in WINDOW.items()}
AT = 0.8
"""``TANDEM_COMPACT_AT``'s default."""
KB = 2
"""Each round's page: 2,000 characters, about 700 tokens."""
ACTOR_SUMMARY_MODEL = "actor-summarizer"
ACTOR_KEY = "actor-key-5e1"
MODEL_USAGE = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
SUMMARY_USAGE = {"prompt_tokens": 1000, "completion_tokens": 1, "total_tokens": 1001}
"""What the hosts report for every model call and every summary call (so a job's usage is exact)."""
MARK = re.compile(r"JOB-[0-9a-z]+")
PAGE = re.compile(r"PAGE-(\d+)-START")
Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]


@dataclass
class Plan:
    """What the hosts do for one job (found by the mark its goal starts with)."""

    rounds: int
    kb: int = KB
    """Each page's size in thousands of characters (over 8: kept as an artifact, a preview shown)."""
    notify: bool = False
    """Each round also calls ``notify`` (it needs a person's approval)."""
    fail: str | None = None
    """How the summary requests of ``fail_role``'s compactions numbered in ``fail_at`` (from 1)
    fail: ``500``, ``html`` (a 200 that is no chat completion), ``empty``, ``thinking`` (only a
    thinking section), ``long`` (a reply longer than what it replaces) or ``verbose`` (a usable
    summary, shorter than what it replaces, but nine tenths of it)."""
    fail_role: str = "thinker"
    fail_at: frozenset[int] = frozenset()
    hold_role: str | None = None
    hold_at: int = 1
    """The first summary request of ``hold_role``'s ``hold_at``-th compaction waits until
    ``release`` is set."""
    abandon: bool = False
    """The held request is answered by a dropped connection (its worker was killed meanwhile)."""
    reached: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    held: RecordedRequest | None = None
    ask_at: int | None = None
    """At this round (from 1) the Thinker also instructs ``ask_person``."""
    read_at: int | None = None
    """At this round (from 1) the Thinker instructs ``read_artifact`` of page 0's end instead."""
    react: bool = False
    """A ReAct job: the Actor's host is ``context_hosts.react_host`` (native tool calls, refused
    when a call and its result are parted; a 3 KB page a step, 14 in all)."""


class World:
    """The two hosts' scripts: each job's ``Plan`` by its mark, and the summary requests counted."""

    def __init__(self) -> None:
        self.plans: dict[str, Plan] = {}
        self.spans: dict[tuple[str, str], list[frozenset[int]]] = {}
        """The rounds each compaction of a job's role read (a step run again reads the same)."""
        self.lock = threading.Lock()
        self.count = 0

    def new(self, plan: Plan) -> str:
        """A fresh mark for ``plan``."""
        with self.lock:
            self.count += 1
            mark = f"JOB-{self.count:03d}{time.monotonic_ns() % 100_000:05d}"
            self.plans[mark] = plan
        return mark

    def thinker(self, request: RecordedRequest) -> Reply:
        if is_summary(request):
            return self.summary("thinker", request)
        plan = self.plans[mark_of(request)]
        k = hosts.round_of(request)
        if k >= plan.rounds:
            return _usage(Reply("<instruction>TASK_DONE: deliver what the pages said.</instruction>"))
        calls: list[dict[str, Any]] = [{"name": "page", "args": {"n": k - 1, "kb": plan.kb}}]
        if plan.notify:
            calls.append({"name": "notify", "args": {"to": "ops@example.com"}})
        if plan.ask_at == k:
            calls.append(
                {"name": "ask_person", "args": {"question": "Which codeword should the report use?"}}
            )
        if plan.read_at == k:
            text = page_text(0, plan.kb)
            args = {"handle": handle_of(0, 1, text), "offset": len(text) - 200, "length": 200}
            calls = [{"name": "read_artifact", "args": args}]
        instruction = f"<instruction>INSTR-{k}: read page {k - 1}.</instruction>"
        return _usage(Reply(f"{instruction}\n<input>{json.dumps(calls)}</input>"))

    def actor(self, request: RecordedRequest) -> Reply:
        if is_summary(request):
            return self.summary("actor", request)
        if self.plans[mark_of(request)].react:
            return _usage(hosts.react_host(request))
        return _usage(plan_model.actor(request))

    def summary(self, role: str, request: RecordedRequest) -> Reply:
        mark = mark_of(request)
        plan = self.plans[mark]
        read = read_by(request)
        with self.lock:
            seen = self.spans.setdefault((mark, role), [])
            first_time = read not in seen
            if first_time:
                seen.append(read)
            n = seen.index(read) + 1
        if plan.hold_role == role and n == plan.hold_at and first_time:
            plan.held = request
            plan.reached.set()
            plan.release.wait(RESULT_SECONDS)
            if plan.abandon:
                return Reply(disconnect=True)
        if plan.fail is not None and plan.fail_role == role and n in plan.fail_at:
            return failing(plan.fail, request)
        pages = sorted(read)
        text = f"{role.upper()}-SUMMARY {mark} #{n}: pages {pages} were read (request {request.number})."
        return Reply(text, usage=SUMMARY_USAGE)


def failing(kind: str, request: RecordedRequest) -> Reply:
    if kind == "500":
        return Reply(status=500)
    if kind == "html":
        return Reply.malformed("html")
    if kind == "empty":
        return Reply("", usage=SUMMARY_USAGE)
    if kind == "thinking":
        return Reply("<deep_thinking>I only think about the pages.</deep_thinking>", usage=SUMMARY_USAGE)
    if kind == "long":
        return Reply(hosts.text_of(request) * 2, usage=SUMMARY_USAGE)
    if kind == "verbose":
        text = str(request["messages"][-1]["content"])
        return Reply(text[: int(len(text) * 0.9)], usage=SUMMARY_USAGE)
    raise ValueError(kind)


def _usage(reply: Reply) -> Reply:
    reply.usage = MODEL_USAGE
    return reply


WORLD = World()


def is_summary(request: RecordedRequest) -> bool:
    return str(request["messages"][0].get("content")) == SUMMARY_PROMPT


def mark_of(request: RecordedRequest) -> str:
    found = MARK.search(hosts.text_of(request))
    assert found, "a request without a job's mark"
    return found.group(0)


def read_by(request: RecordedRequest) -> frozenset[int]:
    """The rounds (from 0) whose page a request holds."""
    return frozenset(int(n) for n in PAGE.findall(hosts.text_of(request)))


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    """Where the workers export their spans."""
    with OtlpReceiver() as got:
        yield got


@pytest.fixture(scope="module")
def world(redis_base: str, receiver: OtlpReceiver) -> Iterator[Hosts]:
    """Thinker, actor and tools workers on the module's budgets; the Actor's summaries by its own
    summary model (``TANDEM_ACTOR_SUMMARY_MODEL``) on its host, with its own API key; traced."""
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": "tandem-worker",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "TANDEM_TOOLKIT": "tests.integration.breaking_context_tools:toolkit",
        "TANDEM_LEASE_SECONDS": "2",
        "TANDEM_RETRY_HOLD_SECONDS": "1",  # a summary host answering 500 parks its step sooner
        "TANDEM_ACTOR_SUMMARY_MODEL": f"openai/{ACTOR_SUMMARY_MODEL}",
        "TANDEM_ACTOR_API_KEY": ACTOR_KEY,
        **{f"TANDEM_{role.upper()}_CONTEXT_TOKENS": str(w) for role, w in WINDOW.items()},
        **{f"TANDEM_{role.upper()}_MAX_TOKENS": str(CAP) for role in WINDOW},
    }
    gen = _make_cluster(redis_base, thinker_script=WORLD.thinker, actor_script=WORLD.actor, **env)
    cluster, thinker_host, actor_host = next(gen)
    cluster.start("thinker", "actor", "tools")
    yield cluster, thinker_host, actor_host
    next(gen, None)  # stops the workers; every tandem key must have had a TTL


# -- reading what happened ----------------------------------------------------------------------


def of_job(host: OpenAIServer, mark: str, after: int = 0) -> list[RecordedRequest]:
    """The requests ``host`` got for the job (and its forks) marked ``mark``, numbered past ``after``."""
    return [r for r in host.requests if r.number > after and mark_of(r) == mark]


def calls(host: OpenAIServer, mark: str, after: int = 0) -> list[RecordedRequest]:
    return [r for r in of_job(host, mark, after) if not is_summary(r)]


def summaries(host: OpenAIServer, mark: str, after: int = 0) -> list[RecordedRequest]:
    return [r for r in of_job(host, mark, after) if is_summary(r)]


def over_budget(requests: list[RecordedRequest], role: str) -> list[tuple[int, int]]:
    return [(r.number, hosts.request_tokens(r)) for r in requests if hosts.request_tokens(r) > BUDGET[role]]


def entries(cluster: Cluster, job_id: str, role: str) -> list[ModelMessage]:
    """The job's stored summary entries of ``role``'s view, oldest first."""
    found = [
        m
        for m in cluster.store.memory(job_id).get_messages()
        if m.role == "summary" and m.summary is not None and m.summary.role == role
    ]
    return sorted(found, key=lambda m: m.round)


def span(entry: ModelMessage) -> tuple[int, int, int]:
    assert entry.summary is not None
    return entry.summary.first, entry.summary.since, entry.summary.last


def events_of(handle: JobHandle) -> list[Any]:
    return list(handle.events(timeout=30))


def compactions(events: list[Any], role: str) -> list[Any]:
    return [e for e in events if e.type == "memory_compacted" and e.role == role]


def wait_for(what: Callable[[], Any], message: str, timeout: float = EVENT_SECONDS) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {message}")


def no_round_read_twice(requests: list[RecordedRequest]) -> None:
    """docs/context.md: "no round is ever read by two summaries" (a step run again asks for the
    same rounds again: the same set, never an overlapping other one)."""
    sets = list(dict.fromkeys(read_by(r) for r in requests))
    overlapping = [(sorted(a), sorted(b)) for i, a in enumerate(sets) for b in sets[i + 1 :] if a & b]
    assert overlapping == [], f"rounds read by two summary requests: {overlapping}"


def rolled(stored: list[ModelMessage]) -> None:
    """docs/context.md: "Summaries roll: the next one reads the previous summary and the rounds after
    it, and stands for every round from the first on"."""
    for previous, entry in itertools.pairwise(stored):
        (first, _, last), (first2, since2, _) = span(previous), span(entry)
        assert (first2, since2) == (first, last + 1), f"{span(previous)} then {span(entry)}"


def the_events_match_the_entries(events: list[Any], stored: list[ModelMessage], role: str) -> None:
    """docs/events.md: each summary (or its fallback) publishes one ``memory_compacted`` with
    ``summary_of_rounds`` ``[first, last]``, ``how``, ``rounds_summarized`` (the rounds it read
    itself; 0 when dropped) and ``rounds_dropped`` (``summary_of_rounds`` again when dropped, else
    ``[]``). (A request that left rounds out publishes one too: ``dropped``, with no entry.)"""
    mine = compactions(events, role)
    for entry in stored:
        assert entry.summary is not None
        first, since, last = span(entry)
        how = entry.summary.how
        found = [e for e in mine if e.summary_of_rounds == [first, last] and e.how == how]
        assert len(found) == 1, f"{role}: {len(found)} events for the entry {span(entry)} {how}: {mine}"
        event = found[0]
        if how == "summarized":
            assert (event.rounds_summarized, event.rounds_dropped) == (last - since + 1, []), event
        else:
            assert (event.rounds_summarized, event.rounds_dropped) == (0, [first, last]), event
        assert last <= event.round - 2, f"the round before the step's own was summarized: {event}"
    summarized = [e for e in mine if e.how == "summarized"]
    assert len(summarized) == sum(1 for e in stored if e.summary and e.summary.how == "summarized")


def keys_have_ttls(cluster: Cluster, job_id: str) -> None:
    prefix = cluster.settings.prefix
    keys = [k.decode() for k in cluster.redis.scan_iter(match=f"{prefix}:*{job_id}*")]
    assert keys, "the job has no keys"
    untimed = [k for k in keys if cluster.redis.ttl(k) < 0]
    assert untimed == [], f"keys of the job without a TTL: {untimed}"


def nothing_runs(cluster: Cluster, job_id: str) -> None:
    """The job has ended and no worker holds or will run a step of it: it left the live-job index."""
    key = live_shard_key(cluster.settings.prefix, live_shard_of(job_id))
    wait_for(lambda: cluster.redis.zscore(key, job_id) is None, "the job to leave the live-job index")


def group_running(cluster: Cluster, role: str) -> Any:
    """The worker group whose ``role`` worker is alive."""
    return next(
        g for g in reversed(cluster.groups) if role in g.processes and g.processes[role].poll() is None
    )


# -- a plain long job: each role's own view, its summary model -----------------------------------


@dataclass
class Ran:
    handle: JobHandle
    result: Any
    events: list[Any]
    mark: str


PLAIN_ROUNDS = 12


@pytest.fixture(scope="module")
def plain(world: Hosts) -> Ran:
    """A 12-round dual job that outgrows both roles' thresholds: the Thinker's (4,400 tokens) every
    three rounds or so, the Actor's (6,800) later."""
    cluster, _, _ = world
    mark = WORLD.new(Plan(rounds=PLAIN_ROUNDS))
    handle = cluster.submit(goal=f"{mark} Read the archive, a page a round.", max_rounds=PLAIN_ROUNDS + 2)
    result = handle.result(timeout=RESULT_SECONDS)
    return Ran(handle, result, events_of(handle), mark)


def test_each_role_compacts_its_own_view_by_its_own_budget_and_says_so(world: Hosts, plain: Ran) -> None:
    """docs/context.md: "When the next request of a role would pass `TANDEM_COMPACT_AT` of its
    budget, the rounds it could leave out (every round before the one before the step's own, not
    summarized yet) are first summarized"; "Later requests of that role read the summary ... in
    place of those rounds"; "The Thinker and the Actor compact separately, each its own view by its
    own budget"; docs/events.md: `memory_compacted` carries `round`, `role`, `tokens_before`,
    `tokens_after`, `summary_of_rounds`, `how`, `rounds_summarized`; "tandem keeps every request a
    model step sends inside its role's context budget"."""
    cluster, thinker_host, actor_host = world
    assert plain.result.status == "completed", plain.result
    assert plain.result.rounds == PLAIN_ROUNDS
    assert order_problems(plain.events) == []
    for role, host, other in (("thinker", thinker_host, "actor"), ("actor", actor_host, "thinker")):
        assert over_budget(of_job(host, plain.mark), role) == [], f"{role} requests over {BUDGET[role]}"
        stored = entries(cluster, plain.handle.id, role)
        assert stored, f"the {role}'s view was never summarized: the test proves nothing"
        assert [e.summary.how for e in stored if e.summary] == ["summarized"] * len(stored)
        assert span(stored[0])[:2] == (0, 0)
        rolled(stored)
        the_events_match_the_entries(plain.events, stored, role)
        asks = summaries(host, plain.mark)
        assert len(asks) == len(stored), f"{role}: {len(asks)} summary requests, {len(stored)} entries"
        no_round_read_twice(asks)
        for n, (ask, entry) in enumerate(zip(asks, stored, strict=True), start=1):
            _, since, last = span(entry)
            assert read_by(ask) == set(range(since, last + 1)), f"{role}: request {n} read {read_by(ask)}"
            assert entry.content.startswith(f"{role.upper()}-SUMMARY {plain.mark} #{n}:"), entry.content
        own = calls(host, plain.mark)
        assert [r for r in own if f"{other.upper()}-SUMMARY" in hosts.text_of(r)] == [], (
            f"the {role} read the {other}'s summary"
        )
        for event in [e for e in compactions(plain.events, role) if e.how == "summarized"]:
            # it was due by this role's own budget, and the request it made fits that budget
            assert event.tokens_before > AT * BUDGET[role], event
            assert event.tokens_after < event.tokens_before and event.tokens_after <= BUDGET[role], event
            (entry,) = [s for s in stored if s.summary and s.summary.last == event.summary_of_rounds[1]]
            (request,) = [r for r in own if hosts.round_of(r) == event.round + 1]
            text = hosts.text_of(request)
            assert entry.content in text, f"{role}'s round {event.round} request lacks its summary"
            _, _, last = span(entry)
            assert [n for n in read_by(request) if n <= last] == [], "a summarized round was sent whole"
            assert set(range(last + 1, event.round)) <= read_by(request), "a round after the summary was lost"
            assert hosts.request_tokens(request) <= event.tokens_after, (event, hosts.request_tokens(request))
    first = {role: min(e.round for e in compactions(plain.events, role)) for role in ("thinker", "actor")}
    assert first["thinker"] < first["actor"], f"the roles did not compact by their own budgets: {first}"


def test_the_roles_summary_model_writes_its_summaries_and_the_job_pays_for_them(
    world: Hosts, plain: Ran
) -> None:
    """docs/configuration.md: `TANDEM_<ROLE>_SUMMARY_MODEL` is "a LiteLLM model string that writes
    the role's summaries of its older rounds, called with the role's other settings (`_API_BASE`,
    `_API_KEY`, `_CONTEXT_TOKENS`, ...)", by default "the role's own model"; docs/context.md: a
    summary "costs one model call of the role's host per compaction, its tokens counted in the
    job's usage"."""
    _, thinker_host, actor_host = world
    assert plain.result.status == "completed", plain.result
    actor_asks, actor_calls = summaries(actor_host, plain.mark), calls(actor_host, plain.mark)
    thinker_asks, thinker_calls = summaries(thinker_host, plain.mark), calls(thinker_host, plain.mark)
    assert actor_asks and thinker_asks
    assert {r["model"] for r in actor_asks} == {ACTOR_SUMMARY_MODEL}
    assert {r["model"] for r in actor_calls} == {"actor-model"}
    assert {r["model"] for r in thinker_asks} == {"thinker-model"}  # no summary model: the role's own
    assert {r["model"] for r in thinker_calls} == {"thinker-model"}
    assert {r.headers.get("authorization") for r in actor_asks + actor_calls} == {f"Bearer {ACTOR_KEY}"}
    assert {hosts.reply_cap(r) for r in actor_asks} == {CAP}, "the summary call is not capped as the role's"
    assert over_budget(actor_asks, "actor") == []
    usage = plain.result.usage
    model_calls = len(actor_calls) + len(thinker_calls)
    summary_calls = len(actor_asks) + len(thinker_asks)
    assert usage.calls == model_calls + summary_calls, usage
    assert usage.prompt_tokens == 100 * model_calls + 1000 * summary_calls, usage
    assert usage.completion_tokens == 10 * model_calls + summary_calls, usage


def test_each_compaction_step_is_a_traced_step_of_its_own(
    world: Hosts, plain: Ran, receiver: OtlpReceiver
) -> None:
    """docs/context.md: the compaction step "is claimed, leased, traced (a `tandem.step` span of kind
    `compact_<role>`), committed ... like every step"; "the step's trace span gets an event
    `tandem.memory_compacted`"; docs/tracing.md: model calls are spans `chat <model>` with
    `gen_ai.request.model`, and a job is one trace."""
    assert plain.result.status == "completed", plain.result
    wanted = {
        (f"compact_{e.role}", e.round)
        for e in plain.events
        if e.type == "memory_compacted" and e.how == "summarized"
    }
    assert {kind for kind, _ in wanted} == {"compact_thinker", "compact_actor"}

    def job_spans() -> list[ReceivedSpan]:
        return [s for s in receiver.spans() if s.attributes.get("tandem.job_id") == plain.handle.id]

    def compact_steps() -> list[ReceivedSpan]:
        return [
            s
            for s in job_spans()
            if s.name == "tandem.step"
            and str(s.attributes.get("tandem.step.kind", "")).startswith("compact_")
        ]

    wait_for(
        lambda: (
            wanted
            <= {(s.attributes["tandem.step.kind"], s.attributes["tandem.round"]) for s in compact_steps()}
        ),
        "the compaction steps' spans",
    )
    steps = compact_steps()
    found = {(s.attributes["tandem.step.kind"], s.attributes["tandem.round"]) for s in steps}
    assert found == wanted, "a compaction step that stored nothing, or ran twice, was traced"
    for s in steps:
        assert s.attributes.get("tandem.role") == s.attributes["tandem.step.kind"].removeprefix("compact_"), s
        assert s.attributes.get("tandem.commit") == "committed", s
        assert "tandem.memory_compacted" in s.events, s
    traces = {s.trace_id for s in job_spans()}
    assert len(traces) == 1, "the job is not one trace"
    spans = [s for s in receiver.spans() if s.trace_id in traces]  # model spans name no job
    by_id = {s.span_id: s for s in spans}

    def step_of(span: ReceivedSpan) -> ReceivedSpan | None:
        while span.parent_id in by_id:
            span = by_id[span.parent_id]
            if span.name == "tandem.step":
                return span
        return None

    models: dict[str, set[str]] = {}
    for chat in [s for s in spans if s.name.startswith("chat ")]:
        step = step_of(chat)
        assert step is not None, chat
        models.setdefault(str(step.attributes["tandem.step.kind"]), set()).add(
            str(chat.attributes["gen_ai.request.model"])
        )
    assert models["compact_actor"] == {f"openai/{ACTOR_SUMMARY_MODEL}"}
    assert models["compact_thinker"] == {"openai/thinker-model"}
    assert models["actor"] == {"openai/actor-model"}


# -- a summary model that fails ---------------------------------------------------------------------


FAILING = {
    # kind: (the role whose summaries fail, which of its compactions fail, from 1)
    "500": ("thinker", {1}),
    "html": ("thinker", {2}),
    "empty": ("thinker", {2, 3}),
    "thinking": ("actor", {1}),
    "long": ("thinker", {1, 2, 3}),
}
FAIL_ROUNDS = 12
MARKER = re.compile(r"\brounds? (\d+)(?:\s*(?:-|–|to)\s*(\d+))?[^.\]]*\bleft out")


def marker_rounds(text: str) -> list[tuple[int, int]]:
    """The rounds (as written, from 1) each "left out" marker of ``text`` names."""
    return [(int(a), int(b or a)) for a, b in MARKER.findall(text)]


@pytest.fixture(scope="module")
def failed(world: Hosts) -> dict[str, Ran]:
    """One job per way a summary fails, run side by side."""
    cluster, _, _ = world
    handles = {}
    for kind, (role, at) in FAILING.items():
        mark = WORLD.new(Plan(rounds=FAIL_ROUNDS, fail=kind, fail_role=role, fail_at=frozenset(at)))
        handles[kind] = (
            mark,
            cluster.submit(goal=f"{mark} Read the archive, a page a round.", max_rounds=14),
        )
    return {
        kind: Ran(handle, handle.result(timeout=RESULT_SECONDS), events_of(handle), mark)
        for kind, (mark, handle) in handles.items()
    }


@pytest.mark.parametrize("kind", list(FAILING))
def test_a_failing_summary_leaves_a_marker_and_the_job_goes_on(
    world: Hosts, failed: dict[str, Ran], kind: str
) -> None:
    """docs/context.md: "When summarizing fails, because the model errs (a transient error parks the
    step and tries again twice, as any step; any other error at once) or returns nothing usable
    (empty, only thinking, or no shorter than what it replaces), a `dropped` entry is stored instead:
    the last summary under it and a marker saying which rounds are left out. Those rounds are not
    asked for again, and the job goes on: it never fails for length while what is never left out
    fits"; docs/events.md: `how` `dropped`, `rounds_summarized` 0, `rounds_dropped` the rounds."""
    cluster, thinker_host, actor_host = world
    ran = failed[kind]
    role, failing_at = FAILING[kind]
    host = thinker_host if role == "thinker" else actor_host
    assert ran.result.status == "completed", ran.result
    assert ran.result.rounds == FAIL_ROUNDS
    assert order_problems(ran.events) == []
    for r, h in (("thinker", thinker_host), ("actor", actor_host)):
        assert over_budget(of_job(h, ran.mark), r) == [], f"{r} requests over {BUDGET[r]}"
    stored = entries(cluster, ran.handle.id, role)
    hows = [e.summary.how if e.summary else "" for e in stored]
    assert len(hows) >= max(failing_at), f"fewer compactions than the test needs: {hows}"
    assert hows == ["dropped" if n in failing_at else "summarized" for n in range(1, len(hows) + 1)], hows
    rolled(stored)
    the_events_match_the_entries(ran.events, stored, role)
    asks = summaries(host, ran.mark)
    no_round_read_twice(asks)
    # not asked for again: once a summary request read rounds past a failed one's, no request
    # reads those rounds again
    lowest = [min(read_by(a)) for a in asks]
    assert lowest == sorted(lowest), f"rounds asked for again: {[sorted(read_by(a)) for a in asks]}"
    own = calls(host, ran.mark)
    for n, entry in enumerate(stored, start=1):
        first, _, last = span(entry)
        how = entry.summary.how if entry.summary else ""
        (event,) = [
            e for e in compactions(ran.events, role) if (e.summary_of_rounds, e.how) == ([first, last], how)
        ]
        (request,) = [r for r in own if hosts.round_of(r) == event.round + 1]  # the request it was due for
        text = hosts.text_of(request)
        assert entry.content in text, f"entry {n} does not stand in for its rounds"
        assert [p for p in read_by(request) if p <= last] == [], "a compacted round was sent whole"
        if n not in failing_at:
            continue
        under = [e for e in stored[: n - 1] if e.summary and e.summary.how == "summarized"]
        good = under[-1] if under else None
        # the marker names the rounds left out, as the requests number rounds (from 1): those after
        # the last summary that came, to the entry's last; one marker, the last summary under it
        left_from = span(good)[2] + 1 if good is not None else first
        assert marker_rounds(entry.content) == [(left_from + 1, last + 1)], entry.content
        if good is not None:
            assert good.content in entry.content, "the last summary is not under the marker"
    failed_asks = [a for a in asks if WORLD.spans[ran.mark, role].index(read_by(a)) + 1 in failing_at]
    if kind in ("empty", "thinking", "long"):
        # nothing usable is no error to try again: each failed compaction asked once
        assert len(failed_asks) == len(failing_at), [sorted(read_by(a)) for a in failed_asks]
    if kind == "html":
        assert len(failed_asks) == 5, "a 200 that is no chat completion is tried 5 times in all"
    if kind == "500":
        # a transient error parks the step and tries again twice
        kinds = [e.type if e.type != "memory_compacted" else e.how for e in ran.events]
        assert kinds[: kinds.index("dropped")].count("waiting") == 2, kinds


# -- fork and resume ------------------------------------------------------------------------------


def stored_rounds(cluster: Cluster, job_id: str, below: int) -> list[str]:
    """The job's stored messages of rounds before ``below``, summaries apart."""
    return [
        m.model_dump_json()
        for m in cluster.store.memory(job_id).get_messages()
        if m.role != "summary" and m.round < below
    ]


def test_a_fork_from_a_summarized_round_reads_the_original_messages(world: Hosts, plain: Ran) -> None:
    """docs/context.md: the original messages "stay in Redis for the job's lifetime: clients,
    `resume` and `fork` read them"; "a fork from a round that a summary covers gets the original
    messages, not the summary (the fork summarizes on its own when it needs to)"."""
    cluster, thinker_host, actor_host = world
    assert plain.result.status == "completed", plain.result
    source = {role: entries(cluster, plain.handle.id, role) for role in ("thinker", "actor")}
    _, _, last = span(source["thinker"][0])
    at = last  # rounds 0..last-1 kept: the Thinker's first summary (and the Actor's) covers round `at`
    assert all(span(source[role][0])[2] >= at for role in source)
    since_t, since_a = thinker_host.request_count, actor_host.request_count
    fork = plain.handle.fork(at, max_rounds=PLAIN_ROUNDS + 2)
    result = fork.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert stored_rounds(cluster, fork.id, at) == stored_rounds(cluster, plain.handle.id, at)
    for role, host, since in (("thinker", thinker_host, since_t), ("actor", actor_host, since_a)):
        own = calls(host, plain.mark, after=since)
        assert own and hosts.round_of(own[0]) == at + 1, [hosts.round_of(r) for r in own]
        text = hosts.text_of(own[0])
        assert read_by(own[0]) == set(range(at)), (
            f"the fork's first {role} request: {sorted(read_by(own[0]))}"
        )
        assert NEEDLE in text, f"round 0's original page is not in the fork's first {role} request"
        assert "-SUMMARY " not in text and "[Summary of" not in text, f"the fork's {role} read a summary"
        assert over_budget(own, role) == []
        # the fork summarizes on its own, from the originals: none of the source's entries is its
        forked = entries(cluster, fork.id, role)
        assert {e.content for e in forked} & {e.content for e in source[role]} == set()
        asks = summaries(host, plain.mark, after=since)
        assert len(asks) == len(forked)
        if forked:
            assert span(forked[0])[:2] == (0, 0) and 0 in read_by(asks[0])
        rolled(forked)
        no_round_read_twice(asks)
    assert entries(cluster, fork.id, "thinker"), "the fork never summarized: the test proves less"


# -- races: cancels, kills, messages and approvals around a summary ---------------------------------


def later_than(host: OpenAIServer, mark: str, request: RecordedRequest) -> list[tuple[int, str]]:
    return [(r.number, r["model"]) for r in of_job(host, mark) if r.received_at > request.received_at]


def test_a_cancel_during_a_summary_keeps_it_and_a_resume_goes_on_from_it(world: Hosts) -> None:
    """docs/context.md: "A cancel during the summary ends the job at the next step (the summary,
    committed, stays)"; "a resumed job goes on from the summary"; "no round is ever read by two
    summaries"; docs/durability: every key has a TTL."""
    cluster, thinker_host, actor_host = world
    plan = Plan(rounds=12, hold_role="thinker", hold_at=2)
    mark = WORLD.new(plan)
    handle = cluster.submit(goal=f"{mark} Read the archive, a page a round.", max_rounds=14)
    assert plan.reached.wait(EVENT_SECONDS), "the Thinker's second summary was never asked for"
    held = plan.held
    assert held is not None
    handle.cancel()
    plan.release.set()
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "cancelled", result
    events = events_of(handle)
    assert [e.status for e in events if e.type == "final"] == ["cancelled"]
    assert order_problems(events) == []
    stored = entries(cluster, handle.id, "thinker")
    assert len(stored) == 2, [span(e) for e in stored]
    assert stored[1].content.endswith(f"(request {held.number}).") and set(range(*span(stored[1])[1:])) | {
        span(stored[1])[2]
    } == read_by(held), "the summary written during the cancel was not the one kept"
    the_events_match_the_entries(events, stored, "thinker")
    # the next step ended the job: no model call after the summary's
    assert later_than(thinker_host, mark, held) == [] and later_than(actor_host, mark, held) == []
    nothing_runs(cluster, handle.id)
    keys_have_ttls(cluster, handle.id)

    since_t = thinker_host.request_count
    handle.resume()
    resumed = handle.result(timeout=RESULT_SECONDS)
    assert resumed.status == "completed", resumed
    assert resumed.rounds == 12
    first = calls(thinker_host, mark, after=since_t)[0]
    assert stored[1].content in hosts.text_of(first), "the resumed run did not go on from the summary"
    assert [n for n in read_by(first) if n <= span(stored[1])[2]] == []
    after = entries(cluster, handle.id, "thinker")
    assert [e.content for e in after[:2]] == [e.content for e in stored]
    rolled(after)
    asks = summaries(thinker_host, mark)
    no_round_read_twice(asks)
    assert len(asks) == len(after), "a summary was asked for twice"
    for role, host in (("thinker", thinker_host), ("actor", actor_host)):
        assert over_budget(of_job(host, mark), role) == []
    keys_have_ttls(cluster, handle.id)


def actor_queue_empty(cluster: Cluster) -> bool:
    lists = [k for k in cluster.redis.scan_iter(match="actor*") if cluster.redis.type(k) == b"list"]
    return all(cluster.redis.llen(k) == 0 for k in lists)


def test_a_cancel_while_the_summary_step_has_lost_its_worker_ends_the_job_and_nothing_runs_it(
    world: Hosts,
) -> None:
    """docs/context.md: a compaction step is "claimed, leased, traced, committed and sent again by the
    reconciler like every step"; "a run that lost its lease (a killed worker) stores nothing"; a
    cancel "ends the job at the next step"; docs/distributed.md: "steps still queued end at once
    when a worker takes them, without calling a model or a tool"; "a resumed job goes on"."""
    cluster, thinker_host, actor_host = world
    plan = Plan(rounds=12, hold_role="actor", hold_at=1, abandon=True)
    mark = WORLD.new(plan)
    handle = cluster.submit(goal=f"{mark} Read the archive, a page a round.", max_rounds=14)
    assert plan.reached.wait(EVENT_SECONDS), "the Actor's first summary was never asked for"
    held = plan.held
    assert held is not None
    cluster.kill(group_running(cluster, "actor"), "actor")
    handle.cancel()
    result = handle.result(timeout=RESULT_SECONDS)  # no actor worker is left to take the step
    assert result.status == "cancelled", result
    plan.release.set()
    cluster.start("actor", name="actor-2")
    wait_for(lambda: actor_queue_empty(cluster), "the actor queue to be taken")
    # a job after it: the new actor worker has taken whatever was sent before it
    probe = WORLD.new(Plan(rounds=1))
    assert cluster.submit(goal=f"{probe} Say done.", max_rounds=2).result(timeout=RESULT_SECONDS).status == (
        "completed"
    )
    events = events_of(handle)
    assert [e.status for e in events if e.type == "final"] == ["cancelled"]
    assert summaries(actor_host, mark) == [held], "the summary was asked for again after the cancel"
    assert entries(cluster, handle.id, "actor") == [], "the killed run stored a summary"
    assert compactions(events, "actor") == []
    assert later_than(thinker_host, mark, held) == [] and later_than(actor_host, mark, held) == []
    nothing_runs(cluster, handle.id)
    keys_have_ttls(cluster, handle.id)
    assert cluster.exited() == []

    # resumed, the job asks for the same summary (nothing of it was stored) and goes on from it
    since = actor_host.request_count
    handle.resume()
    resumed = handle.result(timeout=RESULT_SECONDS)
    assert resumed.status == "completed", resumed
    again = summaries(actor_host, mark, after=since)
    assert again and again[0]["messages"] == held["messages"], "the resumed run asked for another summary"
    stored = entries(cluster, handle.id, "actor")
    assert len(stored) == len({read_by(a) for a in summaries(actor_host, mark)})
    rolled(stored)
    no_round_read_twice(summaries(actor_host, mark))
    keys_have_ttls(cluster, handle.id)


def test_a_worker_killed_mid_summary_is_taken_over_and_one_summary_per_span_is_stored(world: Hosts) -> None:
    """docs/context.md: "A compaction step is safe to run twice: the rounds it summarizes depend
    only on the stored messages, a run that lost its lease (a killed worker) stores nothing, and the
    commit stores one entry under the rounds' last"; docs/durability.md: a worker never exits
    because another one died."""
    cluster, thinker_host, actor_host = world
    plan = Plan(rounds=13, hold_role="actor", hold_at=2, abandon=True)
    mark = WORLD.new(plan)
    handle = cluster.submit(goal=f"{mark} Read the archive, a page a round.", max_rounds=15)
    assert plan.reached.wait(RESULT_SECONDS / 2), "the Actor's second summary was never asked for"
    held = plan.held
    assert held is not None
    cluster.kill(group_running(cluster, "actor"), "actor")
    plan.release.set()
    cluster.start("actor", name="actor-3")
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert result.rounds == 13
    events = events_of(handle)
    assert order_problems(events, late_deltas=True) == []
    asks = summaries(actor_host, mark)
    again = [a for a in asks if a.number > held.number and read_by(a) == read_by(held)]
    assert again, "the summary step was not run again"
    assert again[0]["messages"] == held["messages"], "the step run again asked for another summary"
    no_round_read_twice(asks)
    stored = entries(cluster, handle.id, "actor")
    assert len(stored) >= 2
    assert len({span(e) for e in stored}) == len(stored), "one span stored twice"
    assert not [e for e in stored if e.content.endswith(f"(request {held.number}).")]
    rolled(stored)
    the_events_match_the_entries(events, stored, "actor")
    replies = [(e.round, e.role) for e in events if e.type == "model_reply"]
    assert len(replies) == len(set(replies)), "a model reply published twice"
    for role, host in (("thinker", thinker_host), ("actor", actor_host)):
        assert over_budget(of_job(host, mark), role) == []
    keys_have_ttls(cluster, handle.id)
    assert cluster.exited() == [], "a worker other than the killed one exited"


def test_messages_and_approval_pauses_while_compactions_are_pending_lose_nothing(world: Hosts) -> None:
    """docs/context.md: "Never summarized away: ... every message from a person (never among the
    rounds a summary reads, always in the request)"; "a message sent meanwhile [during the summary] is
    read by that round's model call"; docs/conversation.md / events.md: `message_received`'s `round`
    is "the round whose leading model call reads it"; docs/approvals.md: an approved call runs."""
    cluster, thinker_host, actor_host = world
    rounds = 10
    plan = Plan(rounds=rounds, notify=True, hold_role="thinker", hold_at=2)
    mark = WORLD.new(plan)
    handle = cluster.submit(goal=f"{mark} Read the archive, a page a round.", max_rounds=rounds + 2)
    sent: dict[str, str] = {}

    def during_the_summary() -> None:
        if plan.reached.wait(RESULT_SECONDS):
            text = "PERSON-DURING-SUMMARY: count the maps too."
            sent[handle.message(text)] = text
        plan.release.set()

    helper = threading.Thread(target=during_the_summary, daemon=True)
    helper.start()
    approved = 0
    event: Any
    for event in handle.events(timeout=RESULT_SECONDS):
        if event.type == "approval_requested":
            text = f"PERSON-NOTE-{event.round}: the ledgers of page {event.round} matter most."
            sent[handle.message(text)] = text
            handle.approve(pause_id=event.pause_id)
            approved += 1
        if event.type == "final":
            break
    plan.release.set()
    helper.join(EVENT_SECONDS)
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert approved == rounds - 1
    notified = [c for c in cluster.tool_calls() if c["job"] == handle.id and c["name"] == "notify"]
    assert sorted(c["round"] for c in notified) == list(range(rounds - 1)), (
        "an approved call ran twice or never"
    )
    events = events_of(handle)
    assert order_problems(events) == []
    received = {e.message_id: e.round for e in events if e.type == "message_received"}
    assert set(received) == set(sent)
    thinker_calls = calls(thinker_host, mark)
    for message_id, text in sent.items():
        r = received[message_id]
        reading = [hosts.round_of(q) - 1 for q in thinker_calls if text in hosts.text_of(q)]
        assert reading == list(range(r, rounds)), f"{text!r} (round {r}) read in rounds {reading}"
    everything = summaries(thinker_host, mark) + summaries(actor_host, mark)
    assert [q.number for q in everything if any(t in hosts.text_of(q) for t in sent.values())] == []
    compacted_for = {e.round for e in compactions(events, "thinker") if e.how == "summarized"}
    paused_before = {received[m] for m, t in sent.items() if t.startswith("PERSON-NOTE")}
    assert compacted_for & paused_before, "no message was sent while a compaction was pending"
    during = next(m for m, t in sent.items() if t.startswith("PERSON-DURING"))
    held_event = [e for e in compactions(events, "thinker") if e.how == "summarized"][1]
    assert received[during] == held_event.round, "the message sent during the summary missed that round"
    for role, host in (("thinker", thinker_host), ("actor", actor_host)):
        assert over_budget(of_job(host, mark), role) == []
        stored = entries(cluster, handle.id, role)
        rolled(stored)
        the_events_match_the_entries(events, stored, role)
        no_round_read_twice(summaries(host, mark))


# -- what a summary never loses; when one is worth asking for; what it costs ------------------------


def test_a_summary_never_loses_the_persons_answers_the_context_or_the_artifacts(world: Hosts) -> None:
    """docs/context.md: "Never summarized away: the system prompt and tools, the goal and the
    context, every message from a person ..."; "The person's answers to `ask_person` in the
    summarized rounds are added to the summary from the originals in every request, so no summary
    can lose them; so are the artifact handles of those rounds, the latest 12 of them (the summary
    request shows every handle it reads and asks the model to keep them), so `read_artifact` still
    works"; docs/artifacts.md: a 20 KB output is kept whole, its preview shown."""
    cluster, thinker_host, actor_host = world
    rounds, ask_at, read_at = 21, 2, 20
    plan = Plan(rounds=rounds, kb=20, ask_at=ask_at, read_at=read_at)
    mark = WORLD.new(plan)
    context = "CONTEXT-MARK-31: the archive is in the cellar."
    handle = cluster.submit(
        goal=f"{mark} Read the archive, a page a round.",
        context=context,
        max_rounds=rounds + 2,
        ask_person=True,
    )
    answer = "CODEWORD-BLUEBIRD-7"
    event: Any
    for event in handle.events(timeout=RESULT_SECONDS):
        if event.type == "question_asked":
            handle.answer(answer, pause_id=event.pause_id)
        if event.type == "final":
            break
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    events = events_of(handle)
    (answered,) = [e.round for e in events if e.type == "question_answered"]
    reads = [e for e in events if e.type == "tool_result" and e.name == "read_artifact"]
    assert len(reads) == 1 and reads[0].status == "succeeded" and NEEDLE in reads[0].output, reads
    handles = {n: handle_of(n, 1, page_text(n, plan.kb)) for n in range(rounds - 1) if n != read_at - 1}
    made = {e.round: e.artifact.handle for e in events if e.type == "tool_result" and e.artifact is not None}
    assert made == handles, "the pages were not kept as the artifacts docs/artifacts.md names"
    beyond_12 = []
    for role, host in (("thinker", thinker_host), ("actor", actor_host)):
        stored = entries(cluster, handle.id, role)
        assert stored, f"the {role} was never summarized: the test proves nothing"
        assert over_budget(of_job(host, mark), role) == []
        for ask in summaries(host, mark):
            text = hosts.text_of(ask)
            missing = [handles[n] for n in read_by(ask) if handles[n] not in text]
            assert missing == [], f"a {role} summary request does not show the handles it reads: {missing}"
        for request in calls(host, mark):
            text = hosts.text_of(request)
            assert context in text, f"the context was left out of a {role} request"
            k = hosts.round_of(request) - 1
            if k > answered:
                assert answer in text, f"the {role}'s round {k} request lost the person's answer"
            summary = max((e for e in stored if e.round < k), key=lambda e: e.round, default=None)
            if summary is None or summary.content not in text:
                continue
            last = span(summary)[2]
            latest = [handles[n] for n in range(last + 1) if n in handles][-12:]
            older = [handles[n] for n in range(last + 1) if n in handles][:-12]
            assert [h for h in latest if h not in text] == [], f"{role} round {k}: summarized handles lost"
            if older and k < read_at - 1:  # (from then on the read_artifact round names page 0's handle)
                assert [h for h in older if h in text] == [], f"{role} round {k}: more than the latest 12"
                beyond_12.append((role, k))
    assert beyond_12, "no request stood for more than 12 artifacts' rounds: the test proves less"


def test_a_summary_is_asked_for_only_once_the_open_rounds_are_worth_it(world: Hosts) -> None:
    """docs/context.md: "While a request still fits its budget, a summary is asked for only once the
    rounds open to it take at least `1 - TANDEM_COMPACT_AT` of the budget (a fifth by default) ...;
    past the budget itself, the open rounds are summarized whatever their size"; "A summary request
    takes the goal (its first 2,000 characters, to say what matters)". The goal here (about 2,300
    tokens) leaves the Thinker's request at about 0.7 of its budget after each summary, so it passes
    0.8 of it a round or two before the open rounds take a fifth."""
    cluster, thinker_host, actor_host = world
    plan = Plan(rounds=16, kb=1)
    mark = WORLD.new(plan)
    tail = "GOAL-TAIL-77: the last words of a long goal."
    goal = f"{mark} Read the archive, a page a round. " + "Mind the ledgers and the letters. " * 200 + tail
    assert len(goal) > 2000 + len(tail) and 2000 < hosts.estimate(goal) < 2600
    handle = cluster.submit(goal=goal, max_rounds=18)
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    events = events_of(handle)
    for role, host in (("thinker", thinker_host), ("actor", actor_host)):
        assert over_budget(of_job(host, mark), role) == []
        assert all(tail in hosts.text_of(r) for r in calls(host, mark)), "the goal was cut in a request"
        for ask in summaries(host, mark):
            text = hosts.text_of(ask)
            assert goal[:2000] in text and tail not in text, "the summary request's goal is not its head"
        stored = entries(cluster, handle.id, role)
        rolled(stored)
        the_events_match_the_entries(events, stored, role)
    summarized = [e for e in compactions(events, "thinker") if e.how == "summarized"]
    fitting = [e for e in summarized if e.tokens_before <= BUDGET["thinker"]]
    assert len(fitting) >= 2, f"no summary was asked for while the request fit: {summarized}"
    for e in fitting:
        # what the summary took out of the request (the rounds it read, less the summary's few
        # tokens in their place) is at least a fifth of the budget
        assert e.tokens_before - e.tokens_after >= (1 - AT) * BUDGET["thinker"] - 60, e


def test_the_summary_calls_count_against_the_jobs_token_budget(world: Hosts) -> None:
    """docs/context.md: a summary "costs one model call of the role's host per compaction, its tokens
    counted in the job's usage and token budget"; docs/distributed.md: `max_tokens_total` is
    "checked before every model call: once one is spent the job ends `truncated`, its `error` says
    which budget"."""
    cluster, thinker_host, actor_host = world
    plan = Plan(rounds=12)
    mark = WORLD.new(plan)
    # four rounds of two model calls (880 tokens) fit; with the Thinker's first summary (1,001) the
    # 1,500 are spent, so no model call follows it
    handle = cluster.submit(
        goal=f"{mark} Read the archive, a page a round.", max_rounds=14, max_tokens_total=1500
    )
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "truncated", result
    assert "max_tokens_total" in (result.error or "") or "token" in (result.error or ""), result.error
    (ask,) = summaries(thinker_host, mark)
    assert later_than(thinker_host, mark, ask) == [] and later_than(actor_host, mark, ask) == []
    assert len(calls(thinker_host, mark)) == len(calls(actor_host, mark)) == 4
    assert result.usage.total_tokens == 8 * 110 + 1001, result.usage
    assert result.usage.calls == 9, result.usage


def accounted_for(request: RecordedRequest, stored: list[ModelMessage]) -> set[int]:
    """The rounds (from 0) a request stands in for: those of each summary entry whose text it holds,
    and those each "left out" note in it names."""
    text = hosts.text_of(request)
    rounds: set[int] = set()
    for entry in stored:
        if entry.content in text:
            first, _, last = span(entry)
            rounds |= set(range(first, last + 1))
    for a, b in marker_rounds(text):
        rounds |= set(range(a - 1, b))
    return rounds


def test_a_summary_too_long_to_fit_is_left_out_saying_so(world: Hosts) -> None:
    """docs/context.md: later requests read the summary "in place of those rounds; if even that does
    not fit, the oldest of the rounds after it are left out with a marker"; "a note in the first
    message says which rounds were left out"; "The job never fails for length while what is always
    kept fits"; docs/events.md: `memory_compacted` is written "of a model step whose request left out
    more rounds than the role's previous one". The Thinker's summaries here are usable (shorter than
    what they replace) but long, nine tenths of what they read: a request cannot hold one beside
    the latest rounds. (Before the fix in ``fit_history`` such a summary was left out of the
    request without a word: from round 7 on the Thinker read no summary, no note, and no
    ``memory_compacted`` said rounds 1-5 were gone.)"""
    cluster, thinker_host, _ = world
    plan = Plan(rounds=12, fail="verbose", fail_role="thinker", fail_at=frozenset(range(1, 40)))
    mark = WORLD.new(plan)
    handle = cluster.submit(goal=f"{mark} Read the archive, a page a round.", max_rounds=14)
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    events = events_of(handle)
    stored = entries(cluster, handle.id, "thinker")
    assert stored and all(e.summary and e.summary.how == "summarized" for e in stored)
    own = calls(thinker_host, mark)
    assert over_budget(of_job(thinker_host, mark), "thinker") == []
    unsaid = []
    for request in own:
        k = hosts.round_of(request) - 1
        shown = read_by(request)
        missing = set(range(min(shown, default=k - 1))) - shown
        if missing - accounted_for(request, stored):
            unsaid.append((k, sorted(missing - accounted_for(request, stored))))
    assert unsaid == [], f"requests that leave rounds out without a word: (round, rounds) {unsaid}"
    for request in own:
        k = hosts.round_of(request) - 1
        for a, b in marker_rounds(hosts.text_of(request)):
            told = [
                e
                for e in compactions(events, "thinker")
                if e.round <= k and e.summary_of_rounds == [a - 1, b - 1]
            ]
            assert told and told[-1].how == "dropped", f"round {k}: no memory_compacted for rounds {a}-{b}"


def test_a_react_job_is_summarized_without_parting_a_call_from_its_result(world: Hosts) -> None:
    """docs/context.md: "mono and ReAct jobs use the Actor's" budget; its older rounds are
    "summarized by the role's own model, or by `TANDEM_<ROLE>_SUMMARY_MODEL`", on the Actor's queue
    (`tandem.compact_actor`); "a call is never shown without its result, nor a result without its
    call" (an OpenAI-compatible host refuses a request that parts them)."""
    cluster, _, actor_host = world
    plan = Plan(rounds=0, react=True)
    mark = WORLD.new(plan)
    handle = cluster.submit(
        goal=f"{mark} Read every page of the archive.",
        reasoner="react",
        tools=["page"],
        max_rounds=2 * hosts.REACT_PAGES + 4,
    )
    result = handle.result(timeout=RESULT_SECONDS)
    requests = of_job(actor_host, mark)
    parted = [(r.number, hosts.pairing_error(r)) for r in requests if hosts.pairing_error(r)]
    assert parted == [], f"requests that part a call from its result: {parted}"
    assert result.status == "completed", result
    assert over_budget(requests, "actor") == []
    stored = entries(cluster, handle.id, "actor")
    assert stored and {e.summary.how for e in stored if e.summary} == {"summarized"}, [
        span(e) for e in stored
    ]
    rolled(stored)
    the_events_match_the_entries(events_of(handle), stored, "actor")
    asks = summaries(actor_host, mark)
    assert len(asks) == len(stored) and {r["model"] for r in asks} == {ACTOR_SUMMARY_MODEL}
    no_round_read_twice(asks)
    pages = [n for r in asks for n in sorted(read_by(r))]
    assert pages and pages == list(range(len(pages))), (
        f"the summaries did not read the pages in turn: {pages}"
    )
