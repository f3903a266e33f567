"""Counting a fake Redis client's pipelined round trips, for tests of what is sent together."""

from __future__ import annotations

from typing import Any


def count_pipelines(redis: Any) -> list[int]:
    """Patch ``redis.pipeline`` so that every ``execute`` records how many commands it sent; the
    returned list fills as pipelines run (one entry per round trip)."""
    sent: list[int] = []
    real_pipeline = redis.pipeline

    def pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = real_pipeline(*args, **kwargs)
        real_execute = pipe.execute

        def execute(*a: Any, **k: Any) -> Any:
            sent.append(len(pipe.command_stack))
            return real_execute(*a, **k)

        pipe.execute = execute
        return pipe

    redis.pipeline = pipeline
    return sent


def count_commands(redis: Any) -> list[str]:
    """Patch ``redis.execute_command`` so that every command sent on its own (not pipelined) is
    recorded by name; the returned list fills as commands go out."""
    sent: list[str] = []
    real = redis.execute_command

    def counting(*args: Any, **kwargs: Any) -> Any:
        sent.append(str(args[0]))
        return real(*args, **kwargs)

    redis.execute_command = counting
    return sent
