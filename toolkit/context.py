"""What a tool may ask the runtime for: the call's context and registered services."""

from __future__ import annotations

import threading
from typing import Any

from pydantic import BaseModel, Field, computed_field


class ToolCallContext(BaseModel):
    """Facts about the call in progress, injected into any tool parameter annotated with this type.

    It holds plain data only. ``secrets`` (the job's ``JobSpec.secrets``, unsealed) is left out of
    every dump and repr, so the context can be logged or stored without them.

    ``idempotency_key`` is the same on every attempt of one call (``"<job>:<round>:<call index>"``)
    and ``attempt`` counts them from 1: a tool with side effects passes the key to the system it
    changes (an ``Idempotency-Key`` header, a unique column) so a call run again after a lost worker
    does not act twice.
    """

    job_id: str = ""
    round: int = 0
    role: str = "actor"
    call_index: int = 0
    attempt: int = 1
    metadata: dict[str, Any] = Field(default_factory=dict)
    secrets: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def idempotency_key(self) -> str:
        """``"<job>:<round>:<call index>"``: the same on every attempt of this call."""
        return f"{self.job_id}:{self.round}:{self.call_index}"


class InjectionMapping:
    """Services injected into tool parameters by annotation (``GraphDb`` -> the live client).

    A parameter whose annotation (or the ``X`` of ``Optional[X]``) is a registered type is
    hidden from the model and filled in at call time. Registration is by type, not instance,
    so tools built before the service exists still hide the parameter once the type is known.
    """

    def __init__(self) -> None:
        self._services: dict[type, Any] = {}
        self._lock = threading.Lock()
        self.version = 0

    def register(self, service_type: type, instance: Any) -> None:
        """Inject ``instance`` into every tool parameter annotated with ``service_type``."""
        with self._lock:
            self._services[service_type] = instance
            self.version += 1

    def unregister(self, service_type: type) -> None:
        """Stop injecting ``service_type``."""
        with self._lock:
            self._services.pop(service_type, None)
            self.version += 1

    def types(self) -> tuple[type, ...]:
        """The registered types."""
        return tuple(self._services)

    def get(self, service_type: type) -> Any:
        """The instance registered for ``service_type``; ``KeyError`` if none."""
        return self._services[service_type]

    def __contains__(self, service_type: object) -> bool:
        return service_type in self._services


injection_mapping = InjectionMapping()
"""The process-wide mapping that tools use unless given another."""
