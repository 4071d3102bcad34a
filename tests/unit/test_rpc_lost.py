"""plookup.api.rpc_lost without a model: a free that never returns is given up within its bound,
naming the servers; a connection whose other end closed is found lost (Linux's /proc)."""

from __future__ import annotations

import socket
import sys
import threading
import time

import pytest

from plookup.api import rpc_lost
from plookup.api.rpc_lost import BoundedClose, lost_servers


def test_a_free_that_never_returns_is_given_up_naming_the_servers(monkeypatch, capsys):
    monkeypatch.setattr(rpc_lost, "FREE_TIMEOUT_S", 0.5)
    forever = threading.Event()
    close = BoundedClose(forever.wait, ["10.9.8.7:50052"])  # as rpc_dispatcher::send waits on a lost server
    start = time.monotonic()
    assert close() is False
    assert time.monotonic() - start < 2
    assert "RPC server 10.9.8.7:50052 did not answer while the model was freed" in capsys.readouterr().err
    start = time.monotonic()
    assert close() is False and time.monotonic() - start < 0.1  # called again (its __del__): at once
    forever.set()


def test_a_free_that_returns_is_waited_for():
    freed = []
    assert BoundedClose(lambda: freed.append(1), ["127.0.0.1:1"])() is True and freed == [1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="read from Linux's /proc")
def test_a_connection_whose_other_end_closed_is_lost():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        endpoint = f"127.0.0.1:{listener.getsockname()[1]}"
        with socket.create_connection(listener.getsockname()) as ours:
            theirs, _ = listener.accept()
            assert lost_servers([endpoint]) == []
            theirs.close()  # the server's end goes: ours is in CLOSE_WAIT
            deadline = time.monotonic() + 5
            while not lost_servers([endpoint]) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert lost_servers([endpoint]) == [endpoint]
            assert ours.fileno() >= 0
        assert lost_servers(["localhost:1"]) == ["localhost:1"]  # no connection at all: lost too
