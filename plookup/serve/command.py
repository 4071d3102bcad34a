"""`plookup serve`: the OpenAI-compatible HTTP server on the command line (the app is in `app`)."""

from __future__ import annotations

import argparse
import os


def register(commands) -> None:
    from ..options import add_drafter_option, add_model_options

    serve = commands.add_parser(
        "serve", help="OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions, /v1/models, /metrics"
    )
    add_model_options(serve)
    add_drafter_option(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    serve.add_argument("--model-alias", help="the model id clients send (default: the GGUF file's name)")
    serve.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    # Imported here so that the other subcommands do not pay for FastAPI and uvicorn.
    import uvicorn

    from ..options import load_llama
    from .app import create_app

    llm = load_llama(args)
    app = create_app(llm, args.model_alias or os.path.basename(llm.model_path))
    uvicorn.run(app, host=args.host, port=args.port)
    return 0
