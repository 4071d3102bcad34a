"""A recording HTTP proxy for replaying coding-agent sessions against `plookup serve`.

Standard library only (asyncio). Listens on --listen (default 127.0.0.1:8092), forwards each
request to --upstream (default 127.0.0.1:8091) and relays the answer back byte for byte as it
arrives (streamed SSE bodies stay streamed). Each exchange is appended as one JSON file
<out>/<client>-<n>.json (n counts from 1 per client, continuing after files already there):

    {"n", "client", "started", "seconds", "method", "path", "request_headers",
     "request_body" (parsed JSON where it is JSON, else text), "status", "response_headers",
     "response_body" (JSON, else the text: an SSE stream as the server wrote it),
     "sse_events" (for text/event-stream: [{"event", "data"}], data parsed where JSON),
     "cut_short" (only where a side hung up mid-answer: the error; the body is then the raw
     bytes relayed so far, chunk framing included; "upstream: ..." with status null where the
     server died or refused the connection before answering)}

Usage:
    python record_proxy.py --client codex [--listen 127.0.0.1:8092] [--upstream 127.0.0.1:8091]
                           [--out /tmp/agents/traffic]

One request per connection: the proxy asks the upstream for `Connection: close` and answers the
client with it, so keep-alive clients just open a new connection per request. Authorization and
x-api-key headers are recorded as "<redacted>".
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import sys
import time

REDACT = {"authorization", "x-api-key"}


async def read_head(reader: asyncio.StreamReader) -> tuple[str, list[tuple[str, str]]]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    return lines[0], [tuple(part.strip() for part in line.split(":", 1)) for line in lines[1:] if ":" in line]


def header(headers, name: str) -> str | None:
    return next((v for k, v in headers if k.lower() == name), None)


async def read_body(reader: asyncio.StreamReader, headers, until_eof: bool = False, sink=None) -> bytes:
    """The (de-chunked) body; each raw piece also goes to `sink` as it arrives."""
    out = bytearray()

    async def take(data: bytes):
        if sink is not None and data:
            await sink(data)

    if (header(headers, "transfer-encoding") or "").lower() == "chunked":
        while True:
            size_line = await reader.readuntil(b"\r\n")
            await take(size_line)
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            chunk = await reader.readexactly(size + 2)
            await take(chunk)
            if size == 0:
                while chunk != b"\r\n":  # trailers
                    chunk = await reader.readuntil(b"\r\n")
                    await take(chunk)
                return bytes(out)
            out += chunk[:-2]
    length = header(headers, "content-length")
    if length is not None:
        data = await reader.readexactly(int(length))
        await take(data)
        return data
    while until_eof:
        data = await reader.read(65536)
        if not data:
            break
        await take(data)
        out += data
    return bytes(out)


def decoded(body: bytes):
    text = body.decode("utf-8", "replace")
    try:
        return json.loads(text) if text.strip() else text
    except ValueError:
        return text


def sse_events(text: str) -> list[dict]:
    events = []
    for block in re.split(r"\r?\n\r?\n", text):
        event, data = None, []
        for line in block.splitlines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
        if event is None and not data:
            continue
        joined = "\n".join(data)
        try:
            payload = json.loads(joined)
        except ValueError:
            payload = joined
        events.append({"event": event, "data": payload})
    return events


class Proxy:
    def __init__(self, args):
        self.args = args
        self.up_host, self.up_port = args.upstream.rsplit(":", 1)
        os.makedirs(args.out, exist_ok=True)
        taken = [int(m.group(1)) for f in os.listdir(args.out)
                 if (m := re.fullmatch(re.escape(args.client) + r"-(\d+)\.json", f))]
        self.counter = itertools.count(max(taken, default=0) + 1)
        self.tasks: set = set()

    async def handle(self, c_reader, c_writer):
        task = asyncio.current_task()
        self.tasks.add(task)  # asyncio keeps only weak references: a long wait got the task collected
        try:
            await self.exchange(c_reader, c_writer)
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            print(f"record_proxy: connection dropped: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        except Exception as e:  # noqa: BLE001 - a proxy must not die on one bad exchange
            print(f"record_proxy: {type(e).__name__}: {e}", file=sys.stderr)
        finally:
            self.tasks.discard(task)
            c_writer.close()

    async def exchange(self, c_reader, c_writer):
        request_line, req_headers = await read_head(c_reader)
        method, path, _ = request_line.split(" ", 2)
        body = await read_body(c_reader, req_headers)
        n, started, t0 = next(self.counter), time.strftime("%Y-%m-%dT%H:%M:%S"), time.monotonic()
        forward = [(k, v) for k, v in req_headers
                   if k.lower() not in {"connection", "transfer-encoding", "content-length", "keep-alive"}]
        forward += [("Content-Length", str(len(body))), ("Connection", "close")]
        record = {
            "n": n, "client": self.args.client, "started": started, "seconds": None, "method": method,
            "path": path,
            "request_headers": {k: ("<redacted>" if k.lower() in REDACT else v) for k, v in req_headers},
            "request_body": decoded(body), "status": None,
        }
        try:
            await self.forward(record, method, path, forward, body, c_writer, t0)
        except (ConnectionError, asyncio.IncompleteReadError) as e:  # the upstream failed before answering
            record.update(seconds=round(time.monotonic() - t0, 3), cut_short=f"upstream: {type(e).__name__}: {e}")
            raise
        finally:
            with open(os.path.join(self.args.out, f"{self.args.client}-{n}.json"), "w") as f:
                json.dump(record, f, indent=1, ensure_ascii=False)
            print(f"record_proxy: {self.args.client}-{n} {method} {path} -> {record['status']} "
                  f"({record['seconds']} s){' CUT: ' + record['cut_short'] if record.get('cut_short') else ''}",
                  file=sys.stderr, flush=True)

    async def forward(self, record, method, path, forward, body, c_writer, t0):
        u_reader, u_writer = await asyncio.open_connection(self.up_host, int(self.up_port))
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in forward) + "\r\n"
        u_writer.write(head.encode("latin-1") + body)
        await u_writer.drain()
        status_line, resp_headers = await read_head(u_reader)
        out_headers = [(k, v) for k, v in resp_headers if k.lower() not in {"connection", "keep-alive"}]
        out_headers.append(("Connection", "close"))
        c_writer.write((status_line + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in out_headers)
                        + "\r\n").encode("latin-1"))

        raw = bytearray()  # the body as relayed, kept for a record of an exchange cut short

        async def relay(data: bytes):
            raw.extend(data)
            c_writer.write(data)
            await c_writer.drain()

        no_body = method == "HEAD" or status_line.split(" ")[1] in {"204", "304"}
        cut = None  # why the exchange ended early: the client hung up, or the upstream did
        try:
            resp_body = b"" if no_body else await read_body(u_reader, resp_headers, until_eof=True, sink=relay)
        except (ConnectionError, asyncio.IncompleteReadError) as e:
            cut, resp_body = f"{type(e).__name__}: {e}", bytes(raw)
        u_writer.close()
        content_type = header(resp_headers, "content-type") or ""
        text = resp_body.decode("utf-8", "replace")
        record.update(
            seconds=round(time.monotonic() - t0, 3), status=int(status_line.split(" ")[1]),
            response_headers=dict(resp_headers),
            response_body=text if "event-stream" in content_type else decoded(resp_body),
        )
        if "event-stream" in content_type:
            record["sse_events"] = sse_events(text)
        if cut:
            record["cut_short"] = cut


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--client", required=True, help="name used in the recorded files' names")
    parser.add_argument("--listen", default="127.0.0.1:8092")
    parser.add_argument("--upstream", default="127.0.0.1:8091")
    parser.add_argument("--out", default="/tmp/agents/traffic")
    args = parser.parse_args()
    proxy = Proxy(args)
    host, port = args.listen.rsplit(":", 1)
    server = await asyncio.start_server(proxy.handle, host, int(port), limit=1 << 24)
    print(f"record_proxy: {args.listen} -> {args.upstream}, recording to {args.out}/{args.client}-N.json",
          file=sys.stderr, flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
