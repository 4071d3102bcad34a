"""python -m benchmarks.servers: `plookup bench` with llama-server's systems beside the engine's.

Every option of `plookup bench` (the single-stream comparison, --concurrency, --json, --plot...),
and --llama-server PATH: the single-stream comparison adds llama-server with --spec-type ngram-mod
and ngram-map-k, each run side by side with plookup's systems, turn by turn; --concurrency adds
llama-server with as many slots, plain and with its n-gram drafters (--server-draft-max). Run from a
checkout, with plookup installed:

    python -m benchmarks.servers -m MODEL --llama-server PATH [plookup bench's options]
    python -m benchmarks.servers -m MODEL --llama-server PATH --concurrency 1,4,8 --server-draft-max 16,64
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional

from plookup import log
from plookup.api.rpc_check import RpcError
from plookup.app.bench import command

from .llama_server import LlamaServers, find_llama_server


def note(message: str) -> None:
    print(f"{LlamaServers.prog}: {message}", file=sys.stderr, flush=True)


def parser() -> argparse.ArgumentParser:
    servers = argparse.ArgumentParser(prog=LlamaServers.prog, description=__doc__,
                                      formatter_class=argparse.RawDescriptionHelpFormatter)
    command.add_options(servers)
    servers.add_argument("--llama-server", metavar="PATH",
                         help="llama-server binary (default: from PATH; `make llama-server` builds one)")
    servers.add_argument("--server-draft-max", metavar="LIST",
                         help="with --concurrency: run llama-server's n-gram drafters with each of these longest "
                              "drafts (ngram-mod's n-max, ngram-simple's size-m; e.g. 16,64; default: "
                              "llama-server's own, 64 and 48)")
    servers.add_argument("--server-spec-types", metavar="LIST",
                         help="with --concurrency: which of llama-server's n-gram drafters run (default: "
                              "ngram-mod,ngram-simple; a sweep adds ngram-map-k)")
    return servers


def main(argv: Optional[list[str]] = None) -> int:
    args = parser().parse_args(argv)
    log.to_stderr(args.quiet)
    try:
        binary = find_llama_server(args.llama_server)
        if binary is None and not args.replay:
            raise ValueError(f"{args.llama_server or 'llama-server on PATH'}: not found (give one with "
                             "--llama-server PATH; `make llama-server` builds one)")
        return command.cmd_bench(args, LlamaServers(binary, args.server_draft_max, note, args.server_spec_types))
    except (ValueError, FileNotFoundError, RpcError) as e:
        print(f"{LlamaServers.prog}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
