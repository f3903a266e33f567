"""``SlotCheckingRedis``: fakeredis that refuses, as a Redis Cluster does, a script or a
transaction whose keys lie in more than one hash slot (``CROSSSLOT``). The state-machine and
capacity tests run on it too, so a script that reaches outside its job's (or host's) slot fails
there, not first on a cluster."""

from __future__ import annotations

from typing import Any

import fakeredis
from redis.client import Pipeline
from redis.crc import key_slot
from redis.exceptions import ResponseError


def one_slot(keys: Any) -> None:
    """``ResponseError`` (CROSSSLOT, naming the keys) when ``keys`` hash to several slots."""
    encoded = [k if isinstance(k, bytes) else str(k).encode() for k in keys]
    if len({key_slot(k) for k in encoded}) > 1:
        raise ResponseError(f"CROSSSLOT Keys in request don't hash to the same slot: {encoded}")


class _SlotCheckingPipeline(Pipeline):  # type: ignore[type-arg]
    def execute(self, raise_on_error: bool = True) -> list[Any]:
        if self.transaction:
            keys: list[Any] = []
            for args, _options in self.command_stack:
                keys += _command_keys(args)
            one_slot(keys)
        return super().execute(raise_on_error)


def _command_keys(args: tuple[Any, ...]) -> list[Any]:
    name = str(args[0]).upper()
    if name in ("MULTI", "EXEC"):
        return []
    if name == "DEL":
        return list(args[1:])
    return [args[1]] if len(args) > 1 else []


class SlotCheckingRedis(fakeredis.FakeRedis):
    """fakeredis with Redis Cluster's one-slot rule for scripts and ``MULTI`` transactions."""

    def evalsha(self, sha: Any, numkeys: Any, *keys_and_args: Any) -> Any:  # type: ignore[override]
        one_slot(keys_and_args[: int(numkeys)])
        return super().evalsha(sha, numkeys, *keys_and_args)

    def eval(self, script: Any, numkeys: Any, *keys_and_args: Any) -> Any:  # type: ignore[override]
        one_slot(keys_and_args[: int(numkeys)])
        return super().eval(script, numkeys, *keys_and_args)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:  # type: ignore[type-arg]
        return _SlotCheckingPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
