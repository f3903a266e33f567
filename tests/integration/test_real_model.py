"""Dual, mono and ReAct jobs on real workers against a real model server: llama.cpp's
OpenAI-compatible server (``llama-cpp-python[server]``) with SmolLM2-135M-Instruct
(``tests.integration.llama_server``), through the direct HTTP path and through LiteLLM, streamed
and not.

A 135M model does not follow tandem's protocol, so these tests judge tandem, never the model's
answers. For every job: it ends (completed, truncated or failed) with a readable reason, no worker
exits, the usage tandem records is the server's (each non-streamed call's exactly; a streamed
call, which this server sends without usage, counted by tandem through the server's tokenize
endpoint, marked counted, and checked against the server's own count of the same request), a
streamed reply's ``model_delta`` events come before its ``model_reply``, and the server answers
no request tandem built with a 4xx (``RecordingProxy`` keeps every request and answer).

The server is started once for the module (``--n_ctx 2048``); the last test starts one of its own
with ``--n_ctx 512`` and a goal longer than that: the job fails at once, naming the context window.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tandem.client import JobHandle
from tandem.reasoner.messages import ModelMessage
from tandem.tasks.job_events import ModelDelta, ModelReply
from tandem.tasks.spec import JobResult
from tests.integration.conftest import Cluster, _make_cluster
from tests.integration.llama_server import MODEL_ALIAS, LlamaServer, require_real_model
from tests.integration.recording_proxy import Exchange, RecordingProxy

pytestmark = pytest.mark.integration

MAX_TOKENS = "32"
"""Each reply's cap: the module's time goes to the prompts, not to what a 135M model writes."""
JOB_TIMEOUT = 600.0
"""Seconds to wait for a job's end: the server answers one request at a time, on two threads of a
busy machine; the wait ends with the job's ``final`` event, not after a fixed time."""


@dataclass(frozen=True)
class Path:
    """How the workers reach the server: ``direct`` (the model loop's own HTTP) or ``litellm``
    (``TANDEM_DIRECT_HTTP=false``), streamed or not."""

    via: str
    stream: bool

    @property
    def name(self) -> str:
        return f"{self.via}-{'streamed' if self.stream else 'plain'}"

    def env(self, api_base: str) -> dict[str, str]:
        flag = "true" if self.stream else "false"
        env = {
            "TANDEM_DIRECT_HTTP": "true" if self.via == "direct" else "false",
            "TANDEM_TOOLKIT": "tests.integration.react_tools:toolkit",
            "TANDEM_JOB_TIMEOUT": str(int(JOB_TIMEOUT)),
        }
        for role in ("THINKER", "ACTOR"):
            env |= {
                f"TANDEM_{role}_MODEL": f"hosted_vllm/{MODEL_ALIAS}",
                f"TANDEM_{role}_TEMPERATURE": "0",  # the replies vary less from run to run
                f"TANDEM_{role}_API_BASE": api_base,
                f"TANDEM_{role}_API_KEY": "sk-local",
                f"TANDEM_{role}_MAX_TOKENS": MAX_TOKENS,
                f"TANDEM_{role}_TIMEOUT": str(int(JOB_TIMEOUT)),
                f"TANDEM_{role}_STREAM": flag,
            }
        return env


PLAN = {
    Path("direct", False): ("dual", "react"),
    Path("direct", True): ("mono", "react"),
    Path("litellm", False): ("mono", "react"),
    Path("litellm", True): ("dual", "react"),
}
"""The jobs on each path: every reasoner both ways (direct and LiteLLM) and both streamed and
not; ReAct, whose requests carry tool calls back, on all four."""
ROUNDS = {"dual": 1, "mono": 2, "react": 3}
"""Each reasoner's ``max_rounds``: dual one round (a Thinker and an Actor call), mono two calls,
react three steps (two calls and the tools between: the second call sends the first's tool calls
back)."""


@pytest.fixture(scope="module")
def llama(redis_base: str) -> Iterator[tuple[LlamaServer, RecordingProxy]]:
    """The model server, and the recording proxy the workers call it through."""
    require_real_model()
    with LlamaServer(n_ctx=2048) as server, RecordingProxy(server.root) as proxy:
        yield server, proxy


@pytest.fixture(scope="module", params=list(PLAN), ids=lambda p: p.name)
def path_cluster(
    request: pytest.FixtureRequest, redis_base: str, llama: tuple[LlamaServer, RecordingProxy]
) -> Iterator[tuple[Path, Cluster, RecordingProxy, LlamaServer]]:
    """One worker (every queue) configured for one path."""
    path: Path = request.param
    server, proxy = llama
    clusters = _make_cluster(redis_base, **path.env(proxy.url))
    cluster, _thinker, _actor = next(clusters)
    cluster.start("all")
    yield path, cluster, proxy, server
    next(clusters, None)  # stops the worker (failing if it exited by itself) and checks the TTLs


def run_jobs(cluster: Cluster, path: Path) -> dict[str, tuple[JobHandle, JobResult, str]]:
    """The path's jobs (``PLAN``), submitted at once, each with a tag in its goal; their results."""
    handles = {}
    for reasoner in PLAN[path]:
        tag = f"[{reasoner} {path.name}]"
        goal = f"{tag} Add 2 and 3 with the add tool, then give the sum as the answer."
        handle = cluster.submit(goal=goal, reasoner=reasoner, max_rounds=ROUNDS[reasoner], tools=["add"])
        handles[reasoner] = (handle, tag)
    return {r: (h, h.result(timeout=JOB_TIMEOUT), tag) for r, (h, tag) in handles.items()}


report: list[str] = []
"""One line per job: what it sent and what was counted (printed at the module's end)."""


@pytest.fixture(scope="module", autouse=True)
def print_report() -> Iterator[None]:
    yield
    print("\n" + "\n".join(report))


def readable(reason: str | None) -> bool:
    """A reason a person reads: words, no traceback, no object repr."""
    return bool(reason) and not re.search(r"Traceback|File \"|object at 0x|^\w+\(|\w+Error\(", reason or "")


def replied(exchanges: list[Exchange]) -> list[Exchange]:
    """The chat completions that brought a reply: answered 200, plain or streamed with chunks
    (a stream without any is asked again plainly, and the plain answer is the reply)."""
    return [e for e in exchanges if e.status == 200 and (not e.streamed or e.chunks)]


def test_every_job_ends_readably_with_the_servers_usage_and_no_4xx(
    path_cluster: tuple[Path, Cluster, RecordingProxy, LlamaServer],
) -> None:
    path, cluster, proxy, server = path_cluster
    results = run_jobs(cluster, path)
    proxy.wait_idle(JOB_TIMEOUT)  # the server's own count of the last streams
    assert cluster.exited() == [], "a worker exited"
    for reasoner, (handle, result, tag) in results.items():
        assert result.status in ("completed", "truncated", "failed"), (reasoner, result)
        if result.status != "completed":
            assert readable(result.error), f"{reasoner}: not a readable reason: {result.error!r}"
        exchanges = proxy.of(tag)
        said = f"{reasoner}: {result!r}; requests: {[str(e) for e in exchanges]}"
        assert exchanges, f"no request reached the server: {said}"
        assert [e for e in exchanges if 400 <= e.status < 500] == [], (
            f"{reasoner}: the server refused a request"
        )
        messages = [
            m for m in cluster.store.memory(handle.id).get_messages() if m.role in ("thinker", "actor")
        ]
        calls = replied(exchanges)
        assert len(calls) == len(messages) == result.usage.calls, said
        for message, exchange in zip(messages, calls, strict=True):
            check_usage(message, exchange, path)
        sent = [e.body for e in exchanges]
        offered = [b for b in sent if b.get("tools")]
        assert all(b.get("tool_choice") == "auto" for b in offered), "tools went without tool_choice"
        turns = [m for b in sent for m in b["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
        assert all(m.get("content") == "" or m.get("content") for m in turns), (
            "a tool-call turn without text content"
        )
        report.append(
            f"{path.name} {reasoner}: {result.status}, {len(exchanges)} requests ({len(calls)} replies, "
            f"{len(offered)} with tools, {len(turns)} tool-call turns sent back); recorded "
            f"{result.usage.prompt_tokens}+{result.usage.completion_tokens} tokens "
            f"({result.usage.counted_calls} calls counted by tandem); server "
            f"{sum((e.usage or e.server_usage or {}).get('prompt_tokens', 0) for e in calls)}+"
            f"{sum((e.usage or e.server_usage or {}).get('completion_tokens', 0) for e in calls)}"
        )
        streamed_text = {
            (m.round, m.role) for m, e in zip(messages, calls, strict=True) if e.streamed and e.chunks
        }
        assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.counted_calls) == (
            sum(m.usage.prompt_tokens for m in messages),
            sum(m.usage.completion_tokens for m in messages),
            sum(m.usage.counted_calls for m in messages),
        )
        check_deltas_come_first(handle, streamed_text)
    tokenized = [e for e in proxy.exchanges if not e.chat]
    assert all(e.status == 200 for e in tokenized), [(e.path, e.status) for e in tokenized if e.status != 200]
    assert [line for line in server.access_log() if 400 <= line[2] < 500] == []


def check_usage(message: ModelMessage, exchange: Exchange, path: Path) -> None:
    """A reply's usage: the server's own when it reported it, exactly; else tandem's count, marked:
    a token a chunk streamed for the reply, and the prompt by the server's tokenizer, near the
    server's count of the same request (``RecordingProxy``): the prompt within 30 % (the chat
    template's markers and tool-calling instructions are the server's: tandem counts the messages
    and schemas, plus a few tokens a message), the reply within a quarter (the streamed text
    tokenized anew, the server's count here, is not always the tokens it wrote: SmolLM2-135M's
    ``&lt;`` and the like come out of a different split)."""
    usage = message.usage
    if exchange.usage is not None:
        assert (usage.prompt_tokens, usage.completion_tokens, usage.counted_calls) == (
            exchange.usage["prompt_tokens"],
            exchange.usage["completion_tokens"],
            0,
        ), (message.round, message.role, exchange.body.get("stream"))
        return
    assert path.stream and exchange.streamed, "only a stream comes without usage from this server"
    assert usage.counted_calls == 1 and usage.calls == 1
    server = exchange.server_usage
    assert server is not None, f"no count of the same request from the server: {exchange}"
    assert 0.7 * server["prompt_tokens"] <= usage.prompt_tokens <= 1.3 * server["prompt_tokens"], (
        usage,
        server,
    )
    assert usage.completion_tokens == exchange.chunks, (usage, exchange)  # a token a chunk
    assert (
        abs(usage.completion_tokens - server["completion_tokens"]) <= 2 + server["completion_tokens"] // 4
    ), (
        usage,
        server,
        exchange.text,
    )


def check_deltas_come_first(handle: JobHandle, streamed: set[tuple[int, str]]) -> None:
    """Each reply the server streamed text of (``streamed``: round and role): a ``model_delta`` of
    its round and role before its ``model_reply``."""
    seen: set[tuple[int, str]] = set()
    for event in handle.events(timeout=30):
        if isinstance(event, ModelDelta):
            seen.add((event.round, event.role))
        elif isinstance(event, ModelReply) and (event.round, event.role) in streamed:
            assert (event.round, event.role) in seen, (
                f"the reply of {event.role} in round {event.round} came first"
            )


def test_a_conversation_longer_than_the_context_fails_the_job_at_once(redis_base: str) -> None:
    require_real_model()
    with LlamaServer(n_ctx=512) as server, RecordingProxy(server.root) as proxy:
        clusters = _make_cluster(redis_base, **Path("direct", False).env(proxy.url))
        cluster, _thinker, _actor = next(clusters)
        try:
            cluster.start("all")
            goal = "[too long] " + "Count the apples in this basket, one by one. " * 120
            handle = cluster.submit(goal=goal, reasoner="mono", max_rounds=3)
            result = handle.result(timeout=JOB_TIMEOUT)
            events = [event.type for event in handle.events(timeout=30)]
        finally:
            next(clusters, None)
        sent = proxy.of("[too long]")
    assert result.status == "failed"
    assert [e.status for e in sent] == [400], "one request, refused, not retried"
    assert "waiting" not in events, "the step was not rescheduled"
    reason = result.error or ""
    assert "maximum context length is 512 tokens" in reason
    assert "context window" in reason and "--n_ctx" in reason and "shorten the job's goal" in reason
    assert readable(reason)
