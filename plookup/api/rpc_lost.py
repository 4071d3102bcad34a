"""A model whose RPC server went away while it was held (idle, or at its free): told, never waited
on forever. Mid-generation, ggml's RPC client aborts (:mod:`.rpc` exits with EXIT_RPC_LOST)."""

from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
import weakref
from typing import Optional, Sequence

# A lost server's connection stays in CLOSE_WAIT (the server's end closed) until freed, or is gone.
FREE_TIMEOUT_S = 10.0  # freeing a model over a live server takes milliseconds
_models: "weakref.WeakSet[BoundedClose]" = weakref.WeakSet()


def held(close: "BoundedClose") -> None:
    """A model over RPC, freed (or given up) at the interpreter's exit at the latest."""
    _models.add(close)


class BoundedClose:
    """A model's close() that cannot hang on a lost server. llama.cpp's RPC client frees the
    model's buffers on the servers one command at a time; once a server is gone its dispatcher
    thread has ended and ``rpc_dispatcher::send`` waits forever for a reply (seen: ``llama_free``
    of a process whose server was killed while it idled never returned). So the free runs on a
    thread of its own: after FREE_TIMEOUT_S it is given up, its memory left to the process's end,
    with one line naming the servers. A second call while the first runs returns at once."""

    def __init__(self, close, endpoints: list[str]):
        self._close, self.endpoints = close, list(endpoints)
        self._started: Optional[threading.Event] = None

    def __call__(self) -> bool:
        """True where the model was freed, False where it was given up."""
        if self._started is not None:
            return self._started.is_set()
        self._started = done = threading.Event()

        def free():
            try:
                self._close()
            finally:
                done.set()

        threading.Thread(target=free, name="plookup-rpc-free", daemon=True).start()
        if done.wait(FREE_TIMEOUT_S):
            return True
        lost = lost_servers(self.endpoints) or self.endpoints
        print(f"plookup: the RPC server {', '.join(lost)} did not answer while the model was freed "
              f"({FREE_TIMEOUT_S:.0f} s): it is gone; its memory here is left to the process's end",
              file=sys.stderr, flush=True)
        return False


@atexit.register
def _close_at_exit() -> None:
    """Every model over RPC freed (or given up) before the interpreter's finalization, where a
    thread could no longer be started and a hung free would hang the exit."""
    for close in list(_models):
        close()


# Called with a line naming the lost servers before the process exits mid-generation (ggml's RPC
# client cannot go on): e.g. a server answering its in-flight requests with an error.
_on_lost: list = []
NOTIFY_S = 3.0  # the most the callbacks may take before the exit


def on_lost(callback) -> None:
    """`callback(message)` runs, on the thread that lost the server, before the process exits."""
    _on_lost.append(callback)


def notify(message: str) -> None:
    """Every :func:`on_lost` callback with `message`, within NOTIFY_S in all (then the exit goes on)."""
    worker = threading.Thread(target=lambda: [callback(message) for callback in list(_on_lost)], daemon=True)
    worker.start()
    worker.join(NOTIFY_S)


def lost_servers(endpoints: Sequence[str]) -> list[str]:
    """Those of `endpoints` whose connection from this process the server's end has closed (a
    server killed, its host rebooted), read from Linux's /proc (elsewhere: none known lost)."""
    try:
        ours = {_link(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")}
        with open("/proc/net/tcp") as f:
            table = f.read().splitlines()[1:]
    except OSError:
        return []
    states: dict[str, set[str]] = {}
    wanted = {e: _resolved(e) for e in endpoints}
    for line in table:
        fields = line.split()
        if f"socket:[{fields[9]}]" in ours:
            states.setdefault(_endpoint(fields[2]), set()).add(fields[3])
    # 01 ESTABLISHED; 08 CLOSE_WAIT (the other end closed); a connection gone is lost too
    return [e for e in endpoints if "01" not in states.get(wanted[e], set())]


def _endpoint(hex_address: str) -> str:
    """/proc/net/tcp's address ("0100007F:C383") as host:port."""
    ip, port = hex_address.split(":")
    return f"{socket.inet_ntoa(bytes.fromhex(ip)[::-1])}:{int(port, 16)}"


def _resolved(endpoint: str) -> str:
    host, _, port = endpoint.rpartition(":")
    try:
        return f"{socket.gethostbyname(host)}:{port}"
    except OSError:
        return endpoint


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:  # an fd closed meanwhile (the listing's own, say)
        return ""
