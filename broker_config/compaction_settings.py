"""``CompactionSettings``: when and by which model a role's older rounds are summarized.

- ``TANDEM_COMPACT_AT``: the share of a role's context budget past which its next request first
  summarizes the rounds it could leave out (``0.8`` by default; ``0``: never, the oldest rounds are
  only left out with a marker). See ``tandem.reasoner.context.summary``.
- ``TANDEM_<ROLE>_SUMMARY_MODEL``: a LiteLLM model string that writes the role's summaries, on the
  role's host settings (``_API_BASE``, ``_API_KEY``, ...); unset: the role's own model.

Read by ``Settings.from_env`` (``Settings.compaction``); a bad value is a ``SettingsError`` naming
the variable, the value and what to write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tandem.broker_config.errors import SettingsError

DEFAULT_COMPACT_AT = 0.8
"""``TANDEM_COMPACT_AT`` when unset (``tandem.reasoner.context.summary.COMPACT_AT``)."""


def _share(env: Mapping[str, str], name: str) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return DEFAULT_COMPACT_AT
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 1:  # also refuses nan
        raise SettingsError(
            f"{name}={raw!r} must be a share of the context budget from 0 to 1 (e.g. {DEFAULT_COMPACT_AT}; "
            "0 turns summaries off)"
        )
    return value


@dataclass(frozen=True)
class CompactionSettings:
    """``compact_at`` (``TANDEM_COMPACT_AT``) and each role's summary model
    (``TANDEM_<ROLE>_SUMMARY_MODEL``; ``None``: the role's own)."""

    compact_at: float = DEFAULT_COMPACT_AT
    thinker_model: str | None = None
    actor_model: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> CompactionSettings:
        """Read ``TANDEM_COMPACT_AT`` and ``TANDEM_THINKER_SUMMARY_MODEL``/``TANDEM_ACTOR_SUMMARY_MODEL``."""
        return cls(
            compact_at=_share(env, "TANDEM_COMPACT_AT"),
            thinker_model=env.get("TANDEM_THINKER_SUMMARY_MODEL", "").strip() or None,
            actor_model=env.get("TANDEM_ACTOR_SUMMARY_MODEL", "").strip() or None,
        )

    def summary_model(self, role: str) -> str | None:
        """The model that summarizes ``role``'s rounds, when one of its own is set."""
        return self.thinker_model if role == "thinker" else self.actor_model
