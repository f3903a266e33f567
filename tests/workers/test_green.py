"""``tandem.workers.green``: the ``tandem`` command patches with gevent before its imports, only for
``worker --pool gevent``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tandem.workers.green import asks_for_gevent


@pytest.mark.parametrize(
    ("argv", "green"),
    [
        (["worker", "all", "--pool", "gevent"], True),
        (["worker", "actor", "--pool=gevent", "--concurrency", "200"], True),
        (["worker", "tools", "-P", "gevent"], True),
        (["worker", "all", "--pool", "threads"], False),
        (["worker", "all"], False),
        (["run", "--pool", "gevent"], False),  # not a worker
        ([], False),
    ],
)
def test_only_a_green_worker_asks_for_gevent(argv: list[str], green: bool) -> None:
    assert asks_for_gevent(argv) is green


def test_the_command_patches_before_kombu_takes_select_poll() -> None:
    """kombu's event loop captures ``select.poll`` when imported: importing the command's module
    for a green worker must patch first, or the worker blocks every greenlet in a real ``poll``."""
    pytest.importorskip("gevent")
    probe = (
        "import sys; sys.argv = ['tandem', 'worker', 'all', '--pool', 'gevent']\n"
        "import tandem.workers.cli\n"
        "from gevent import monkey\n"
        "from kombu.utils import eventio\n"
        "print(monkey.is_module_patched('socket'), monkey.is_module_patched('select'),"
        " eventio._get_poller().__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "_select"]  # not ``_poll``: a real, blocking poll
