"""Tools for ``test_breaking_cancel_wake``: ``fan_out`` (spawns mono children and waits for them,
from ``children_tools``), ``book_trip`` (asks a question) and ``notify`` (needs approval), in one
toolkit, so a tree of jobs can park on every kind of wait at once.

Workers load it with ``TANDEM_TOOLKIT=tests.integration.breaking_wake_tools:toolkit``.
"""

from __future__ import annotations

from tandem.toolkit import Tool
from tests.integration.children_tools import HOLD_SECONDS, fan_out
from tests.integration.tools import _with_questions

_service = _with_questions()
_tool = Tool.from_function(fan_out)
_tool.timeout = HOLD_SECONDS * 2  # the wait is the job's deadline's, never the tool's
_service.add_tool(_tool, [(_service.get_action("work"), 1.0)])
toolkit = _service.get_toolkit()
"""The integration tools (``notify`` needs approval), ``book_trip`` (a question) and ``fan_out``."""
