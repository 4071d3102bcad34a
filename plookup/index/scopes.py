"""Cross-request memories by scope: a server's clients that are not the same tenant never draft
from each other's requests.

A request drafted from text another client sent is answered faster, so the latency would tell a
client whether someone else sent that text (the timing channel that made vLLM add ``cache_salt``
to its prefix cache). A server with API keys keeps a memory per key, and a request's
``cache_salt`` narrows it to the requests that sent the same salt; a single-user server keeps one
memory, the unnamed scope "". A scope is named by a digest of its key and salt, never by the key.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Iterator, Optional

from .memory import GlobalMemory

MAX_SCOPES = 64  # the memories kept beside the shared one, the least recently used dropped first


def scope_of(key: Optional[str], salt: Optional[str] = None) -> str:
    """The scope of a request made with API `key` (None: none asked) and `salt`: "" for neither."""
    if not key and not salt:
        return ""
    return hashlib.sha256(f"{key or ''}\0{salt or ''}".encode()).hexdigest()[:24]


class MemoryScopes:
    """The memory of each scope, each bounded as `shared` (the unnamed scope's) is."""

    def __init__(self, shared: GlobalMemory, max_scopes: int = MAX_SCOPES):
        self.shared, self.max_scopes = shared, max_scopes
        self._scopes: "OrderedDict[str, GlobalMemory]" = OrderedDict()
        self._lock = threading.Lock()

    def get(self, scope: str) -> GlobalMemory:
        if not scope:
            return self.shared
        with self._lock:
            memory = self._scopes.pop(scope, None)
            if memory is None:  # not `or`: an empty memory is falsy, and would be replaced on each get
                memory = GlobalMemory(self.shared.max_tokens)
            self._scopes[scope] = memory  # the most recently used last
            while len(self._scopes) > self.max_scopes:
                self._scopes.popitem(last=False)
            return memory

    def put(self, scope: str, memory: GlobalMemory) -> None:
        """A scope's memory as loaded from its file."""
        if not scope:
            self.shared = memory
            return
        with self._lock:
            self._scopes[scope] = memory

    def items(self) -> Iterator[tuple[str, GlobalMemory]]:
        with self._lock:
            named = list(self._scopes.items())
        yield "", self.shared
        yield from named
