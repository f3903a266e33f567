"""What a step reads of its job before it works (``StepView``), and how a claim asks for it
(``ViewAsk``).

A step's claim reads its view in the same script call (``claim.lua``, ``claim_call.lua``): the
spec, the cancel flag, the record fields it names, the stored messages it needs and, for a round's
``collect`` step, the round's tool results. A step thus claims and reads in one round trip, and
what it reads is what its claim saw. ``JobStore.step_view`` reads the same outside a claim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from tandem.reasoner.messages import FunctionCallResult, ModelMessage
from tandem.tasks.spec import JobSpec
from tandem.tasks.state.record import text


@dataclass(frozen=True)
class StepView:
    """What a step reads before it works.

    ``messages`` is ``None`` when they were not asked for; with ``complete`` false it holds only
    the messages asked for by key (those stored). ``results`` is ``None`` unless asked for: then
    the round's tool results by call index (``None`` where one is missing).
    """

    spec_json: str | None
    """The spec as stored (JSON), ``None`` for an unknown or expired job."""
    cancelled: bool
    record: dict[str, str]
    messages: list[ModelMessage] | None
    complete: bool = True
    results: list[FunctionCallResult | None] | None = None

    @cached_property
    def spec(self) -> JobSpec | None:
        """The job's spec, parsed on first use (a step whose job is cached never parses it)."""
        return None if self.spec_json is None else JobSpec.model_validate_json(self.spec_json)


@dataclass(frozen=True)
class ViewAsk:
    """What a claim reads for its step: ``messages`` (``True``: the whole memory; keys such as
    ``["2:actor"]``: only those; empty: none), the ``record`` fields named, and with ``results``
    the tool results of the claimed round (its record's ``calls`` of them)."""

    messages: bool | Sequence[str] = True
    record: Sequence[str] = ()
    results: bool = False

    def args(self) -> list[str]:
        """The script's arguments for this ask: the messages' mode (``*`` all, ``k`` by key, ``""``
        none), the number of record fields, the fields, the results flag, the message keys."""
        if self.messages is True:
            mode, keys = "*", []
        elif self.messages:
            mode, keys = "k", list(self.messages)
        else:
            mode, keys = "", []
        return [mode, str(len(self.record)), *self.record, "1" if self.results else "", *keys]

    def view(self, reply: Sequence[Any]) -> StepView:
        """The ``StepView`` from the script's reply: spec, cancel flag, record values, messages,
        results (see ``view_of`` in ``prelude.lua``)."""
        raw_spec, cancelled, fields, stored, results = reply
        record = {k: text(v) for k, v in zip(self.record, fields or [], strict=False) if v is not None}
        messages: list[ModelMessage] | None = None
        if self.messages is True or self.messages:
            messages = [ModelMessage.model_validate_json(r) for r in stored or [] if r is not None]
        found: list[FunctionCallResult | None] | None = None
        if self.results:
            found = [None if r is None else FunctionCallResult.model_validate_json(r) for r in results or []]
        return StepView(
            spec_json=None if raw_spec is None else text(raw_spec),
            cancelled=bool(cancelled),
            record=record,
            messages=messages,
            complete=self.messages is True,
            results=found,
        )
