"""The RPC client's own checks, against fake servers on loopback (no model, no RPC backend needed):
``rpc_servers`` parsing, and the HELLO that plookup speaks before llama.cpp connects (which would
abort the process on a mismatch)."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from plookup.api import rpc, rpc_check


@pytest.mark.parametrize("servers, expected", [
    ("127.0.0.1:50052", ["127.0.0.1:50052"]),
    ("10.0.0.2:1, 10.0.0.3:2", ["10.0.0.2:1", "10.0.0.3:2"]),
    (["host-a:50052", "host-b:50053"], ["host-a:50052", "host-b:50053"]),
    (None, []),
])
def test_servers_are_a_list_or_a_comma_separated_string(servers, expected):
    assert rpc_check.parse_servers(servers) == expected


@pytest.mark.parametrize("servers", ["127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000", ":50052", "a:1,a:1", "", [1]])
def test_a_malformed_server_list_is_a_value_error(servers):
    with pytest.raises(ValueError, match="rpc_servers"):
        rpc_check.parse_servers(servers)


def test_rpc_kwargs_put_every_layer_on_the_servers_unless_told():
    assert rpc.rpc_kwargs({})["n_gpu_layers"] == -1
    assert rpc.rpc_kwargs({"n_gpu_layers": 12})["n_gpu_layers"] == 12
    with pytest.raises(ValueError, match="no layer"):
        rpc.rpc_kwargs({"n_gpu_layers": 0})


def fake_server(answer):
    """A one-connection server on loopback: reads the HELLO, then `answer(conn, request)`."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    seen = {}

    def serve():
        conn, _ = listener.accept()
        with conn:
            request = b""
            while len(request) < 1 + 8 + rpc_check.RPC_CONN_CAPS_SIZE:
                chunk = conn.recv(64)
                if not chunk:
                    break
                request += chunk
            seen["request"] = request
            answer(conn)
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"127.0.0.1:{listener.getsockname()[1]}", seen


def hello(major, minor, patch):
    answer = rpc_check.HELLO_ANSWER
    return struct.pack("<Q", answer.size) + answer.pack(major, minor, patch, 0, bytes(24))


def test_check_server_speaks_llama_cpp_s_hello_and_reads_the_version():
    endpoint, seen = fake_server(lambda conn: conn.sendall(hello(*rpc_check.RPC_PROTO)))
    assert rpc_check.check_server(endpoint, timeout=5) == rpc_check.RPC_PROTO
    # | cmd 14 | size 24 (u64) | conn_caps: 24 zero bytes (no transport upgrade asked) |
    assert seen["request"] == bytes([14]) + struct.pack("<Q", 24) + bytes(24)


@pytest.mark.parametrize("version", [(8, 0, 0), (6, 9, 9), (rpc_check.RPC_PROTO[0], rpc_check.RPC_PROTO[1] + 1, 0)])
def test_another_protocol_version_is_an_error_naming_server_and_versions(version):
    endpoint, _ = fake_server(lambda conn: conn.sendall(hello(*version)))
    with pytest.raises(rpc_check.RpcError, match=rf"RPC server {endpoint}: protocol {'.'.join(map(str, version))}, "
                                                 rf"this client speaks 7\.0\.0"):
        rpc_check.check_server(endpoint, timeout=5)


def test_a_server_that_hangs_up_at_hello_is_an_error_saying_so():
    endpoint, _ = fake_server(lambda conn: None)  # an older server refusing the request's size does this
    with pytest.raises(rpc_check.RpcError, match=f"RPC server {endpoint}: closed the connection at HELLO"):
        rpc_check.check_server(endpoint, timeout=5)


def test_a_server_that_never_answers_is_an_error_within_the_timeout():
    endpoint, _ = fake_server(lambda conn: time.sleep(3))
    start = time.monotonic()
    with pytest.raises(rpc_check.RpcError, match=f"RPC server {endpoint}: no answer within 0.5 s"):
        rpc_check.check_server(endpoint, timeout=0.5)
    assert time.monotonic() - start < 2


def test_a_closed_port_and_an_unknown_host_are_errors_naming_them():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    with pytest.raises(rpc_check.RpcError, match=f"RPC server 127.0.0.1:{port}: cannot connect"):
        rpc_check.check_server(f"127.0.0.1:{port}", timeout=2)
    with pytest.raises(rpc_check.RpcError, match="RPC server no-such-host.invalid:50052: cannot resolve"):
        rpc_check.check_server("no-such-host.invalid:50052", timeout=2)
