"""OpenAI-style error bodies (``{"error": {"message", "type", "param", "code"}}``) for the server.

llama_cpp.server's ``RouteErrorHandler`` answers request-validation failures with a 500 (and
malformed JSON with an unhandled exception), so plookup installs its own handlers and reuses only
its error shape and its wording for "prompt longer than the context window". An unexpected error
is logged with its traceback and answered "internal error": its text may hold paths and data.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from llama_cpp.server.errors import ErrorResponse, RouteErrorHandler
from starlette.exceptions import HTTPException

log = logging.getLogger("plookup.app.serve")
ANTHROPIC_PATHS = ("/v1/messages",)


class APIError(Exception):
    """An error to answer with `status`, OpenAI's error body and any extra `headers`."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: Optional[str] = None, code: Optional[str] = None,
                 headers: Optional[dict[str, str]] = None):
        super().__init__(message)
        self.status = status
        self.body = ErrorResponse(message=message, type=type, param=param, code=code)
        self.headers = headers or {}


# llama_cpp's refusal of a prompt that fills the context (the only length it checks, as llama-server:
# max_tokens is bounded by the room left, and generation stops at the context's end)
PROMPT_OVER_CONTEXT = re.compile(r"Requested tokens \((\d+)\) exceed context window of (\d+)")


def model_error(error: ValueError, body) -> APIError:
    """A ValueError from llama_cpp/plookup while preparing or generating for `body` is the
    request's fault. llama_cpp.server's formatters word the other errors they know."""
    over = PROMPT_OVER_CONTEXT.search(str(error))
    if over is not None:
        prompt, n_ctx = int(over.group(1)), int(over.group(2))
        param = "messages" if hasattr(body, "messages") else "prompt"
        return APIError(400, f"the prompt is {prompt} tokens, and the context holds {n_ctx} with the answer: "
                             f"shorten the {param} or start the server with a larger context (-c)",
                        param=param, code="context_length_exceeded")
    for pattern, formatter in RouteErrorHandler.pattern_and_formatters.items():
        match = pattern.search(str(error))
        if match is not None:
            status, response = formatter(body, match)
            return APIError(status, **response)
    return APIError(400, str(error))


def error_response(error: APIError) -> JSONResponse:
    return JSONResponse({"error": error.body}, status_code=error.status, headers=error.headers)


def shaped(request: Request, error: APIError) -> JSONResponse:
    """`error` answered in the shape the route's clients read: Anthropic's on its Messages API."""
    if request.url.path.startswith(ANTHROPIC_PATHS):
        from .messages_api import error_body

        return JSONResponse(error_body(error.status, str(error)), status_code=error.status, headers=error.headers)
    return error_response(error)


def validation_message(problems: list) -> str:
    """pydantic's problems with a body, each where it is and what is wrong, in one line."""
    return "; ".join(f"{'.'.join(map(str, p['loc']))}: {p['msg']}" for p in problems)


def install_error_handlers(app: FastAPI) -> None:
    """Answer every failure with OpenAI's error body (Anthropic's on its Messages API)."""

    async def api_error(request: Request, error: APIError) -> JSONResponse:
        return shaped(request, error)

    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = error.errors()
        for problem in problems:
            if problem["type"] == "json_invalid":  # FastAPI's: the decoder's reason, and where
                where = f" at character {problem['loc'][1]}" if len(problem["loc"]) > 1 else ""
                reason = (problem.get("ctx") or {}).get("error", "")
                return shaped(request, APIError(400, f"the request body is not valid JSON: {reason}{where}"))
        first = problems[0]
        if first["type"] == "missing" and tuple(first["loc"]) == ("body",):
            return shaped(request, APIError(400, "the request body is empty: a JSON object is expected"))
        param = ".".join(str(part) for part in first["loc"] if part != "body") or None
        return shaped(request, APIError(400, validation_message(problems), param=param))

    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        # FastAPI words every other failure to decode a JSON body "There was an error parsing the body".
        if isinstance(error.__cause__, UnicodeDecodeError):
            return shaped(request, APIError(400, "the request body is not valid JSON: it is not UTF-8 text"))
        if isinstance(error.__cause__, RecursionError):
            return shaped(request, APIError(400, "the request body is not valid JSON: it is nested too deeply"))
        return shaped(request, APIError(error.status_code, str(error.detail), headers=getattr(error, "headers", None)))

    async def internal_error(request: Request, error: Exception) -> JSONResponse:
        log.error("internal error answering %s %s", request.method, request.url.path, exc_info=error)
        return shaped(request, APIError(500, "internal error", type="internal_server_error"))

    app.add_exception_handler(APIError, api_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, internal_error)


def error_event(error: APIError) -> dict:
    """The server-sent event reporting `error` once a stream's 200 status has gone out."""
    return {"data": json.dumps({"error": error.body})}
