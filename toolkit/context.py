"""What a tool may ask the runtime for: the call's context and registered services."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, PrivateAttr, computed_field

from tandem.toolkit.errors import QuestionError, SpawnError

if TYPE_CHECKING:
    from tandem.toolkit.artifacts import ArtifactStore
    from tandem.toolkit.children import ChildOutcome, Spawner

MAX_QUESTION_CHARS = 4000
"""The longest question a tool or the model may ask a person (characters)."""


class Question(BaseModel):
    """A question for a person, asked by a tool call (``ToolCallContext.ask``): the text, the JSON
    schema the answer must fit (``None``: any JSON value, text included), and which call asked
    it (``round``, ``call_index``; ``seq``: the call's questions counted from 1)."""

    text: str
    answer_schema: dict[str, Any] | None = None
    round: int = 0
    call_index: int = 0
    seq: int = 1


Asker = Callable[[Question], Any]
"""What puts a question to a person and returns the answer: the reasoner's ``ask`` callback in
process, the job's pause on workers. Raises ``QuestionError`` (``NoAnswer`` on timeout)."""


def check_question(text: Any, answer_schema: Any) -> None:
    """``QuestionError`` unless ``text`` is a question (1 to ``MAX_QUESTION_CHARS`` characters) and
    ``answer_schema`` is ``None`` or a valid JSON schema (an object)."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_QUESTION_CHARS:
        raise QuestionError(
            f"the question must be text of 1 to {MAX_QUESTION_CHARS} characters, got {text!r:.80}"
        )
    if answer_schema is None:
        return
    if not isinstance(answer_schema, dict):
        raise QuestionError(
            f"the answer's schema must be a JSON schema object (like {{'type': 'string'}}), "
            f"got {answer_schema!r:.80}"
        )
    import jsonschema

    try:
        jsonschema.validators.validator_for(answer_schema).check_schema(answer_schema)
    except jsonschema.SchemaError as exc:
        raise QuestionError(f"the answer's schema is not a valid JSON schema: {exc.message}") from None


class ToolCallContext(BaseModel):
    """Facts about the call in progress, injected into any tool parameter annotated with this type.

    It holds plain data only. ``secrets`` (the job's ``JobSpec.secrets``, unsealed) is left out of
    every dump and repr, so the context can be logged or stored without them.

    ``idempotency_key`` is the same on every attempt of one call (``"<job>:<round>:<call index>"``)
    and ``attempt`` counts them from 1: a tool with side effects passes the key to the system it
    changes (an ``Idempotency-Key`` header, a unique column) so a call run again after a lost worker
    does not act twice.
    """

    job_id: str = ""
    round: int = 0
    role: str = "actor"
    call_index: int = 0
    attempt: int = 1
    metadata: dict[str, Any] = Field(default_factory=dict)
    secrets: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)
    _asker: Asker | None = PrivateAttr(default=None)
    _asked: int = PrivateAttr(default=0)
    _spawner: Any = PrivateAttr(default=None)
    _spawned: int = PrivateAttr(default=0)
    _artifacts: Any = PrivateAttr(default=None)
    _artifact_limit: int | None = PrivateAttr(default=None)
    _page_chars: int = PrivateAttr(default=8000)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def idempotency_key(self) -> str:
        """``"<job>:<round>:<call index>"``: the same on every attempt of this call."""
        return f"{self.job_id}:{self.round}:{self.call_index}"

    def bind_asker(self, asker: Asker | None) -> ToolCallContext:
        """This context, answering ``ask`` through ``asker`` (the driver sets it; tools never do)."""
        self._asker = asker
        return self

    def bind_spawner(self, spawner: Spawner | None) -> ToolCallContext:
        """This context, starting child jobs through ``spawner`` (the driver sets it; tools never do)."""
        self._spawner = spawner
        return self

    def bind_artifacts(
        self, store: ArtifactStore | None, *, limit: int | None = None, page_chars: int = 8000
    ) -> ToolCallContext:
        """This context, keeping large outputs in ``store`` (the job's artifacts) within the job's
        memory limit ``limit`` in bytes, and reading them ``page_chars`` characters at a time at
        most (``TANDEM_MAX_OUTPUT_CHARS``). The driver sets it; tools never do."""
        self._artifacts = store
        self._artifact_limit = limit
        self._page_chars = page_chars
        return self

    @property
    def artifacts(self) -> ArtifactStore | None:
        """The job's artifacts (``tandem.toolkit.artifacts``), or ``None`` when this run keeps none."""
        return self._artifacts

    @property
    def artifact_limit(self) -> int | None:
        """The job's memory limit in bytes that its artifacts count against (``None``: none)."""
        return self._artifact_limit

    @property
    def page_chars(self) -> int:
        """The most characters of an artifact one ``read_artifact`` call returns."""
        return self._page_chars

    def ask(self, question: str, schema: dict[str, Any] | None = None) -> Any:
        """Ask a person ``question`` and return the answer, a JSON value that fits ``schema``
        (a JSON schema; ``None``: any JSON value, usually text).

        In process, the reasoner's ``ask`` callback answers. On workers the job parks (state
        ``awaiting_approval``, no worker held) until a person answers; then **the call runs again
        from the start** and this ``ask`` returns the answer at once, so do the work with side
        effects after the questions (or key it on ``idempotency_key``).

        Raises ``QuestionError`` when no person can be asked (no ``ask`` callback), the question
        or schema is malformed, or ``NoAnswer`` when nobody answered within the job's
        ``answer_timeout_s``; a tool may catch it and go on.
        """
        check_question(question, schema)
        if self._asker is None:
            raise QuestionError(
                "no person can be asked here: the reasoner has no ask callback "
                "(pass ask=... to the reasoner, or run the job on workers)"
            )
        self._asked += 1
        asked = Question(
            text=question, answer_schema=schema, round=self.round, call_index=self.call_index, seq=self._asked
        )
        return self._asker(asked)

    def spawn(self, specs: Any, wait: Any = "all") -> list[ChildOutcome]:
        """Start one child job per spec (a ``ChildSpec``, a dict with at least ``goal``, or a goal
        string) and wait until ``wait`` holds: ``"all"`` children ended, ``"any"`` did, or ``n``
        did; return one ``ChildOutcome`` (job id, status, deliverable, error) per child, in order.
        A child's failure is its outcome, not this call's.

        On workers the job parks (state ``waiting_for_children``, no worker held) until then; the
        call then **runs again from the start** and this ``spawn`` returns at once: the children's
        ids derive from (job, round, call, spawn, index), so the second run starts none again.
        Children inherit the job's owner, share its deadline and budget, and carry ``parent_id``
        (docs/children.md).

        Raises ``SpawnError`` when children cannot run here (in process), a spec is malformed,
        or a limit is reached (``TANDEM_CHILD_MAX_DEPTH``, ``TANDEM_CHILD_MAX_FANOUT``).
        """
        from tandem.toolkit.children import check_specs, check_wait

        checked = check_specs(specs)
        how = check_wait(wait, len(checked))
        if self._spawner is None:
            raise SpawnError(
                "child jobs cannot be started here: they run on workers only (submit the job with "
                "tandem.submit, or run it with the embedded runtime)"
            )
        self._spawned += 1
        outcomes: list[ChildOutcome] = self._spawner(checked, how, self._spawned)
        return outcomes


class InjectionMapping:
    """Services injected into tool parameters by annotation (``GraphDb`` -> the live client).

    A parameter whose annotation (or the ``X`` of ``Optional[X]``) is a registered type is
    hidden from the model and filled in at call time. Registration is by type, not instance,
    so tools built before the service exists still hide the parameter once the type is known.
    """

    def __init__(self) -> None:
        self._services: dict[type, Any] = {}
        self._lock = threading.Lock()
        self.version = 0

    def register(self, service_type: type, instance: Any) -> None:
        """Inject ``instance`` into every tool parameter annotated with ``service_type``."""
        with self._lock:
            self._services[service_type] = instance
            self.version += 1

    def unregister(self, service_type: type) -> None:
        """Stop injecting ``service_type``."""
        with self._lock:
            self._services.pop(service_type, None)
            self.version += 1

    def types(self) -> tuple[type, ...]:
        """The registered types."""
        return tuple(self._services)

    def get(self, service_type: type) -> Any:
        """The instance registered for ``service_type``; ``KeyError`` if none."""
        return self._services[service_type]

    def __contains__(self, service_type: object) -> bool:
        return service_type in self._services


injection_mapping = InjectionMapping()
"""The process-wide mapping that tools use unless given another."""
