"""OpenAI-style error bodies (``{"error": {"message", "type", "param", "code"}}``) for the server.

llama_cpp.server's ``RouteErrorHandler`` answers request-validation failures with a 500 (and
malformed JSON with an unhandled exception), so plookup installs its own handlers and reuses only
its error shape and its message for "prompt longer than the context window".
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Callable, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from llama_cpp.server.errors import ErrorResponse, RouteErrorHandler
from starlette.exceptions import HTTPException


class APIError(Exception):
    """An error to answer with `status` and OpenAI's error body."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: Optional[str] = None, code: Optional[str] = None):  # fmt: skip
        super().__init__(message)
        self.status = status
        self.body = ErrorResponse(message=message, type=type, param=param, code=code)


def model_error(error: ValueError, body) -> APIError:
    """A ValueError from llama_cpp/plookup while generating for `body` is the request's fault.

    llama_cpp.server's formatters word the errors it knows (a prompt over the context window).
    """
    for pattern, formatter in RouteErrorHandler.pattern_and_formatters.items():
        match = pattern.search(str(error))
        if match is not None:
            status, response = formatter(body, match)
            return APIError(status, **response)
    return APIError(400, str(error))


def error_json(error: APIError) -> JSONResponse:
    return JSONResponse({"error": error.body}, status_code=error.status)


def install_error_handlers(app: FastAPI, on_error: Callable[[Request, int], None]) -> None:
    """Answer every failure with OpenAI's error body; `on_error(request, status)` counts it."""

    async def api_error(request: Request, error: APIError) -> JSONResponse:
        on_error(request, error.status)
        return error_json(error)

    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = error.errors()
        if any(problem["type"] == "json_invalid" for problem in problems):
            return await api_error(request, APIError(400, "the request body is not valid JSON"))
        first = problems[0]
        param = ".".join(str(part) for part in first["loc"] if part != "body") or None
        message = "; ".join(f"{'.'.join(map(str, p['loc']))}: {p['msg']}" for p in problems)
        return await api_error(request, APIError(400, message, param=param))

    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        return await api_error(request, APIError(error.status_code, str(error.detail), type="invalid_request_error"))

    async def internal_error(request: Request, error: Exception) -> JSONResponse:
        traceback.print_exception(error, file=sys.stderr)
        return await api_error(request, APIError(500, str(error), type="internal_server_error"))

    app.add_exception_handler(APIError, api_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, internal_error)


def error_event(error: APIError) -> dict:
    """The server-sent event reporting `error` once a stream's 200 status has gone out."""
    return {"data": json.dumps({"error": error.body})}
