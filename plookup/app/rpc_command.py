"""`plookup rpc-server`: llama.cpp's RPC server (``ggml_backend_rpc_start_server``) on this host's
CPU, for a model split over several hosts (`--rpc HOST:PORT,...` on the host that loads it)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys

DEFAULT_PORT = 50052  # llama.cpp's rpc-server's


def cmd_rpc_server(args: argparse.Namespace) -> int:
    from ..api import rpc

    try:
        address = ipaddress.IPv4Address(args.host)  # ggml binds IPv4 numeric addresses only
    except ValueError:
        raise ValueError(f"--host {args.host!r}: give an IPv4 address (e.g. 127.0.0.1 or this host's "
                         f"private address)") from None
    if not 0 < args.port < 65536:
        raise ValueError(f"--port {args.port}: not a TCP port")
    if args.threads < 1:
        raise ValueError(f"--threads {args.threads}: must be >= 1")
    if not rpc.available():
        print("plookup rpc-server: this llama_cpp has no RPC backend; build llama-cpp-python with "
              "-DGGML_RPC=ON (`make install` does)", file=sys.stderr)
        return 1
    print(f"plookup rpc-server: llama.cpp's RPC server on {args.host}:{args.port}, this host's CPU, "
          f"{args.threads} threads; load a model with --rpc {args.host}:{args.port}", file=sys.stderr)
    print("plookup rpc-server: it accepts any client that reaches this port, with no authentication "
          "or encryption (llama.cpp calls its RPC server not secure): whoever connects uses this "
          "host's memory and CPU. Bind it to 127.0.0.1 or a private address of a network you trust.",
          file=sys.stderr)
    if not (address.is_loopback or address.is_private) or address.is_unspecified:
        print(f"plookup rpc-server: WARNING: {address} is not a loopback or private address", file=sys.stderr)
    if args.cache:
        os.makedirs(args.cache, exist_ok=True)
    sys.stderr.flush()
    rpc.start_server(args.host, args.port, args.threads, args.cache)
    print(f"plookup rpc-server: could not serve on {args.host}:{args.port} (see above; port in use?)",
          file=sys.stderr)
    return 1


def register(commands) -> None:
    server = commands.add_parser(
        "rpc-server", help="serve this host's CPU to a model split over several hosts (llama.cpp's RPC)",
        description="llama.cpp's RPC server: a host that loads a model with --rpc HOST:PORT,... puts "
                    "layers here. It serves one client at a time and has no authentication: bind it to "
                    "127.0.0.1 or a private address.",
    )
    server.add_argument("--host", default="127.0.0.1", help="IPv4 address to listen on (default 127.0.0.1)")
    server.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})")
    server.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="threads of the CPU backend (default: all cores)")
    server.add_argument("--cache", metavar="DIR",
                        help="keep tensors the client sends in DIR, so that a model loaded again is "
                             "not sent again (llama.cpp's rpc-server -c)")
    server.set_defaults(func=cmd_rpc_server)
