"""How ``make test`` spreads the suite over several pytest processes (pytest-xdist).

``make test`` runs ``pytest -n 6 --dist loadfile --no-loadscope-reorder``: a test module runs whole
on one process, so a cluster of ``celery worker`` processes that a module shares (``dual_cluster``)
is started once; each cluster takes a Redis database of its own
(``tests/integration/conftest.py``: ``_exclusive_db``).

The integration modules (``tests/integration/``: seconds to minutes per test, most of the suite's
time) are handed out first, so that a long one does not start last while the other processes sit
idle; xdist would otherwise start the modules with the most tests first, which are quick unit tests.
A serial run (plain ``pytest``) keeps the usual order: the hook acts only in xdist's processes.
"""

from __future__ import annotations

import pytest


def _is_integration(item: pytest.Item) -> bool:
    return item.nodeid.startswith("tests/integration/")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # one of xdist's processes: all sort the same way
        items.sort(key=lambda item: not _is_integration(item))  # stable: each module stays whole


@pytest.fixture(autouse=True)
def _broker_stand_in_gets_every_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that replaces ``app.send_task`` (its stand-in for the broker) gets every step's message
    there: a commit does not push them to the broker's lists itself (``dispatch.wire``), as it does
    where the broker is the job state's Redis."""
    from tandem.tasks import app as app_module
    from tandem.tasks.steps import dispatch

    real = dispatch.pushes_with_commit

    def pushes_with_commit(rt: object) -> bool:
        return "send_task" not in vars(app_module.app) and real(rt)  # type: ignore[arg-type]

    monkeypatch.setattr(dispatch, "pushes_with_commit", pushes_with_commit)
