"""A TCP proxy on loopback that delays every forwarded chunk by a fixed time in each direction: a
link's latency for llama.cpp's RPC traffic where `tc netem` is not available (no sch_netem in the
kernel). It models latency only, no bandwidth limit and no loss, and it delays whatever arrives in
one read as one unit: a figure measured through it says so.

    python examples/delay_proxy.py LISTEN_PORT TARGET_PORT DELAY_MS

Listens on 127.0.0.1:LISTEN_PORT, forwards to 127.0.0.1:TARGET_PORT (loopback only: nothing leaves
this machine). Counts the chunks forwarded each way: prints them as a JSON line ("counts {...}") on SIGUSR1 and
at the end (SIGINT, SIGTERM). `start()` runs it on a thread of the caller's own instead.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
import time
from dataclasses import dataclass, field

LOOPBACK = "127.0.0.1"


@dataclass
class Counts:
    """Chunks (reads) and bytes forwarded, client to server and back."""

    up: int = 0
    down: int = 0
    up_bytes: int = 0
    down_bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def snapshot(self) -> dict:
        with self.lock:
            return dict(up=self.up, down=self.down, up_bytes=self.up_bytes, down_bytes=self.down_bytes)


async def _pipe(reader, writer, delay: float, counts: Counts, up: bool) -> None:
    """Forward reader -> writer, each chunk `delay` seconds after it arrived, in order."""
    queue: asyncio.Queue = asyncio.Queue()

    async def receive():
        while data := await reader.read(1 << 20):
            with counts.lock:
                if up:
                    counts.up, counts.up_bytes = counts.up + 1, counts.up_bytes + len(data)
                else:
                    counts.down, counts.down_bytes = counts.down + 1, counts.down_bytes + len(data)
            queue.put_nowait((time.monotonic() + delay, data))
        queue.put_nowait((0.0, b""))

    task = asyncio.ensure_future(receive())
    try:
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        task.cancel()
        writer.close()


async def serve(listen_port: int, target_port: int, delay_ms: float, counts: Counts, ready: threading.Event = None):
    delay = delay_ms / 1000

    async def handle(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection(LOOPBACK, target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(_pipe(client_reader, server_writer, delay, counts, True),
                             _pipe(server_reader, client_writer, delay, counts, False))

    server = await asyncio.start_server(handle, LOOPBACK, listen_port)
    if ready is not None:
        ready.set()
    async with server:
        await server.serve_forever()


def start(listen_port: int, target_port: int, delay_ms: float) -> Counts:
    """The proxy on a daemon thread of this process; returns its live counts."""
    counts, ready = Counts(), threading.Event()

    def run():
        asyncio.run(serve(listen_port, target_port, delay_ms, counts, ready))

    threading.Thread(target=run, daemon=True, name=f"delay-proxy-{listen_port}").start()
    if not ready.wait(10):
        raise RuntimeError(f"the delay proxy did not start on {LOOPBACK}:{listen_port}")
    return counts


def main() -> int:
    listen_port, target_port, delay_ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    counts = start(listen_port, target_port, delay_ms)
    print(f"delay proxy: {LOOPBACK}:{listen_port} -> {LOOPBACK}:{target_port}, {delay_ms:g} ms each way",
          flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: print(f"counts {json.dumps(counts.snapshot())}", flush=True))
    while not stop.wait(0.2):
        pass
    print(f"delay proxy: forwarded {counts.snapshot()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
