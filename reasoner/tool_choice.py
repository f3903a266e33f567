"""The values of a role's ``tool_choice`` (``TANDEM_<ROLE>_TOOL_CHOICE``): read by the settings,
sent by ``tandem.reasoner.models.wire``. A leaf module: the client side reads the settings without
loading any part of a model service, and the reasoner never imports the settings (nor Celery)."""

from __future__ import annotations

__all__ = ["DEFAULT_TOOL_CHOICE", "TOOL_CHOICES"]

TOOL_CHOICES = ("auto", "required", "none", "omit")
"""OpenAI's three values, and ``"omit"`` to send no ``tool_choice`` (a host that refuses the field)."""
DEFAULT_TOOL_CHOICE = "auto"
"""What a request that offers tools names when the role sets nothing."""
