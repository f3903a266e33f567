"""``TraceSettings``: whether this process traces, read once from the environment.

Tracing is configured by OpenTelemetry's own variables, which the SDK reads itself
(``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_SERVICE_NAME``, ``OTEL_BSP_SCHEDULE_DELAY``, ...). tandem only
decides whether to start the SDK at all, so a process nobody asked to trace never imports it:

- ``OTEL_SDK_DISABLED=true`` turns tracing off whatever else is set;
- ``OTEL_TRACES_EXPORTER`` names the exporters (``otlp``, ``console``; ``none`` is off);
- otherwise an ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` turns it on,
  exporting over OTLP/HTTP (the ``otlp`` extra).

``TANDEM_TRACE_CONTENT=true`` also records prompts and completions on the model-call spans, redacted
(``tandem.toolkit.redaction``, the job's secrets included); off by default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from tandem.broker_config.errors import SettingsError

EXPORTERS = ("otlp", "console", "none")
"""The values ``OTEL_TRACES_EXPORTER`` may hold (comma-separated)."""


def _yes(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise SettingsError(f"{name}={raw!r} is not a yes/no value: use true or false, or leave it unset")


@dataclass(frozen=True)
class TraceSettings:
    """Whether spans are recorded and exported, and with which exporters."""

    exporters: tuple[str, ...] = ()
    """The exporters to start (``otlp``, ``console``); empty: tracing is off."""
    content: bool = False
    """``TANDEM_TRACE_CONTENT``: record prompts and completions (redacted) on model-call spans."""

    @property
    def enabled(self) -> bool:
        """Whether this process records spans."""
        return bool(self.exporters)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TraceSettings:
        """Read ``OTEL_SDK_DISABLED``, ``OTEL_TRACES_EXPORTER``, the OTLP endpoints and
        ``TANDEM_TRACE_CONTENT``; an unknown exporter is refused, naming it."""
        env = os.environ if env is None else env
        content = _yes(env, "TANDEM_TRACE_CONTENT")
        if _yes(env, "OTEL_SDK_DISABLED"):
            return cls((), content)
        raw = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
        if raw:
            names = tuple(n.strip() for n in raw.split(",") if n.strip())
            unknown = [n for n in names if n not in EXPORTERS]
            if unknown:
                raise SettingsError(
                    f"OTEL_TRACES_EXPORTER={raw!r} names {unknown[0]!r}, which tandem cannot start: "
                    f"use {', '.join(EXPORTERS)} (comma-separated)"
                )
            return cls(tuple(n for n in names if n != "none"), content)
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        return cls(("otlp",) if (endpoint or "").strip() else (), content)
