"""The fixtures of the HTTP clients' breaking tests.

Each module gets a ``world`` of its own (workers and a ``tandem api``, module-scoped), so the
modules run side by side on separate test processes; ``side`` is either client (``sync``,
``async``), ``proxy`` a ``FaultProxy`` in front of the world's API, ``ended_job`` a completed job.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.http_clients.fault_proxy import FaultProxy
from tests.integration.http_clients.world import Side, World, completed_job, running_world


@pytest.fixture(scope="module")
def world(redis_base: str) -> Iterator[World]:
    yield from running_world(redis_base)


@pytest.fixture(params=["sync", "async"])
def side(request: pytest.FixtureRequest) -> Iterator[Side]:
    driver = Side(request.param)
    yield driver
    driver.close()


@pytest.fixture
def proxy(world: World) -> Iterator[FaultProxy]:
    made = FaultProxy(world.api.port)
    yield made
    made.close()


@pytest.fixture(scope="module")
def ended_job(world: World) -> str:
    """A completed job's id, for calls whose answers change nothing the tests look at."""
    return completed_job(world.api.url)
