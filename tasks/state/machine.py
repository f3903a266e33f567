"""``JobMachine``: a job's progress as one record in Redis, moved by atomic transitions.

The record (hash ``{prefix}:{<job>}:state``) holds the job's state (``running``, ``waiting`` or a
final state), its current step (``round``, ``kind``; ``calls`` for a tool step, ``status`` for
``finalize``), an ``epoch`` that grows at every claim of a step, the ``holder`` of the step's lease
and when that lease runs out (``lease_until``, on Redis's clock), the progress time, the deadline,
and the ``outbox``: the messages of the current step, written by the transition that made it
current and cleared once they were sent.

Every change is one Lua script (``scripts/<name>.lua``) over the job's keys, which all share the
hash tag ``{<job>}``:

- ``claim`` takes the current step for a worker (step and round must match, no live lease); it
  bumps the epoch and counts a lease that ran out as a *lease expiry*;
- ``transition`` stores the step's memory writes and moves to the next step, only for the
  claim's epoch and holder (a step that lost its lease stores nothing); it writes the outbox;
- ``claim_call`` / ``call_started`` / ``call_done`` run one tool call of a ``tools`` step: its
  claim is counted (the attempt), ``call_started`` marks it right before the tool runs (what an
  ``at_most_once`` tool's later attempt checks), its result is stored once, and the call that
  counts the round's pending calls down to zero moves the job to ``collect``;
- a ``transition`` to a ``tools`` step may *park* the job (state ``awaiting_approval``): the calls
  that need a person's decision are ``held`` (never claimed, never sent again), the approval
  record (``approval`` key) is written with the move, and the deadline is pushed back by the
  longest wait; ``settle`` stores a batch of decisions (the approval record must be the one the
  decider read) and, once every call is decided, stores the rejected calls' results, counts them
  down and sends the approved ones (``tandem.tasks.control.approvals``);
- ``reschedule`` parks the step (state ``waiting``) until a transient failure may have passed;
- ``finish`` stores the final result (the first one wins), appends the ``final`` event, writes the
  job's Celery result (or marks it for delivery: ``tandem.tasks.state.results``) and expires the job's keys;
- ``reconcile`` (the reconciler's look at one job) says which messages to send again.

The record also says which formats the job's keys hold (``spec_version``, ``memory_version``:
``tandem.tasks.state.versions``). ``create`` stamps the machine's own; ``claim`` and ``claim_call``
refuse a job whose formats the machine does not read before they write anything (``newer`` or
``older``), and raise the memory version of one they take to the machine's; ``reconcile`` leaves
such a job alone.

A message (a Celery task) only wakes a step up: a duplicated, stale, forged or wrong-round one
finds the record elsewhere and does nothing. Every key gets a TTL when it is written: a live job's
keys live until its deadline plus ``ttl_after``; an ended job's for ``TANDEM_MEMORY_TTL``. A script
sets the TTL only of the keys it may create (a write to an existing key keeps its TTL), so a step
costs no ``EXPIRE`` of keys it did not touch.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from redis import Redis

from tandem.reasoner.loop.step import StepKind
from tandem.tasks.state.claims import (
    CeleryWrite,
    Claim,
    ClaimRefused,
    FinalEntry,
    Message,
    Park,
    Reconciled,
    claim_token,
)
from tandem.tasks.state.keys import JOB_KEY, JOB_PARTS, WAKE_KEY, live_shard_key, live_shard_of
from tandem.tasks.state.record import JobRecord
from tandem.tasks.state.record import text as _text
from tandem.tasks.state.replicas import ReplicaWait, Waited, run_waited
from tandem.tasks.state.scripts import lua
from tandem.tasks.state.versions import (
    MEMORY_VERSION_FIELD,
    SPEC_VERSION_FIELD,
    SUPPORTED,
    JobVersions,
    SupportedVersions,
)
from tandem.tasks.state.views import ViewAsk

if TYPE_CHECKING:
    from tandem.tasks.state.store import JobStore

SCRIPTS = (
    "create",
    "claim",
    "renew",
    "transition",
    "sent",
    "reschedule",
    "claim_call",
    "call_started",
    "call_unstarted",
    "call_done",
    "settle",
    "remember",
    "finish",
    "delivered",
    "reconcile",
)
"""The machine's scripts, each in ``scripts/<name>.lua``."""


def _pushes(wire: Sequence[tuple[str, str]]) -> list[Any]:
    """The script arguments of the messages a commit pushes (``push_all`` in ``prelude.lua``):
    their number, then each one; their lists go after the job's keys, in the same order."""
    return [len(wire), *(payload for _, payload in wire)]


class JobMachine:
    """The atomic transitions of the jobs in one store (see the module docstring), for a worker
    that reads the formats ``versions`` (this code's, ``SUPPORTED``; a test may make a machine of
    another release)."""

    def __init__(self, store: JobStore, versions: SupportedVersions = SUPPORTED) -> None:
        self.store = store
        self.redis: Redis = store.redis
        self.prefix = store.prefix
        self.versions = versions
        self.wait: ReplicaWait = store.wait
        self._scripts = {name: self.redis.register_script(lua(name)) for name in SCRIPTS}

    def _run(self, name: str, job_id: str, *args: Any, more_keys: Sequence[str] = ()) -> Any:
        return self._scripts[name](keys=[*self._keys(job_id), *more_keys], args=list(args))

    def _run_waited(
        self, name: str, job_id: str, keys: Sequence[str], args: Sequence[Any], what: str
    ) -> tuple[Any, Waited | None]:
        """Run script ``name``, then wait for ``self.wait``'s replicas on the same connection
        (``tandem.tasks.state.replicas``): a write that must survive a failover."""
        script = self._scripts[name]
        return run_waited(self.redis, script, lua(name), keys, args, self.wait, what=what, job_id=job_id)

    def _keys(self, job_id: str) -> list[str]:
        return [JOB_KEY.format(prefix=self.prefix, job_id=job_id, part=part) for part in JOB_PARTS]

    def _key(self, job_id: str, part: str) -> str:
        return JOB_KEY.format(prefix=self.prefix, job_id=job_id, part=part)

    # -- the live-job index ----------------------------------------------------------------

    def shard_key(self, shard: int) -> str:
        """The key of one shard of the live-job index."""
        return live_shard_key(self.prefix, shard)

    def shard_of(self, job_id: str) -> int:
        """The shard a job is indexed in."""
        return live_shard_of(job_id)

    def index(self, job_id: str, at: float, ttl: int, pipe: Any = None) -> None:
        """Put the job in the live index (checked from ``at`` on); queued on ``pipe`` (not run)
        when one is given."""
        key = self.shard_key(self.shard_of(job_id))
        own = pipe is None
        pipe = self.redis.pipeline(transaction=False) if own else pipe
        pipe.zadd(key, {job_id: at})
        pipe.expire(key, ttl)
        if own:
            pipe.execute()

    def look_now(self, job_id: str, pipe: Any) -> None:
        """Queue on ``pipe`` the move of a live job's next look to now: only ever earlier (``LT``),
        and only for a job in the index (``XX``: an ended job is not indexed again)."""
        pipe.zadd(self.shard_key(self.shard_of(job_id)), {job_id: time.time()}, xx=True, lt=True)

    def look_at(self, job_id: str, at: float, pipe: Any = None) -> None:
        """Move a live job's next look to ``at`` (Unix time), only while it is in the index
        (``XX``): a job that ended since it was read is not put back, and its shard, emptied, is
        not made again without a TTL (only ``index`` sets one). Queued on ``pipe`` when given."""
        key = self.shard_key(self.shard_of(job_id))
        (self.redis if pipe is None else pipe).zadd(key, {job_id: at}, xx=True)

    def wake(self) -> None:
        """Wake one reconciler of the fleet to sweep now (``Reconciler.pause``); the wake list
        lives a minute, should none take it."""
        key = WAKE_KEY.format(prefix=self.prefix)
        self.redis.pipeline(transaction=False).lpush(key, "1").expire(key, 60).execute()

    def unindex(self, job_id: str, pipe: Any = None) -> None:
        """Take the job out of the live index; queued on ``pipe`` (not run) when one is given."""
        (self.redis if pipe is None else pipe).zrem(self.shard_key(self.shard_of(job_id)), job_id)

    # -- transitions -----------------------------------------------------------------------

    def create(
        self,
        job_id: str,
        spec_json: str,
        reasoner: str,
        first: tuple[int, str],
        outbox: list[Message],
        *,
        timeout: float,
        ttl_after: int,
        outbox_id: str | None = None,
        started: Mapping[str, str] | None = None,
        maxlen: int = 10000,
        wire: Sequence[tuple[str, str]] = (),
    ) -> bool:
        """Create the job's record at its first step with that step's messages in the outbox
        (under ``outbox_id``, a fresh one by default); ``False`` if the job exists already. The
        record holds the formats this machine writes (``versions.newest``).

        ``started``: the job's first event (a ``JobStore.entry``), which makes its stream (capped
        at about ``maxlen``, living as long as the record). ``wire``: messages pushed to the broker's
        lists instead of kept in the outbox, as in ``transition``."""
        event = [started["type"], started["data"], started["at"]] if started is not None else ["", "", ""]
        return bool(
            self._run(
                "create",
                job_id,
                spec_json,
                reasoner,
                first[0],
                first[1],
                f"{timeout:.3f}",
                ttl_after,
                json.dumps(outbox),
                outbox_id or uuid.uuid4().hex,
                *event,
                maxlen,
                self.versions.newest.spec,
                self.versions.newest.memory,
                *_pushes(wire),
                more_keys=[key for key, _ in wire],
            )
        )

    def claim(
        self,
        job_id: str,
        round_no: int,
        kind: StepKind,
        lease: float,
        max_expiries: int,
        view: ViewAsk | None = None,
    ) -> Claim | ClaimRefused:
        """Take step ``(round_no, kind)`` for this worker, or say why not (``newer``/``older``: the
        job's formats are not the ones it reads; nothing written); with ``view``, the claim also
        reads what the step works with (``Claim.view``), in the same script call."""
        token = claim_token()
        extra = view.args() if view is not None else []
        versions = self.versions.lua_args()
        reply = self._run(
            "claim", job_id, round_no, kind, token, f"{lease:.3f}", max_expiries, *versions, *extra
        )
        if _text(reply[0]) != "ok":
            return ClaimRefused.of_reply(reply)
        seen = view.view(reply[2]) if view is not None and len(reply) > 2 else None
        return Claim(job_id, round_no, kind, token, epoch=int(_text(reply[1])), view=seen)

    def claim_call(
        self,
        job_id: str,
        round_no: int,
        index: int,
        lease: float,
        max_expiries: int,
        view: ViewAsk | None = None,
    ) -> Claim | ClaimRefused:
        """Take tool call ``index`` of ``round_no``; the attempt is recorded before it runs. With
        ``view``, the claim also reads what the call works with (``Claim.view``)."""
        token = claim_token()
        extra = view.args() if view is not None else []
        versions = self.versions.lua_args()
        reply = self._run(
            "claim_call", job_id, round_no, index, token, f"{lease:.3f}", max_expiries, *versions, *extra
        )
        if _text(reply[0]) != "ok":
            return ClaimRefused.of_reply(reply)
        started = len(reply) > 2 and _text(reply[2]) != ""
        seen = view.view(reply[3]) if view is not None and len(reply) > 3 else None
        attempt = int(_text(reply[1]))
        return Claim(
            job_id, round_no, "tools", token, index=index, attempt=attempt, started=started, view=seen
        )

    def call_started(self, claim: Claim) -> tuple[bool, Waited | None]:
        """Mark the claimed call started, right before its tool runs; ``False`` (nothing marked) if
        the claim was lost. A later attempt of an ``at_most_once`` call runs its tool again only if
        no earlier attempt got this far. With ``self.wait``, the mark waits for its replicas: a
        ``Waited`` that is ``short`` means the mark may not outlive a failover (the caller must not
        run the tool: ``call_unstarted``)."""
        marked, waited = self._run_waited(
            "call_started",
            claim.job_id,
            self._keys(claim.job_id),
            [claim.index, claim.token],
            f"the start mark of call {claim.index} of round {claim.round}",
        )
        return bool(marked), waited

    def call_unstarted(self, claim: Claim) -> bool:
        """Take back the claimed call's start mark and let its lease go, its tool not run (its
        mark did not reach the replicas in time); ``False`` if the claim was lost meanwhile. No
        lease expiry is counted: the call's next claim is an ordinary one. Should this write be
        lost and the mark kept, the next attempt reports the call interrupted: never a second
        run."""
        return bool(self._run("call_unstarted", claim.job_id, claim.index, claim.token))

    def renew(self, claim: Claim, lease: float, last_error: str = "") -> bool:
        """Extend the claim's lease (and, if given, set the job's ``last_error``: what a step's
        call met so far, read if the deadline ends the job meanwhile); ``False`` once the claim
        was lost."""
        index = str(claim.index) if claim.index else ""
        return bool(self._run("renew", claim.job_id, claim.token, f"{lease:.3f}", index, last_error))

    def transition(
        self,
        claim: Claim,
        nxt: tuple[int, str, int, str],
        outbox: list[Message],
        memory_writes: list[tuple[str, str]],
        *,
        tx: str,
        park: Park | None = None,
        events: Sequence[Mapping[str, str]] = (),
        maxlen: int = 10000,
        wire: Sequence[tuple[str, str]] = (),
    ) -> bool:
        """Store ``memory_writes`` and move from the claimed step to ``nxt`` (round, kind, calls,
        status) with ``outbox``; ``False`` (nothing stored) if the claim was lost. Running it again
        with the same ``tx`` returns ``True`` without changing anything. With ``park`` the job
        moves to ``awaiting_approval`` (see ``Park``). ``events``: the step's stream entries
        (``JobStore.entry``), appended with the commit (the stream capped at about ``maxlen``).
        ``wire``: messages the commit pushes to the broker's lists, as ``(list key, message JSON)``
        (``tandem.tasks.steps.dispatch.wire``; the broker must be this Redis), then in no outbox."""
        appended: list[Any] = [maxlen, *_pushes(wire)]
        for entry in events:
            appended += [entry["type"], entry["data"], entry["at"]]
        parking = (
            ["", "", 0, 0]
            if park is None
            else [
                park.record_json,
                "," + ",".join(map(str, park.held)) + ",",
                f"{park.bound:.3f}",
                f"{park.until:.6f}",
            ]
        )
        return bool(
            self._run(
                "transition",
                claim.job_id,
                claim.round,
                claim.kind,
                claim.epoch,
                claim.token,
                tx,
                nxt[0],
                nxt[1],
                nxt[2],
                nxt[3],
                json.dumps(outbox),
                tx,
                json.dumps(memory_writes),
                *parking,
                *appended,
                more_keys=[key for key, _ in wire],
            )
        )

    def outbox(self, job_id: str) -> tuple[str, list[Message]]:
        """The outbox id and the messages not yet known to be sent."""
        raw_id, raw = self.redis.hmget(self._key(job_id, "state"), ["outbox_id", "outbox"])
        return ("" if raw_id is None else _text(raw_id)), ([] if raw is None else json.loads(raw))

    def mark_sent(self, job_id: str, outbox_id: str) -> None:
        """Clear the outbox if it is still the one that was sent."""
        self._run("sent", job_id, outbox_id)

    def reschedule(
        self, claim: Claim, delay: float, reason: str, error: str, outbox: list[Message]
    ) -> str | float:
        """Park the claimed step until ``delay`` seconds from now, or the job's deadline if that
        comes first (state ``waiting``); returns until when (Redis time), or ``"deadline"`` (the
        deadline has passed), ``"lost"`` or ``"gone"``."""
        reply = self._run(
            "reschedule",
            claim.job_id,
            claim.round,
            claim.kind,
            claim.epoch,
            claim.token,
            f"{delay:.3f}",
            reason,
            error,
            json.dumps(outbox),
            uuid.uuid4().hex,
        )
        return float(_text(reply[1])) if _text(reply[0]) == "ok" else _text(reply[0])

    def call_done(
        self,
        claim: Claim,
        result_json: str,
        collect: list[Message],
        *,
        outbox_id: str | None = None,
        event: Mapping[str, str] | None = None,
        maxlen: int = 10_000,
    ) -> int:
        """Store the call's result and count the round's pending calls down: 0 if the claim was
        lost (nothing stored), 1 if calls are still pending, 2 if the job moved to ``collect``
        (with ``collect`` in the outbox, under ``outbox_id`` if given).

        ``event`` (a stream entry: ``type``, ``data``, ``at``) is appended to the job's events in
        the same script, so it is in the stream exactly when the result is stored: a cancel that
        ends the job right after the commit cannot put its ``final`` before it."""
        entry = [event["type"], event["data"], event["at"], maxlen] if event is not None else []
        return int(
            self._run(
                "call_done",
                claim.job_id,
                claim.round,
                claim.index,
                claim.token,
                result_json,
                json.dumps(collect),
                outbox_id or uuid.uuid4().hex,
                *entry,
            )
        )

    def settle(
        self,
        job_id: str,
        round_no: int,
        read: str,
        record_json: str,
        *,
        complete: bool,
        rejected: list[tuple[int, str]],
        approved: list[Message],
        collect: list[Message],
        seq: int = 0,
        key: str = "",
        answer: str = "",
        round_calls: Mapping[str, Message] | None = None,
    ) -> tuple[str, ...]:
        """Store the decisions of a parked job (``record_json``) if it still waits on pause ``seq``
        (its ``pause_seq``), its approval record is still ``read`` and it awaits approval in
        ``round_no``; once ``complete``, store the ``rejected`` calls' results, count them down, and
        move on: ``approved`` calls' messages in the outbox (or ``collect``'s when no call is
        pending). The deadline moves back by the time waited. With an idempotency ``key``, a key
        answered already changes nothing, and a stored decision keeps ``answer`` under it.
        ``round_calls``: the messages of the round's calls by index, to send again those that
        asked a question while the approval was open (the record's ``asking``).

        Returns ``("stored",)``, ``("running",)``, ``("collect",)``, ``("changed",)`` (another
        decision came first: read again), ``("repeat", answer)`` (the key's first answer),
        ``("stale", current seq, state, round)``, ``("not-waiting", state, round)``,
        ``("ended", state)`` or ``("gone",)``."""
        reply, _ = self._run_waited(
            "settle",
            job_id,
            [*self._keys(job_id), self.decisions_key(job_id)],
            [
                round_no,
                read,
                record_json,
                "1" if complete else "0",
                json.dumps([[str(i), r] for i, r in rejected]),
                json.dumps(approved),
                json.dumps(collect),
                uuid.uuid4().hex,
                str(seq),
                key,
                answer,
                json.dumps(round_calls) if round_calls else "",
            ],
            f"the decisions on round {round_no}",
        )
        return tuple(_text(x) for x in reply)

    def decisions_key(self, job_id: str) -> str:
        """The key of a job's decision answers by idempotency key (a hash; TTL of the job)."""
        return self._key(job_id, "decisions")

    def remember(self, job_id: str, key: str, answer: str) -> str:
        """Keep ``answer`` under idempotency ``key`` unless the key has one; the one kept."""
        kept = self._scripts["remember"](
            keys=[self._key(job_id, "state"), self.decisions_key(job_id)], args=[key, answer]
        )
        return _text(kept)

    def pause(self, job_id: str) -> tuple[str | None, int]:
        """The job's approval record (JSON, ``None`` if it has none) and its pause count, read
        together (the count is the record's pause number while the record is the last pause's)."""
        # A read-only transaction (one slot: the job's hash tag), not a script: a script's keys
        # need write access, which the client Redis user has on neither (docs/security.md).
        pipe = self.redis.pipeline(transaction=True)
        pipe.get(self._key(job_id, "approval"))
        pipe.hget(self._key(job_id, "state"), "pause_seq")
        raw, seq = pipe.execute()
        return (None if raw is None else _text(raw)), int(_text(seq or "0") or 0)

    def answered(self, job_id: str, key: str) -> str | None:
        """The answer kept under idempotency ``key``, if any."""
        raw = self.redis.hget(self.decisions_key(job_id), key)
        return None if raw is None else _text(raw)

    def finish(
        self,
        job_id: str,
        result_json: str,
        status: str,
        error: str,
        ttl: int,
        claim: Claim | None = None,
        *,
        final: FinalEntry | None = None,
        celery: CeleryWrite | None = None,
        parts: Sequence[str] | None = None,
    ) -> bool:
        """Store the final result and end the job: for ``claim``'s step only, or whatever the job
        does (``claim=None``: cancel, deadline, give-up). ``True`` for the first result stored.

        With the first result the same script appends the ``final`` event (``final``: its stream
        entry) and, with ``celery``, writes the job's Celery result (``CeleryWrite.key``) or leaves
        the ``deliver`` mark (``CeleryWrite.mark``) for ``deliver``/the reconciler. ``parts``: the
        job's keys (of ``JOB_PARTS``) whose TTL the end sets (all by default; a client's end, the
        keys its Redis user may write)."""
        if claim is None:
            args: list[Any] = ["1", "", "", "", ""]
        else:
            args = ["0", claim.round, claim.kind, claim.epoch, claim.token]
        entry = final or FinalEntry(json.dumps({"job_id": job_id, "status": status}), f"{time.time():.3f}")
        keys = self._keys(job_id)
        if parts is not None:  # the keys it may not write are not even named (a script's keys need
            # write access): the record's key stands in for them, and is not expired twice
            keys = [key if part in parts else keys[0] for part, key in zip(JOB_PARTS, keys, strict=True)]
        if celery is None:
            tail: list[Any] = ["", "", 0]
        elif celery.key:
            keys.append(celery.key)
            tail = ["script", celery.value, celery.expires]
        else:
            tail = ["mark", celery.mark, 0]
        head = [result_json, status, error, ttl, *args]
        expiring = ",".join(str(JOB_PARTS.index(p) + 1) for p in parts) if parts is not None else ""
        args = [*head, entry.data, entry.at, self.store.stream.maxlen, *tail, expiring]
        reply, _ = self._run_waited("finish", job_id, keys, args, "the end")
        return bool(reply)

    def delivered(self, job_id: str, mark: str) -> bool:
        """Clear the job's ``deliver`` mark once its Celery result is stored (``False``: the mark
        is another, or gone)."""
        return bool(self._run("delivered", job_id, mark))

    def reconcile(self, job_id: str, stall: float, max_expiries: int, outbox_grace: float) -> Reconciled:
        """Look at one job for the reconciler (see ``tandem.tasks.state.reconciler``); a job whose
        formats this machine does not read is ``newer`` or ``older``, and nothing is written."""
        versions = self.versions.lua_args()
        reply = [
            _text(x)
            for x in self._run(
                "reconcile", job_id, f"{stall:.3f}", max_expiries, f"{outbox_grace:.3f}", *versions
            )
        ]
        if reply[0] in ("newer", "older"):
            return Reconciled(reply[0], versions=JobVersions(int(reply[1]), int(reply[2])))
        if reply[0] == "parked":
            return Reconciled("parked", until=float(reply[1] or 0))
        if reply[0] == "deliver":
            return Reconciled("deliver", mark=reply[1])
        if reply[0] in ("wait", "children"):
            return Reconciled(reply[0], next_look=float(reply[1]))
        if reply[0] != "resend":
            return Reconciled(reply[0])
        return Reconciled("resend", reply[1], int(reply[2]), tuple(int(x) for x in reply[3:]))

    def intake(self, job_id: str) -> str | None:
        """The spec ``submit`` sent for a job no worker has started yet (JSON), or ``None``."""
        raw = self.redis.get(self._key(job_id, "intake"))
        return None if raw is None else _text(raw)

    def job_versions(self, job_id: str) -> JobVersions | None:
        """The formats the job's keys hold (``None`` for an unknown job)."""
        state, spec, memory = self.redis.hmget(
            self._key(job_id, "state"), ["state", SPEC_VERSION_FIELD, MEMORY_VERSION_FIELD]
        )
        if state is None:
            return None
        return JobVersions.of({SPEC_VERSION_FIELD: spec, MEMORY_VERSION_FIELD: memory})

    def job(self, job_id: str) -> JobRecord | None:
        """The job's record, typed (``None`` for an unknown job)."""
        return JobRecord.parse(self.redis.hgetall(self._key(job_id, "state")))

    def record(self, job_id: str) -> dict[str, str]:
        """The raw record, every field as the scripts wrote it (empty for an unknown job)."""
        raw = self.redis.hgetall(self._key(job_id, "state"))
        return {_text(k): _text(v) for k, v in raw.items()}
