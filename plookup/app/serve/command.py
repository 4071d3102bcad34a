"""`plookup serve`: the OpenAI-compatible HTTP server on the command line (the app is in `app`)."""

from __future__ import annotations

import argparse
import os

from ..options import add_drafter_option, add_model_options, load_llama, save_memory
from .limits import Limits

API_KEY_ENV = "PLOOKUP_API_KEY"


def register(commands) -> None:
    serve = commands.add_parser(
        "serve", help="HTTP server: OpenAI's /v1/completions, /v1/chat/completions, /v1/models; llama-server's "
                      "/completion, /infill, /tokenize, /detokenize, /apply-template, /props, /slots; /metrics, /health"
    )
    add_model_options(serve)
    add_drafter_option(serve, memory_by_default=True)
    limits = Limits()
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1: this machine only; see README before binding elsewhere)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    serve.add_argument("--model-alias", help="the model id clients send (default: the GGUF file's name)")
    serve.add_argument("--api-key", default=os.environ.get(API_KEY_ENV),
                       help=f"require Authorization: Bearer KEY on every route but /health (default: ${API_KEY_ENV})")
    serve.add_argument("--cors-origins", metavar="ORIGIN[,ORIGIN]", type=origins, default=(),
                       help="let browser pages from these origins call the server, e.g. http://localhost:5173 "
                            "(* for any; default: none, same-origin only)")
    serve.add_argument("--max-body-bytes", type=int, default=limits.max_body_bytes,
                       help=f"largest request body, else 413 (default {limits.max_body_bytes})")
    serve.add_argument("--max-prediction-tokens", type=int, default=limits.max_prediction_tokens,
                       help=f"largest Predicted Output, else 400 (default {limits.max_prediction_tokens})")
    serve.add_argument("--parallel", type=int, default=1,
                       help="generations decoded at once, each on a slot with the whole --n-ctx window "
                            "(the KV cache holds N x n-ctx cells); requests beyond them queue (default 1: "
                            "one at a time, exact where `plookup doctor` says so)")
    serve.add_argument("--max-queue", type=int, default=limits.max_queue,
                       help=f"requests waiting for the model, else 429 (default {limits.max_queue})")
    serve.set_defaults(func=cmd_serve)


def origins(text: str) -> tuple[str, ...]:
    """--cors-origins: a comma-separated list of origins (scheme://host[:port])."""
    found = tuple(origin.strip().rstrip("/") for origin in text.split(",") if origin.strip())
    if not found:
        raise argparse.ArgumentTypeError("give at least one origin, e.g. http://localhost:5173")
    return found


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn  # here, so that the other subcommands do not load the web stack

    from .app import create_app

    for name in ("max_body_bytes", "max_prediction_tokens"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    if args.max_queue < 0:
        raise ValueError("--max-queue must be >= 0")
    if args.parallel < 1:
        raise ValueError("--parallel must be >= 1")
    llm = load_llama(args, parallel=args.parallel, decode_thread=True)  # requests run on the pool's threads
    limits = Limits(args.max_body_bytes, args.max_prediction_tokens, args.max_queue)
    app = create_app(llm, args.model_alias or os.path.basename(llm.model_path), limits, args.api_key, args.cors_origins)
    uvicorn.run(app, host=args.host, port=args.port)
    save_memory(args, llm)  # uvicorn returns on a clean shutdown (SIGINT, SIGTERM)
    return 0
