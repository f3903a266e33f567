"""Large tool outputs by reference, in process: an output over the artifact threshold is kept
whole, the model reads a preview and the handle, ``read_artifact`` pages through it with clear
errors, the memory limit counts it, and the outcome holds the whole text."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tandem.reasoner import MonoModelReasoner, ReActReasoner, ScriptedModelService, Task
from tandem.reasoner.artifacts import READ_ARTIFACT, page_of, read_artifact
from tandem.reasoner.memory import InMemoryReasonerMemory
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus, ModelMessage, NativeToolCall
from tandem.reasoner.tool_runner import ToolRunner
from tandem.toolkit import ToolCallContext, tool
from tandem.toolkit.artifacts import HANDLE_PATTERN, InMemoryArtifactStore, artifact_handle
from tandem.toolkit.errors import ArtifactError

NEEDLE = "the needle is 7351"
BIG = "x" * 199_000 + NEEDLE + "y" * (1000 - len(NEEDLE))


@tool
def big() -> str:
    """Return a large text."""
    return BIG


@tool
def small() -> str:
    """Return a short text."""
    return "short"


def call(name: str, **args: Any) -> str:
    block = json.dumps({"name": name, "call_objective": "go", "args": args})
    return f"<action><function_call>{block}</function_call></action>"


DONE = "TASK_DONE <deliverable>done</deliverable>"


def results(outcome: Any) -> list[FunctionCallResult]:
    return [r for m in outcome.messages if m.role == "tool" for r in m.function_results]


def run(*replies: str, task: Task | None = None, runner: ToolRunner | None = None) -> Any:
    model = ScriptedModelService([*replies, DONE])
    task = task or Task(goal="read it", tools=[big, small], max_rounds=6)
    outcome = MonoModelReasoner(model, runner=runner).run(task)
    return outcome, model


def test_a_large_output_reaches_the_model_as_a_preview_and_a_handle() -> None:
    outcome, model = run(call("big"))
    assert outcome.status == "completed", outcome.error
    result = results(outcome)[0]
    assert result.status == FunctionCallStatus.SUCCEEDED
    ref = result.artifact
    assert ref is not None and HANDLE_PATTERN.fullmatch(ref.handle)
    assert ref.handle.startswith("r0-c1-")
    assert (ref.chars, ref.bytes) == (len(BIG), len(BIG))
    # The preview: the head (a quarter of TANDEM_MAX_OUTPUT_CHARS), then one line saying how to read on.
    head, note = result.output.rsplit("\n", 1)
    assert head == BIG[:2000]
    assert ref.handle in note and "200000 characters" in note
    assert f"read_artifact(handle='{ref.handle}', offset=2000, length=8000)" in note
    assert NEEDLE not in result.output
    # The whole text is kept, and the outcome hands it over.
    assert outcome.artifacts == {ref.handle: BIG}
    # The model's next request reads the preview, not the whole output, and is offered the reader.
    second = model.calls[1]
    assert BIG[:2000] in str(second["messages"]) and NEEDLE not in str(second["messages"])
    assert READ_ARTIFACT in second["sys_prompt"]
    assert READ_ARTIFACT not in model.calls[0]["sys_prompt"]


def test_a_short_output_is_shown_as_it_is_and_no_reader_is_offered() -> None:
    outcome, model = run(call("small"))
    result = results(outcome)[0]
    assert result.output == "short" and result.artifact is None
    assert outcome.artifacts == {}
    assert all(READ_ARTIFACT not in c["sys_prompt"] for c in model.calls)


def test_the_threshold_counts_bytes_not_characters() -> None:
    @tool
    def wide() -> str:
        """Return 3,000 three-byte characters."""
        return "€" * 3000

    task = Task(goal="g", tools=[wide], max_rounds=3)
    outcome, _ = run(call("wide"), task=task)
    ref = results(outcome)[0].artifact
    assert ref is not None and (ref.chars, ref.bytes) == (3000, 9000)
    outcome, _ = run(call("wide"), task=task, runner=ToolRunner(artifact_bytes=9000))
    assert results(outcome)[0].artifact is None and results(outcome)[0].output == "€" * 3000


def test_the_model_reads_the_needle_at_the_end_through_read_artifact() -> None:
    handle = artifact_handle(0, 1, BIG)
    outcome, _ = run(call("big"), call(READ_ARTIFACT, handle=handle, offset=199_000, length=100))
    page = results(outcome)[1]
    assert page.status == FunctionCallStatus.SUCCEEDED, page.output
    assert page.output.splitlines() == [
        f"[artifact '{handle}': characters 199000 to 199100 of 200000]",
        BIG[199_000:199_100],
        f"[more: read_artifact(handle='{handle}', offset=199100)]",
    ]
    assert NEEDLE in page.output and page.artifact is None


def test_a_page_is_at_most_one_page_long_and_the_last_one_says_so() -> None:
    handle = artifact_handle(0, 1, BIG)
    runner = ToolRunner(max_output_chars=1000)
    outcome, _ = run(
        call("big"),
        call(READ_ARTIFACT, handle=handle, offset=0, length=50_000),
        call(READ_ARTIFACT, handle=handle, offset=199_990),
        runner=runner,
    )
    first, last = results(outcome)[1:]
    # A page and its frame together fit one output (1000 characters): the page is 1000 less 240
    assert first.output.splitlines()[0] == f"[artifact '{handle}': characters 0 to 760 of 200000]"
    assert len(first.output) <= 1000 and "output cut" not in first.output
    assert first.output.splitlines()[1] == BIG[:760] and first.output.endswith("offset=760)]")
    assert last.output.splitlines() == [
        f"[artifact '{handle}': characters 199990 to 200000 of 200000]",
        BIG[199_990:],
        "[end of the artifact]",
    ]
    # The preview is a quarter of the output bound, and names a page of the bound.
    preview = results(outcome)[0].output
    assert preview.startswith(BIG[:250] + "\n[") and "length=1000" in preview


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(
            {"handle": "r9-c9-0000000000"}, "no artifact 'r9-c9-0000000000' in this job", id="unknown"
        ),
        pytest.param({"offset": 200_000}, "offset 200000 is past the end", id="past-the-end"),
        pytest.param({"offset": -1}, "offset must be a whole number", id="negative-offset"),
        pytest.param({"length": -5}, "length must be a whole number", id="negative-length"),
    ],
)
def test_read_artifact_refuses_clearly(args: dict[str, Any], says: str) -> None:
    handle = artifact_handle(0, 1, BIG)
    outcome, _ = run(call("big"), call(READ_ARTIFACT, **{"handle": handle, **args}))
    failed = results(outcome)[1]
    assert failed.status == FunctionCallStatus.FAILED
    assert "ArtifactError" in failed.output and says in failed.output


def test_read_artifact_without_a_store_says_the_run_keeps_none() -> None:
    with pytest.raises(ArtifactError, match="keeps no artifacts"):
        read_artifact("r0-c1-0000000000", context=ToolCallContext())
    with pytest.raises(ArtifactError, match="past the end"):
        store = InMemoryArtifactStore()
        store.put("h", "abc")
        page_of(store, "h", 3, 0, 10)
    assert page_of(store, "h", 2, 0, 10).text == "c"


def test_a_tool_of_the_job_named_read_artifact_wins() -> None:
    @tool(name=READ_ARTIFACT)
    def own(handle: str) -> str:
        """The job's own reader."""
        return f"own {handle}"

    task = Task(goal="g", tools=[big, own], max_rounds=4)
    outcome, _ = run(call("big"), call(READ_ARTIFACT, handle="x"), task=task)
    assert results(outcome)[1].output == "own x"


def test_artifacts_count_against_the_memory_limit() -> None:
    # A limit the conversation fits in but the output does not: the output is cut, saying why.
    task = Task(goal="g", tools=[big], max_rounds=3, max_memory_bytes=100_000)
    outcome, _ = run(call("big"), task=task)
    result = results(outcome)[0]
    assert result.artifact is None and outcome.artifacts == {}
    assert "[output cut: showing the first 8000 of 200000 characters]" in result.output
    assert result.output.endswith(
        "[the whole output was not kept: it would bring the job's memory over its limit of 100000 bytes "
        "(TANDEM_MAX_MEMORY_BYTES)]"
    )
    # A limit the output fits in: kept, and the next model step counts it with the conversation.
    task = Task(goal="g", tools=[big], max_rounds=3, max_memory_bytes=210_000)
    outcome, _ = run(call("big"), task=task)
    assert results(outcome)[0].artifact is not None
    assert outcome.status == "completed"
    memory = InMemoryReasonerMemory()
    task = Task(goal="g", tools=[big], max_rounds=3, max_memory_bytes=204_000)
    model = ScriptedModelService([call("big"), DONE])
    outcome = MonoModelReasoner(model).run(task, memory)
    assert memory.artifacts.total_bytes() == 200_000
    assert outcome.status == "failed" and "conversation and its artifacts" in (outcome.error or "")


class Sliced(str):
    """A string that records the end of every slice taken of it."""

    ends: list[int]

    def __getitem__(self, key: Any) -> str:
        if isinstance(key, slice):
            type(self).ends.append(len(range(*key.indices(len(self)))))
        return str.__getitem__(self, key)


def test_an_output_over_the_memory_limit_is_never_copied_up_to_the_limit() -> None:
    # A copy of its first max_memory_bytes characters (20 MB by default) would hold the GIL, and
    # the worker's lease keeper with it, for seconds on a loaded machine, to be thrown away.
    Sliced.ends = []
    huge = Sliced("z" * 300_000)

    @tool
    def dump() -> str:
        """Return a text over the job's memory limit."""
        return huge

    task = Task(goal="g", tools=[dump], max_rounds=3, max_memory_bytes=250_000)
    outcome, _ = run(call("dump"), task=task)
    result = results(outcome)[0]
    assert result.artifact is None and result.output.endswith("(TANDEM_MAX_MEMORY_BYTES)]")
    assert Sliced.ends and max(Sliced.ends) < 20_000, Sliced.ends


def test_a_call_run_twice_keeps_one_artifact() -> None:
    store = InMemoryArtifactStore()
    ctx = ToolCallContext(round=2, call_index=1).bind_artifacts(store)
    runner = ToolRunner()
    from tandem.reasoner.function_calling import ParsedFunctionCall

    parsed = ParsedFunctionCall(name="big", call_objective="", args={})
    first = runner.run_call({"big": big}, parsed, 1, ctx)
    again = runner.run_call({"big": big}, parsed, 1, ctx)
    assert first == again and first.artifact is not None
    assert store.handles() == [first.artifact.handle] and store.total_bytes() == 200_000


def test_secrets_are_masked_in_the_kept_text() -> None:
    @tool
    def leaky(context: ToolCallContext) -> str:
        """Return a large text with the job's secret in it."""
        return "a" * 10_000 + context.secrets["token"] + "b" * 10

    task = Task(goal="g", tools=[leaky], max_rounds=3, secrets={"token": "s3cr3t-value-123"})
    outcome, _ = run(call("leaky"), task=task)
    (text,) = outcome.artifacts.values()
    assert "s3cr3t-value-123" not in text and text.startswith("a" * 10_000)


def test_a_resumed_run_reads_the_artifacts_its_memory_kept() -> None:
    memory = InMemoryReasonerMemory()
    task = Task(goal="g", tools=[big], max_rounds=1)
    first = MonoModelReasoner(ScriptedModelService([call("big")])).run(task, memory)
    assert first.status == "truncated"
    handle = artifact_handle(0, 1, BIG)
    task = Task(goal="g", tools=[big], max_rounds=3)
    model = ScriptedModelService([call(READ_ARTIFACT, handle=handle, offset=199_000, length=50), DONE])
    outcome = MonoModelReasoner(model).run(task, memory)
    assert outcome.status == "completed"
    assert NEEDLE in results(outcome)[1].output
    assert READ_ARTIFACT in model.calls[0]["sys_prompt"]


def test_react_native_reads_an_artifact_and_is_offered_the_tool_schema() -> None:
    handle = artifact_handle(0, 1, BIG)
    replies = [
        ModelMessage(role="actor", content="", tool_calls=[NativeToolCall(id="a", name="big")]),
        ModelMessage(
            role="actor",
            content="",
            tool_calls=[
                NativeToolCall(
                    id="b", name=READ_ARTIFACT, arguments=json.dumps({"handle": handle, "offset": 199_000})
                )
            ],
        ),
        "the needle is 7351",
    ]
    model = ScriptedModelService(replies)
    outcome = ReActReasoner(model, max_steps=10).run(Task(goal="g", tools=[big]))
    assert outcome.status == "completed", outcome.error
    assert NEEDLE in results(outcome)[1].output
    offered = [str(c["tools"]) for c in model.calls]
    assert READ_ARTIFACT not in offered[0] and READ_ARTIFACT in offered[1]


def test_the_async_run_keeps_artifacts_too() -> None:
    model = ScriptedModelService([call("big"), DONE])
    task = Task(goal="g", tools=[big], max_rounds=3)
    outcome = asyncio.run(MonoModelReasoner(model).arun(task))
    assert list(outcome.artifacts.values()) == [BIG]
