"""A model whose RPC server went away, as the server tells its clients: the requests waiting for
the model or generating on it get a 503 naming the server, instead of a dropped connection, and
``/health`` says what was lost. Mid-generation ggml's RPC client cannot go on and the process
exits with EXIT_RPC_LOST (:mod:`plookup.api.rpc`) once the answers are out; a server lost while
the model idles is found by ``/health`` and by the next request (:func:`plookup.api.rpc_lost.lost_servers`),
and the serve command exits with that status for a supervisor to restart it.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Awaitable, Callable, Optional, Sequence, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread

from ...api import rpc_lost
from .errors import APIError

T = TypeVar("T")


class RpcWatch:
    """Whether the model's RPC servers (`endpoints`; none: a local model) are still there, and
    what was lost where one is not."""

    def __init__(self, endpoints: Sequence[str] = ()):
        self.endpoints = list(endpoints)
        self.message: Optional[str] = None
        self._event: Optional[asyncio.Event] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    def start(self) -> None:
        """On the server's event loop, before any request: told by the RPC client's abort."""
        self._loop, self._event = asyncio.get_running_loop(), asyncio.Event()
        if self.endpoints:
            rpc_lost.on_lost(self.lose_from_thread)

    def lose_from_thread(self, message: str) -> None:
        """(on the thread that lost the server) every waiting request answered, then back."""
        told = threading.Event()

        def lose():
            self.lose(message)
            told.set()

        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(lose)
            told.wait(1.0)
            threading.Event().wait(1.0)  # the answers go out before the process exits

    def lose(self, message: str) -> None:
        self.message = message
        if self._event is not None:
            self._event.set()

    def check(self) -> Optional[str]:
        """What was lost (None: nothing), looking again at the connections."""
        if self.message is None and self.endpoints:
            gone = rpc_lost.lost_servers(self.endpoints)
            if gone:
                self.lose(f"lost the RPC server {', '.join(gone)}: the model cannot run without it; "
                          f"restart the server once it is back")
        return self.message

    def error(self) -> APIError:
        return APIError(503, self.message or "lost an RPC server", type="unavailable_error", code="rpc_server_lost")

    async def unless_lost(self, work: Callable[[], Awaitable[T]]) -> T:
        """``await work()``, or a 503 naming the server as soon as it is lost (the work is left)."""
        if self.check() is not None:
            raise self.error()
        if self._event is None:  # no event loop of the server's (called outside its lifespan)
            return await work()
        outcome: list = []

        async def run(group):
            try:
                outcome.append(("value", await work()))
            except Exception as e:  # raised outside the group, which would wrap it in a group
                outcome.append(("error", e))
            group.cancel_scope.cancel()

        async def watch(group):
            await self._event.wait()
            group.cancel_scope.cancel()

        async with anyio.create_task_group() as group:
            group.start_soon(run, group)
            group.start_soon(watch, group)
        if not outcome:
            raise self.error()
        kind, value = outcome[0]
        if kind == "error":
            raise value
        return value

    async def in_thread(self, func: Callable[..., T], *args) -> T:
        """``func(*args)`` on a worker thread, :meth:`unless_lost`: a thread waiting on a lost server
        is abandoned (it never returns). Shielded from the request's own cancellation (a client
        that hung up): that waits for the thread, which ends at the engine's next step, as
        starlette's run_in_threadpool waits, so that nothing else touches its generation meanwhile."""
        with anyio.CancelScope(shield=True):
            value = await self.unless_lost(lambda: anyio.to_thread.run_sync(func, *args, abandon_on_cancel=True))
        await anyio.lowlevel.checkpoint()  # the hang-up, if any, is raised here
        return value
