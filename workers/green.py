"""gevent's monkey-patching for ``tandem worker --pool gevent``, done before anything else loads.

A green worker needs the standard library made cooperative (sockets, ``select``, threads, locks,
``time.sleep``) before Celery, kombu, redis-py or httpx are imported: a module imported earlier
keeps the blocking functions it captured. kombu's event loop takes ``select.poll`` when it is
imported, and a ``poll`` that is not gevent's blocks every greenlet of the process: the worker
said it was ready, then ran no task and answered no ping. The ``tandem`` command therefore calls
``patch_if_asked`` before its own imports (as ``celery`` does for ``-P gevent``).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["asks_for_gevent", "patch_if_asked"]


def asks_for_gevent(argv: Sequence[str]) -> bool:
    """Whether ``argv`` (the ``tandem`` command's arguments) starts a worker with ``--pool gevent``."""
    if not argv or argv[0] != "worker":
        return False
    for i, arg in enumerate(argv):
        if arg in ("--pool", "-P") and i + 1 < len(argv) and argv[i + 1] == "gevent":
            return True
        if arg in ("--pool=gevent", "-Pgevent"):
            return True
    return False


def patch_if_asked(argv: Sequence[str]) -> bool:
    """Monkey-patch the standard library with gevent when ``argv`` asks for a green worker and
    gevent is installed (without it, the worker says so in one line when it starts); ``True`` if
    it patched."""
    if not asks_for_gevent(argv):
        return False
    try:
        from gevent import monkey
    except ImportError:
        return False
    monkey.patch_all()
    return True
