"""Worker entry points per role, the ``tandem`` CLI and the embedded runtime."""
