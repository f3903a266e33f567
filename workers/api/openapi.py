"""The OpenAPI 3.1 document of ``tandem api`` (served at ``/openapi.json``)."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic.json_schema import models_json_schema

import tandem
from tandem.tasks.job_events import EVENT_TYPES
from tandem.tasks.spec import JobResult, JobSpec, JobStatus
from tandem.workers.api.children import children_paths
from tandem.workers.api.conversation import conversation_paths

_REF = "#/components/schemas/{model}"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF.format(model=name)}


_LISTED = {
    "allOf": [
        _ref("JobStatus"),
        {"type": "object", "properties": {"goal": {"type": ["string", "null"], "maxLength": 160}}},
    ]
}
"""A job of ``GET /v1/jobs``: its status and its goal (``tandem.workers.api.job_list``)."""


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


_JOB_ID = {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}


@cache
def openapi_document() -> dict[str, Any]:
    """The document: every endpoint, its bodies and its errors; the models' JSON schemas."""
    _, defs = models_json_schema(
        [(JobSpec, "validation"), (JobStatus, "serialization"), (JobResult, "serialization")],
        ref_template=_REF,
    )
    schemas: dict[str, Any] = dict(defs.get("$defs", {}))
    schemas["Error"] = {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {
                        "type": "string",
                        "examples": ["invalid_spec", "unauthorized", "body_too_large"],
                    },
                    "message": {"type": "string", "description": "What was wrong and what to do."},
                    "fields": {
                        "type": "array",
                        "description": "For invalid_spec: each field at fault.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "field": {"type": "string"},
                                "message": {"type": "string"},
                                "input": {},
                            },
                        },
                    },
                },
            }
        },
    }
    links = {"type": "object", "additionalProperties": {"type": "string"}}
    schemas["Job"] = {
        "type": "object",
        "required": ["id", "status"],
        "properties": {
            "id": {"type": "string"},
            "status": _ref("JobStatus"),
            "goal": {
                "type": ["string", "null"],
                "description": "The job's goal, its first 8,000 characters (ending with … when cut); "
                "null once its spec expired.",
            },
            "result": {"anyOf": [_ref("JobResult"), {"type": "null"}]},
            "approval": {"type": ["object", "null"], "description": "Tool calls awaiting a decision."},
            "links": links,
        },
    }
    schemas["JobEvent"] = {
        "type": "object",
        "description": "One event of a job (the SSE data field): id (the stream id), type, at, and the "
        "fields of its type.",
        "required": ["id", "type"],
        "properties": {
            "id": {"type": "string"},
            "type": {"type": "string", "enum": list(EVENT_TYPES)},
            "at": {"type": "number"},
        },
        "additionalProperties": True,
    }
    unauthorized = _error("No or a wrong bearer token (when TANDEM_API_TOKENS is set).")
    unknown = _error(
        "No such job (never submitted, or its records expired), or another tenant's: the same answer."
    )
    paths: dict[str, Any] = {
        "/v1/jobs": {
            "post": {
                "summary": "Submit a job",
                "operationId": "createJob",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("JobSpec")}},
                },
                "responses": {
                    "202": _json(_ref("Job"), "Queued; follow links.events."),
                    "400": _error(
                        "The body is empty, not UTF-8 or not JSON (NaN, lone surrogates, too deep)."
                    ),
                    "403": _error(
                        "A state-changing request from another site's page (Origin, Sec-Fetch-Site)."
                    ),
                    "401": unauthorized,
                    "413": _error("The body is larger than TANDEM_API_MAX_BODY."),
                    "415": _error("The body is not application/json."),
                    "422": _error("The spec is invalid; error.fields names each field."),
                },
            },
            "get": {
                "summary": "Recent jobs, newest first",
                "operationId": "listJobs",
                "parameters": [
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 200},
                    }
                ],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {"jobs": {"type": "array", "items": _LISTED}},
                        },
                        "The statuses, each with its goal (at most 160 characters; null once expired).",
                    ),
                    "401": unauthorized,
                },
            },
        },
        "/v1/jobs/{job_id}": {
            "get": {
                "summary": "A job's status, and its result once it ended",
                "operationId": "getJob",
                "parameters": [_JOB_ID],
                "responses": {"200": _json(_ref("Job"), "The job."), "401": unauthorized, "404": unknown},
            }
        },
        "/v1/jobs/{job_id}/events": {
            "get": {
                "summary": "The job's events as server-sent events, until the final event",
                "description": "Each event: `id:` the Redis stream id, `event:` its type, `data:` a JobEvent "
                "as JSON. Send `Last-Event-ID` (or `?after=`) to resume after an event; `after=$` starts "
                "with the next new event. Lines starting with ':' are heartbeats.",
                "operationId": "jobEvents",
                "parameters": [
                    _JOB_ID,
                    {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"}},
                    {"name": "after", "in": "query", "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": {
                        "description": "The event stream.",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    "400": _error("Last-Event-ID is not a stream id."),
                    "401": unauthorized,
                    "404": unknown,
                    "429": _error(
                        "The token already holds TANDEM_API_MAX_STREAMS event streams (Retry-After)."
                    ),
                    "503": _error(
                        "This process follows TANDEM_API_STREAM_JOBS jobs' events already (Retry-After)."
                    ),
                },
            }
        },
        "/v1/jobs/{job_id}/artifacts/{handle}": {
            "get": {
                "summary": "The whole text of a tool output the job kept as an artifact",
                "description": "A tool output over TANDEM_ARTIFACT_BYTES is kept whole; the tool_result "
                "event's `artifact.handle` names it. The body is the text as UTF-8 (text/plain), the "
                "headers `Tandem-Artifact-Chars` and `Tandem-Artifact-Bytes` its length.",
                "operationId": "getArtifact",
                "parameters": [
                    _JOB_ID,
                    {"name": "handle", "in": "path", "required": True, "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": {
                        "description": "The artifact's text.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    "401": unauthorized,
                    "404": _error(
                        "No such artifact: an unknown handle, or the job is unknown, expired or another "
                        "tenant's: the same answer (code unknown_artifact)."
                    ),
                },
            }
        },
        "/v1/jobs/{job_id}/cancel": {
            "post": {
                "summary": "Ask the job to stop at its next step",
                "operationId": "cancelJob",
                "parameters": [_JOB_ID],
                "responses": {
                    "202": _json({"type": "object"}, "Cancellation requested."),
                    "401": unauthorized,
                    "404": unknown,
                    "409": _error("The job has already ended."),
                },
            }
        },
        "/v1/jobs/{job_id}/decisions": {
            "post": {
                "summary": "Approve or reject tool calls awaiting approval",
                "description": 'Body: {"pause_id": "...", "idempotency_key": "...", "decisions": '
                '[{"index": 1, "approve": true}, {"index": 2, "approve": false, "reason": "..."}, '
                '{"index": 3, "approve": true, "args": {...}}]}, or {"decisions": true|false} for every '
                "undecided call. GET /v1/jobs/{id} shows the pause (approval.pause_id). The key may "
                "come as an Idempotency-Key header instead; the same key gets the same answer, applied once.",
                "operationId": "decide",
                "parameters": [_JOB_ID],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                "responses": {
                    "200": _json({"type": "object"}, "The pause's id and the decisions stored for it."),
                    "401": unauthorized,
                    "404": unknown,
                    "409": _error(
                        "Refused, nothing changed: stale_pause (the pause named is not current; the body "
                        "names pause_id and current_pause) or decision_refused (unknown call, bad args, ...)."
                    ),
                    "422": _error("The body is not a list of decisions or true/false."),
                    "504": _error("No worker applied the decision in time: it was withdrawn, never applies."),
                },
            }
        },
        "/v1/jobs/{job_id}/answers": {
            "post": {
                "summary": "Answer the question a job waits on",
                "description": 'Body: {"pause_id": "...", "idempotency_key": "...", "answer": <JSON>}: '
                "the answer must fit the question's answer_schema (text for a question without one). "
                "GET /v1/jobs/{id} shows the question (status.question, status.pause_id). The key may "
                "come as an Idempotency-Key header instead; the same key gets the same reply, applied once.",
                "operationId": "answer",
                "parameters": [_JOB_ID],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                "responses": {
                    "200": _json(
                        {"type": "object"}, "The pause's id, the round, the call and the answer stored."
                    ),
                    "401": unauthorized,
                    "404": unknown,
                    "409": _error(
                        "Refused, nothing changed: stale_pause (the pause named is not current; the body "
                        "names pause_id and current_pause) or answer_refused (no question waits, ended, ...)."
                    ),
                    "422": _error(
                        "invalid_answer: no answer, or one that does not fit the question's schema."
                    ),
                    "504": _error("No worker stored the answer in time: it was withdrawn, never applies."),
                },
            }
        },
        "/v1/jobs/{job_id}/resume": {
            "post": {
                "summary": "Continue a failed, cancelled or truncated job from its last stored step",
                "description": "The job goes on under the same id: stored model replies and tool results are "
                'reused, never redone. Body (optional): {"max_rounds": N} raises the round budget (N above '
                "the rounds used). The job's event stream goes on after its earlier final event with a "
                "job_started event holding resumed: true.",
                "operationId": "resumeJob",
                "parameters": [_JOB_ID],
                "requestBody": {
                    "required": False,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {"max_rounds": {"type": "integer", "minimum": 1}},
                            }
                        }
                    },
                },
                "responses": {
                    "202": _json({"type": "object"}, "Resumed: the job runs again; follow links.events."),
                    "401": unauthorized,
                    "404": _error("No such job, or its memory expired (TANDEM_MEMORY_TTL)."),
                    "409": _error("The job has not ended, or it completed: nothing to resume."),
                    "422": _error("max_rounds is not above the rounds used, or too low to go on."),
                    "504": _error("No worker answered in time."),
                },
            }
        },
        "/v1/jobs/{job_id}/fork": {
            "post": {
                "summary": "Start a new job from the first rounds of an ended job",
                "description": 'Body: {"round": R, "goal": "...", "max_rounds": N}: the new job holds rounds '
                "0..R-1 of the job and runs on from there with the same spec (goal and budget replaced if "
                "given); the job is untouched.",
                "operationId": "forkJob",
                "parameters": [_JOB_ID],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["round"],
                                "properties": {
                                    "round": {"type": "integer", "minimum": 1},
                                    "goal": {"type": "string"},
                                    "max_rounds": {"type": "integer", "minimum": 2},
                                },
                            }
                        }
                    },
                },
                "responses": {
                    "202": _json(_ref("Job"), "The new job; Location is its URL."),
                    "401": unauthorized,
                    "404": _error("No such job, or its memory expired (TANDEM_MEMORY_TTL)."),
                    "409": _error("The job has not ended; nothing changed."),
                    "422": _error("round is outside the stored rounds, or the goal is invalid."),
                    "504": _error("No worker answered in time."),
                },
            }
        },
        "/v1/me": {
            "get": {
                "summary": "The token's tenant and scopes",
                "operationId": "whoAmI",
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {
                                "tenant": {"type": "string"},
                                "scopes": {"type": "array", "items": {"type": "string"}},
                                "admin": {"type": "boolean"},
                            },
                        },
                        "Whom the token acts for.",
                    ),
                    "401": unauthorized,
                },
            }
        },
        "/healthz": {
            "get": {
                "summary": "Liveness: Redis answers",
                "security": [],
                "responses": {"200": _json({"type": "object"}, "OK."), "503": _error("Redis is down.")},
            }
        },
    }
    paths.update(conversation_paths(_json, _error, _JOB_ID))
    paths.update(children_paths(_json, _error, _JOB_ID))
    scoped = _error(
        "missing_scope: the token lacks the scope this action needs (error.scope names it: submit, "
        "read, control, approve); foreign_owner: a spec naming another tenant than the token's."
    )
    for path, operations in paths.items():
        for operation in operations.values() if path.startswith("/v1/") else ():
            responses = operation["responses"]
            if "403" in responses:  # a state change: a cross-site request or a missing scope
                description = responses["403"]["description"] + " Or " + scoped["description"]
                responses["403"] = _error(description)
            else:
                responses["403"] = scoped
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "tandem API",
            "version": tandem.__version__,
            "description": "Submit reasoning jobs, follow their events, cancel, resume or fork them. "
            "The job console is at /.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
