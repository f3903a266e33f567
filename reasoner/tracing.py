"""OpenTelemetry spans, at no cost when tracing is off.

``configure(settings)`` starts the SDK once per process when ``TraceSettings`` says so (the standard
``OTEL_*`` variables; ``tandem.broker_config.trace_settings``). Until then every helper here is a
check of one attribute: no OpenTelemetry module is imported, no span object is made. So code on a
step's path calls them unconditionally.

Once on, ``span`` opens a span as a child of the current context, ``event`` and ``annotate`` write
to the current span, and ``carrier``/``extract`` move a context as W3C ``traceparent`` text (what
rides in Celery message headers and in a job's spec). Model calls follow the GenAI semantic
conventions (``model_span``); their prompts and completions are recorded only with
``TANDEM_TRACE_CONTENT=true``, redacted (``content``).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from tandem.toolkit.redaction import redact

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

    from tandem.broker_config.trace_settings import TraceSettings

log = logging.getLogger("tandem.tracing")

SCOPE = "tandem"
"""The instrumentation scope of tandem's spans."""

CONTENT_CHARS = 16_000
"""Longest prompt or completion text recorded on a span (the rest is cut, saying so)."""

Attributes = Mapping[str, str | bool | int | float]


class _State:
    on: bool = False
    content: bool = False
    tracer: Tracer | None = None
    provider: TracerProvider | None = None


STATE = _State()
"""Whether this process traces (``on``), records content (``content``), and its tracer."""
_lock = threading.Lock()
_NULL = contextlib.nullcontext(None)


def enabled() -> bool:
    """Whether this process records spans."""
    return STATE.on


def configure(settings: TraceSettings, service_name: str = "tandem") -> bool:
    """Start the SDK with the exporters ``settings`` names (once per process; later calls change
    nothing); whether tracing is on. ``OTEL_SERVICE_NAME``/``OTEL_RESOURCE_ATTRIBUTES`` override
    ``service_name``, as the SDK reads them."""
    with _lock:
        if STATE.provider is not None or not settings.enabled:
            return STATE.on
        from opentelemetry.sdk.resources import OTELResourceDetector, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create({"service.name": service_name}).merge(OTELResourceDetector().detect())
        provider = TracerProvider(resource=resource)
        for name in settings.exporters:
            provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
        install(provider, content=settings.content)
        atexit.register(flush)
        return True


def _exporter(name: str) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        from tandem.broker_config.errors import SettingsError

        raise SettingsError(
            "OTEL_TRACES_EXPORTER/OTEL_EXPORTER_OTLP_ENDPOINT ask for the OTLP exporter, which is not "
            "installed: pip install 'tandem-llm[otlp]' (or set OTEL_SDK_DISABLED=true)"
        ) from exc
    return OTLPSpanExporter()


def install(provider: TracerProvider, *, content: bool = False) -> None:
    """Trace through ``provider`` from now on (``configure`` calls it; tests pass one with an
    in-memory exporter). ``content``: record prompts and completions."""
    STATE.provider = provider
    STATE.tracer = provider.get_tracer(SCOPE)
    STATE.content = content
    STATE.on = True


def uninstall() -> None:
    """Stop tracing in this process (flushing what was recorded); for tests."""
    flush()
    STATE.on, STATE.tracer, STATE.provider, STATE.content = False, None, None, False


def flush(timeout_ms: int = 5000) -> None:
    """Export the spans still held in memory (a worker calls it at its warm shutdown)."""
    provider = STATE.provider
    if provider is not None:
        try:
            provider.force_flush(timeout_ms)
        except Exception:
            log.warning("could not export the last spans", exc_info=True)


def span(
    name: str,
    attributes: Attributes | None = None,
    *,
    parent: Context | None = None,
    kind: str = "internal",
    quiet: tuple[type[BaseException], ...] = (),
) -> contextlib.AbstractContextManager[Span | None]:
    """A span ``name`` made current while the block runs (a child of ``parent``, or of the
    current span); ``None`` when tracing is off. An exception leaving the block is recorded on it
    and marks it failed, unless it is one of ``quiet`` (a control-flow exception, such as Celery's
    ``Ignore``: recorded as attribute ``tandem.exit``)."""
    if not STATE.on:
        return _NULL
    return _span(name, attributes, parent, kind, quiet)


@contextlib.contextmanager
def _span(
    name: str,
    attributes: Attributes | None,
    parent: Context | None,
    kind: str,
    quiet: tuple[type[BaseException], ...],
) -> Iterator[Span]:
    from opentelemetry.trace import SpanKind, Status, StatusCode

    assert STATE.tracer is not None
    with STATE.tracer.start_as_current_span(
        name,
        context=parent,
        kind=SpanKind[kind.upper()],
        attributes=dict(attributes or {}),
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except quiet as exc:
            current.set_attribute("tandem.exit", type(exc).__name__)
            raise
        except BaseException as exc:
            message = redact(str(exc))[:2000]  # never a secret on a span: no traceback locals either
            current.add_event(
                "exception", {"exception.type": type(exc).__name__, "exception.message": message}
            )
            current.set_attribute("error.type", type(exc).__name__)
            current.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {message}"[:500]))
            raise


def current() -> Span | None:
    """The current span when it records, else ``None``."""
    if not STATE.on:
        return None
    from opentelemetry import trace

    got = trace.get_current_span()
    return got if got.is_recording() else None


def annotate(attributes: Attributes) -> None:
    """Set ``attributes`` on the current span (nothing when tracing is off)."""
    if STATE.on and (got := current()) is not None:
        got.set_attributes(dict(attributes))


def event(name: str, attributes: Attributes | None = None) -> None:
    """Add event ``name`` to the current span (nothing when tracing is off)."""
    if STATE.on and (got := current()) is not None:
        got.add_event(name, dict(attributes or {}))


def carrier() -> dict[str, str]:
    """The current context as W3C trace-context text (``traceparent``, maybe ``tracestate``);
    empty when tracing is off or no span is current."""
    if not STATE.on:
        return {}
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    out: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(out)
    return out


def extract(source: Mapping[str, Any] | None) -> Context | None:
    """The context a W3C ``traceparent`` in ``source`` names (``None`` when none, or tracing off)."""
    if not STATE.on or not source or not isinstance(source.get("traceparent"), str):
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carried = {k: v for k, v in source.items() if k in ("traceparent", "tracestate") and isinstance(v, str)}
    return TraceContextTextMapPropagator().extract(carried)


@contextlib.contextmanager
def attached(context: Context | None) -> Iterator[None]:
    """Make ``context`` current while the block runs (as it is when ``None``)."""
    if context is None:
        yield
        return
    from opentelemetry import context as otel_context

    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


def captured() -> Context | None:
    """The current context, to carry to another thread (``None`` when tracing is off)."""
    if not STATE.on:
        return None
    from opentelemetry import context as otel_context

    return otel_context.get_current()


def content(text: str, extra: tuple[str, ...] = ()) -> str | None:
    """``text`` as a span may hold it: redacted (registered secrets, credential shapes, and
    ``extra``) and cut at ``CONTENT_CHARS``; ``None`` unless the operator opted in
    (``TANDEM_TRACE_CONTENT``)."""
    if not (STATE.on and STATE.content):
        return None
    shown = redact(text, extra)
    if len(shown) > CONTENT_CHARS:
        shown = shown[:CONTENT_CHARS] + f"... ({len(shown) - CONTENT_CHARS} more characters)"
    return shown


async def in_context(context: Context | None, awaitable: Any) -> Any:
    """Await ``awaitable`` with ``context`` current (a model call handed to another thread's loop
    keeps its span's context there)."""
    with attached(context):
        return await awaitable


def model_span(model: str, api_base: str | None, role: str) -> contextlib.AbstractContextManager[Span | None]:
    """The span of one model call, per OpenTelemetry's GenAI semantic conventions: named ``chat
    <model>``, kind client, with ``gen_ai.operation.name``, ``gen_ai.request.model``,
    ``gen_ai.provider.name`` (the LiteLLM provider prefix) and ``server.address``/``server.port``
    (from ``api_base``; its credentials never). ``model_reply`` adds what the reply says."""
    if not STATE.on:
        return _NULL
    from urllib.parse import urlsplit

    attrs: dict[str, str | int] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.provider.name": model.split("/", 1)[0] if "/" in model else "openai",
        "tandem.role": role,
    }
    if api_base:
        try:
            parts = urlsplit(api_base)
            if parts.hostname:
                attrs["server.address"] = parts.hostname
            if parts.port:
                attrs["server.port"] = parts.port
        except ValueError:
            pass
    return _span(f"chat {model}", attrs, None, "client", ())


def model_request(span: Span | None, system: str, messages: Any) -> None:
    """Record the prompt on a model span, only with ``TANDEM_TRACE_CONTENT`` (redacted)."""
    if span is None or not STATE.content:
        return
    import json

    if system:
        span.set_attribute("gen_ai.system_instructions", content(system) or "")
    text = json.dumps(list(messages), ensure_ascii=False, default=str)
    span.set_attribute("gen_ai.input.messages", content(text) or "")


def model_reply(span: Span | None, reply: Any) -> None:
    """Record a reply's usage and finish reason (``tool_calls`` when it asked for native tool calls,
    else ``stop``: tandem keeps no host finish reason) on a model span; its text only with
    ``TANDEM_TRACE_CONTENT`` (redacted)."""
    if span is None:
        return
    usage = getattr(reply, "usage", None)
    if usage is not None:
        span.set_attribute("gen_ai.usage.input_tokens", int(usage.prompt_tokens or 0))
        span.set_attribute("gen_ai.usage.output_tokens", int(usage.completion_tokens or 0))
    span.set_attribute("gen_ai.response.finish_reasons", ["tool_calls" if reply.tool_calls else "stop"])
    if getattr(reply, "model", None):
        span.set_attribute("gen_ai.response.model", str(reply.model))
    if STATE.content:
        import json

        out = {"role": "assistant", "content": reply.content, "reasoning": reply.reasoning}
        span.set_attribute("gen_ai.output.messages", content(json.dumps(out, ensure_ascii=False)) or "")
