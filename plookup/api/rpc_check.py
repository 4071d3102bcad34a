"""Naming and checking llama.cpp RPC servers before ggml connects to them: a module of its own,
with nothing of ggml in it (plain sockets), since it runs before the RPC backend is touched.

:func:`parse_servers` reads llama.cpp's ``--rpc`` list. ggml's own connect ends the whole process
(``GGML_ABORT``) on every failure to connect, a failed HELLO (protocol version) or a lost
connection, and a server that accepts the connection but does not answer (it serves one client at
a time, serially) blocks the client in ``recv`` with no time limit. So before ggml connects
(:func:`plookup.api.rpc.connect`), :func:`check_server` connects itself, with a bounded time, and
speaks the HELLO: a host that is down, unreachable, busy with another client or of another
protocol version is a :class:`RpcError` naming it.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Optional, Sequence, Union

# The wheel's ggml-rpc.h: RPC_PROTO_MAJOR/MINOR/PATCH_VERSION. A server answers its version to
# HELLO; ggml refuses another major version, or a newer minor one.
RPC_PROTO = (7, 0, 0)
RPC_CMD_HELLO = 14  # fixed in every version ("RPC_CMD_HELLO must be always 14")
RPC_CONN_CAPS_SIZE = 24  # rpc_msg_hello_req: conn_caps only; all zero asks for no transport upgrade
HELLO_ANSWER = struct.Struct("<BBBB24s")  # major, minor, patch, padding, conn_caps
CHECK_TIMEOUT_S = 5.0


class RpcError(ConnectionError):
    """RPC servers that cannot be used: one is down, unreachable, busy or of another protocol, or
    this llama_cpp has no RPC backend."""


def parse_servers(servers: Union[str, Sequence[str], None]) -> list[str]:
    """``["host:port", ...]`` from a list or a comma-separated string (llama.cpp's ``--rpc``)."""
    if servers is None:
        return []
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    endpoints = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"rpc_servers: expected 'host:port' strings, got {item!r}")
        item = item.strip()
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"rpc_servers: {item!r} is not HOST:PORT")
        endpoints.append(f"{host}:{int(port)}")
    if not endpoints:
        raise ValueError("rpc_servers: no server given")
    if len(set(endpoints)) != len(endpoints):
        raise ValueError(f"rpc_servers: a server is named twice in {endpoints}")
    return endpoints


def check_server(endpoint: str, timeout: float = CHECK_TIMEOUT_S) -> tuple[int, int, int]:
    """The server's protocol version, from a HELLO of our own within `timeout` seconds; else an
    RpcError naming it. (ggml's own connect would abort the process, or wait without a bound.)"""
    host, _, port = endpoint.rpartition(":")
    try:
        # ggml connects over IPv4 (gethostbyname), and so does this.
        address = socket.getaddrinfo(host, int(port), socket.AF_INET, socket.SOCK_STREAM)[0][4]
    except OSError as e:
        raise RpcError(f"RPC server {endpoint}: cannot resolve {host!r} ({e})") from None
    try:
        with socket.create_connection(address, timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack("<BQ", RPC_CMD_HELLO, RPC_CONN_CAPS_SIZE) + bytes(RPC_CONN_CAPS_SIZE))
            answer = _receive(sock, 8 + HELLO_ANSWER.size)
    except socket.timeout:
        raise RpcError(
            f"RPC server {endpoint}: no answer within {timeout:g} s (unreachable, or serving another "
            f"client: an RPC server takes one client at a time)"
        ) from None
    except OSError as e:
        raise RpcError(f"RPC server {endpoint}: cannot connect ({e.strerror or e})") from None
    if answer is None:
        raise RpcError(f"RPC server {endpoint}: closed the connection at HELLO (a server of another RPC "
                       f"protocol version? this client speaks {'.'.join(map(str, RPC_PROTO))})")
    size, = struct.unpack_from("<Q", answer)
    major, minor, patch, _, _ = HELLO_ANSWER.unpack_from(answer, 8)
    if size != HELLO_ANSWER.size or major != RPC_PROTO[0] or minor > RPC_PROTO[1]:
        raise RpcError(f"RPC server {endpoint}: protocol {major}.{minor}.{patch}, this client speaks "
                       f"{'.'.join(map(str, RPC_PROTO))} (run the same llama.cpp version on every host)")
    return major, minor, patch


def wait_for_server(endpoint: str, seconds: float, alive=lambda: True) -> None:
    """Until the server at `endpoint` answers its HELLO (one just started), at most `seconds`, and
    only while `alive()`; else the last RpcError."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            check_server(endpoint, timeout=min(CHECK_TIMEOUT_S, seconds))
            return
        except RpcError:
            if not alive() or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _receive(sock: socket.socket, n: int) -> Optional[bytes]:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data
