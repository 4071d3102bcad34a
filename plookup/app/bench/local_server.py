"""A server process on 127.0.0.1: a port for it that nothing listens on, and waiting until it
answers /health, and stopping it. What the tests, the examples and the harness of a checkout's benchmarks/ (the
editor sessions, llama-server's runner, the agent replay) start their servers with; nothing here
starts one."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(process: subprocess.Popen, url: str, name: str, seconds: float) -> None:
    """Until the server at `url` answers /health with 200; RuntimeError where its process exits
    first or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{name} not healthy after {seconds}s")


def stop(process: subprocess.Popen, seconds: float) -> None:
    """Terminate a server process, killed where it has not exited within `seconds`."""
    process.terminate()
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
