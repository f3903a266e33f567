"""``Sweeping``: a sweep run every ``interval`` seconds in a daemon thread of a worker process (the
reconciler's and the webhook sweeper's), a failed sweep logged and tried again at the next."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("tandem.reconciler")


class Sweeping:
    """Runs ``sweep`` every ``interval`` seconds between ``start`` and ``stop``; subclasses set
    ``interval`` and ``thread_name`` and define ``sweep``."""

    interval: float
    thread_name = "tandem-sweeper"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sweep(self) -> int:
        """One sweep; how many jobs it acted on."""
        raise NotImplementedError

    def pause(self) -> bool:
        """Wait until the next sweep is due; ``True`` once ``stop`` was called."""
        return self._stop.wait(self.interval)

    def start(self) -> None:
        """Sweep in a daemon thread until ``stop``."""
        if self._thread is not None:
            return

        def loop() -> None:
            while not self.pause():
                try:
                    self.sweep()
                except Exception:  # Redis down: the next sweep tries again
                    log.warning("%s: sweep failed; retrying", self.thread_name, exc_info=True)

        self._thread = threading.Thread(target=loop, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sweeping."""
        self._stop.set()


__all__ = ["Sweeping"]
