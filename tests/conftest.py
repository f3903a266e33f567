"""How ``make test`` spreads the suite over several pytest processes (pytest-xdist).

``make test`` runs ``pytest -n 6 --dist loadfile --no-loadscope-reorder``: a test module runs whole
on one process, so a cluster of ``celery worker`` processes that a module shares (``dual_cluster``)
is started once; each cluster takes a Redis database of its own
(``tests/integration/conftest.py``: ``_exclusive_db``).

The integration modules (``tests/integration/``: seconds to minutes per test, most of the suite's
time) are handed out first, the longest known ones (``LONGEST_FIRST``) before the others, so that
a long one does not start last while the other processes sit idle; xdist would otherwise start the
modules with the most tests first, which are quick unit tests.
A serial run (plain ``pytest``) keeps the usual order: the hook acts only in xdist's processes.

The install and image tests share the fresh environments they make across the session's processes
(``tests/integration/installs.py``): the first process names the session's folder for them, and
removes it when the session ends.

At the end, the summary lists the slowest modules: the seconds of their tests' setup, call and
teardown summed (a module's shared cluster counts once, in its first setup and last teardown), as
xdist's processes report them, beside the CPU seconds their pytest process and its reaped children
(celery workers, model servers, pip) spent meanwhile, and the suite's CPU in all: on a machine of
few cores the CPU, not the wall clock, is what a module costs the run, and the ``celery worker``
processes each module started (``WorkerGroup``: ~1.3 s of CPU each to start, more with LiteLLM).
``-ra`` (``pyproject.toml``) still lists what did not pass.
"""

from __future__ import annotations

import resource
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

SLOWEST_MODULES = 15
"""How many modules the summary's "slowest modules" section lists."""
_module_seconds: defaultdict[str, float] = defaultdict(float)
"""Seconds per test module (its path), summed over its tests' reports."""
_module_cpu: defaultdict[str, float] = defaultdict(float)
"""CPU seconds per test module (its path): its pytest process's and the children it reaped."""
_cpu_at_last_report = 0.0
"""This process's CPU seconds (its own and its reaped children's) at its last report."""
_module_workers: defaultdict[str, int] = defaultdict(int)
"""Worker processes started per test module (its path)."""
_workers_started = 0
"""Worker processes this process started (``WorkerGroup.start``), in all."""
_workers_at_last_report = 0


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _count_worker_starts() -> None:
    """Count the worker processes ``WorkerGroup.start`` starts (one per role) in this process."""
    from tandem.workers.embedded import WorkerGroup

    start = WorkerGroup.start

    def counted(self: WorkerGroup) -> WorkerGroup:
        global _workers_started
        _workers_started += len(self.roles)
        return start(self)

    WorkerGroup.start = counted  # type: ignore[method-assign]


def pytest_configure(config: pytest.Config) -> None:
    _count_worker_starts()
    if not hasattr(config, "workerinput"):  # before xdist starts its processes: they inherit it
        from tests.integration import installs

        installs.start_session()


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        from tests.integration import installs

        installs.end_session()


LONGEST_FIRST = (
    "tests/integration/test_breaking_install.py",
    "tests/integration/test_real_model.py",
    "tests/integration/test_breaking_image.py",
    "tests/integration/test_install.py",
    "tests/integration/test_breaking_commit_pushes.py",
    "tests/integration/test_image.py",
    "tests/integration/test_breaking_console.py",
    "tests/integration/test_breaking_queue_and_keys.py",
    "tests/integration/test_breaking_event_order.py",
    "tests/integration/test_breaking_durability.py",
    "tests/integration/http_clients/test_breaking_reads.py",
    "tests/integration/test_breaking_conversation.py",
    "tests/integration/http_clients/test_breaking_methods.py",
)
"""The modules that took longest in the last measured runs (their summary's "slowest modules"),
longest first: handed out before the other integration modules, so that none of them starts
last (xdist keeps two modules queued on each process; a long one queued behind another would end
the run alone)."""


def _order(item: pytest.Item) -> tuple[int, int]:
    module = item.nodeid.split("::", 1)[0]
    if module in LONGEST_FIRST:
        return (0, LONGEST_FIRST.index(module))
    return (1, 0) if module.startswith("tests/integration/") else (2, 0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # one of xdist's processes: all sort the same way
        items.sort(key=_order)  # stable: each module stays whole


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start counting a process's CPU once it has collected (collecting is no module's cost)."""
    global _cpu_at_last_report
    _cpu_at_last_report = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Attach to each phase's report the CPU this process spent, and the workers it started, since
    its last report (xdist carries ``user_properties`` to the controller)."""
    global _cpu_at_last_report, _workers_at_last_report
    outcome: Any = yield
    now = _cpu_seconds()
    report = outcome.get_result()
    report.user_properties.append(("cpu_seconds", now - _cpu_at_last_report))
    report.user_properties.append(("workers_started", _workers_started - _workers_at_last_report))
    _cpu_at_last_report, _workers_at_last_report = now, _workers_started


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each phase of each test (in xdist's controller: as its processes report them) to its
    module's seconds and CPU seconds."""
    module = report.nodeid.split("::", 1)[0]
    _module_seconds[module] += report.duration
    _module_cpu[module] += _summed(report, "cpu_seconds")
    _module_workers[module] += int(_summed(report, "workers_started"))


def _summed(report: pytest.TestReport, key: str) -> float:
    total = 0.0
    for name, value in report.user_properties:
        if name == key and isinstance(value, int | float):
            total += value
    return total


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not _module_seconds:
        return
    slowest = sorted(_module_seconds.items(), key=lambda item: item[1], reverse=True)[:SLOWEST_MODULES]
    terminalreporter.write_sep("=", f"slowest {len(slowest)} modules (setup + call + teardown, summed)")
    terminalreporter.write_line(f"{'wall':>8}    {'CPU':>8}    {'workers':>7}")
    for module, spent in slowest:
        cpu, workers = _module_cpu[module], _module_workers[module]
        terminalreporter.write_line(f"{spent:8.1f} s  {cpu:8.1f} s  {workers:7d}  {module}")
    costliest = sorted(_module_cpu.items(), key=lambda item: item[1], reverse=True)[:SLOWEST_MODULES]
    title = f"costliest {len(costliest)} modules by CPU (pytest process + reaped children)"
    terminalreporter.write_sep("=", title)
    for module, cpu in costliest:
        terminalreporter.write_line(f"{cpu:8.1f} s  {_module_workers[module]:4d} workers  {module}")
    total = sum(_module_cpu.values())
    terminalreporter.write_line(f"{total:8.1f} s  CPU in all ({len(_module_cpu)} modules)")
    terminalreporter.write_line(f"{sum(_module_workers.values()):8d}    worker processes started")


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
