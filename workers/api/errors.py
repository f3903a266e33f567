"""The API's errors: each becomes a JSON response ``{"error": {"code", "message", ...}}``."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from tandem.workers.errors import WorkerError


class ApiError(WorkerError):
    """An error answered to the client with ``status`` and a JSON body naming the problem
    (raised inside request handlers; the app turns it into the response)."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra
        self.headers: dict[str, str] = {}

    def with_headers(self, headers: dict[str, str]) -> ApiError:
        """This error, answered with ``headers`` too (``Retry-After``)."""
        self.headers.update(headers)
        return self

    def response(self, headers: dict[str, str] | None = None) -> JSONResponse:
        """The JSON response of this error."""
        body = {"error": {"code": self.code, "message": self.message, **self.extra}}
        return JSONResponse(body, status_code=self.status, headers={**self.headers, **(headers or {})})


def error_response(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    """A JSON error response."""
    return ApiError(status, code, message, **extra).response()
