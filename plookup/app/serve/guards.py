"""What stands between a client and the model: an API key, a body-size limit, one request counter, and
the gate that lets one generation at a time through with a bounded queue in front.

The three middlewares are plain ASGI, outermost first: count (every answer, whoever gave it) →
key (401 before anything is read) → body limit (413 before the body is parsed).
"""

from __future__ import annotations

import hmac
import time
from typing import Callable, Optional, Sequence, Union

import anyio
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import APIError, error_response

OPEN_PATHS = frozenset({"/health"})  # answered without a key: readiness probes


class CountRequests:
    """Calls ``count(path, status)`` once per HTTP request, when its response starts (a 500 that
    escapes without one counts too)."""

    def __init__(self, app: ASGIApp, count: Callable[[str, int], None]):
        self.app, self.count = app, count

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def counting_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start" and not started:
                started = True
                self.count(scope["path"], message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        except Exception:
            if not started:
                self.count(scope["path"], 500)
            raise


def request_key(headers) -> str:
    """The API key a request gives: ``Authorization: Bearer KEY``, or Anthropic's ``x-api-key: KEY``
    (Claude Code's; llama-server takes either). `headers`: a mapping of lower-case names."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return headers.get("x-api-key", "").strip()


class RequireKey:
    """Every path but :data:`OPEN_PATHS` needs ``Authorization: Bearer KEY`` or ``x-api-key: KEY``,
    KEY one of `key` (a key, or several, as llama-server's ``--api-key A,B``); 401 otherwise."""

    def __init__(self, app: ASGIApp, key: Union[str, Sequence[str]]):
        keys = [key] if isinstance(key, str) else list(key)
        if not keys or not all(keys):
            raise ValueError("RequireKey needs at least one key, none of them empty")
        self.app, self.keys = app, [k.encode() for k in keys]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, send)
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        token = request_key(headers).encode("latin-1")
        # Constant time, and every key compared: the time must not tell how much of a guessed key
        # was right, nor which key it was near.
        matches = [hmac.compare_digest(token, key) for key in self.keys]
        if token and any(matches):
            return await self.app(scope, receive, send)
        error = APIError(401, "a valid API key is required: Authorization: Bearer KEY (or x-api-key: KEY)",
                         code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
        await error_response(error)(scope, receive, send)


class LimitBody:
    """Refuses request bodies over `max_bytes` with 413: by Content-Length before reading, and
    while reading a body sent without one."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    def _error(self) -> APIError:
        return APIError(413, f"the request body is over the server's limit of {self.max_bytes} bytes",
                        code="request_too_large")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await error_response(self._error())(scope, receive, send)
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:  # FastAPI passes an HTTPException on as it is
                    raise HTTPException(413, self._error().body["message"])
            return message

        await self.app(scope, limited_receive, send)


class ModelGate:
    """`slots` generations at a time (the model's slots, ``plookup.Llama(parallel=...)``); at most
    `max_queue` requests wait beyond them, and the next one is refused with 429 and a Retry-After
    of the expected wait.

    ``enter()`` and ``leave()`` are separate calls: a streamed response leaves the gate when its
    stream closes, in another task than the one that entered it.
    """

    def __init__(self, max_queue: int, on_depth: Optional[Callable[[int], None]] = None, slots: int = 1):
        self.max_queue, self.slots = max_queue, slots
        self._slot = anyio.Semaphore(slots)
        self.waiting = 0
        self.held = 0  # generations inside the gate
        # Called with True when a generation enters an idle gate, with False when the last one
        # leaves (before a waiting one is let in): the model is idle inside that call.
        self.on_busy: Callable[[bool], None] = lambda busy: None
        self._on_depth = on_depth or (lambda depth: None)
        self._mean_seconds = 1.0  # held time, moving average: the Retry-After estimate
        self._entered = 0.0

    async def enter(self) -> float:
        """Wait for the model; returns the seconds waited."""
        if self._slot.value == 0 and self.waiting >= self.max_queue:
            retry = max(1, round(self._mean_seconds * (self.waiting + 1) / self.slots))
            raise APIError(429, f"the server is busy: {self.waiting} requests are waiting for the model",
                           type="rate_limit_error", code="queue_full", headers={"Retry-After": str(retry)})
        start = time.monotonic()
        self.waiting += 1
        self._on_depth(self.waiting)
        try:
            await self._slot.acquire()
        finally:
            self.waiting -= 1
            self._on_depth(self.waiting)
        self._entered = time.monotonic()
        self.held += 1
        if self.held == 1:
            self.on_busy(True)
        return self._entered - start

    def leave(self) -> None:
        self._mean_seconds = 0.8 * self._mean_seconds + 0.2 * (time.monotonic() - self._entered)
        self.held -= 1
        try:
            if self.held == 0:
                self.on_busy(False)
        finally:
            self._slot.release()
