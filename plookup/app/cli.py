"""`plookup` command line: generate, bench, serve, doctor, models, corpus, rpc-server.

plookup drafts tokens from the prompt and the output so far and has llama.cpp verify them in one
batch: greedy output is bit-identical to plain decoding where `plookup doctor` says exact;
elsewhere the output may differ at near-ties (see the README, "Exactness").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .. import log
from ..api.rpc_check import RpcError
from . import corpus_command, doctor, llama_cli, rpc_command
from .bench import command as bench
from .models import MODEL_NAMES, QUANTS, resolve_model
from .options import add_drafter_option, add_model_options, load_llama, save_memory
from .serve import command as serve


def cmd_generate(args: argparse.Namespace) -> int:
    if args.file:
        with open(args.file, encoding="utf-8") as f:
            prompt = f.read()
    elif args.prompt is not None:
        prompt = args.prompt
    else:
        print("plookup generate: give a prompt with -p TEXT or -f FILE", file=sys.stderr)
        return 2
    llm = load_llama(args, speculative=not args.no_spec)
    options = dict(max_tokens=args.max_tokens, temperature=args.temp, seed=args.seed)
    start = time.perf_counter()
    if args.chat:
        result = llm.create_chat_completion([{"role": "user", "content": prompt}], **options)
        text = result["choices"][0]["message"]["content"]
    else:
        result = llm.create_completion(prompt, **options)
        text = result["choices"][0]["text"]
    seconds = time.perf_counter() - start
    save_memory(args, llm)
    usage = result["usage"]
    if args.json:
        print(json.dumps({"text": text, "usage": usage, "seconds": seconds}, indent=2))
        return 0
    print(text)
    spec = usage.get("speculative")
    summary = f"{usage['completion_tokens']} tokens in {seconds:.2f}s ({usage['completion_tokens'] / seconds:.1f} tok/s)"
    if spec:
        per_token = spec["forward_passes"] / max(1, spec["generated"])
        summary += (
            f"; drafted {spec['drafted']}, accepted {spec['accepted']}, "
            f"{per_token:.2f} forward passes per token"
        )
    print(summary, file=sys.stderr)
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    if args.action == "list":
        for name, description in MODEL_NAMES.items():
            print(f"{name:18s} {description}")
        print(f"\nappend :QUANT to requantize once (from the file as shipped): {', '.join(QUANTS)}")
        return 0
    for name in args.names:
        print(resolve_model(name))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="plookup", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    generate = commands.add_parser("generate", help="generate text from a prompt")
    add_model_options(generate)
    add_drafter_option(generate)
    source = generate.add_mutually_exclusive_group()
    source.add_argument("-p", "--prompt", help="prompt text")
    source.add_argument("-f", "--file", help="read the prompt from FILE")
    generate.add_argument("--chat", action="store_true", help="send the prompt as a chat user message")
    generate.add_argument("--max-tokens", type=int, default=256)
    generate.add_argument("--temp", type=float, default=0.0, help="temperature (default 0: greedy)")
    generate.add_argument("--seed", type=int, default=None)
    generate.add_argument("--no-spec", action="store_true", help="plain llama_cpp decoding, for comparison")
    generate.add_argument("--json", action="store_true", help="print text and stats as JSON")
    generate.set_defaults(func=cmd_generate)

    models = commands.add_parser("models", help="list the named models, or fetch them now")
    models.add_argument("action", choices=["list", "fetch"])
    models.add_argument("names", nargs="*", metavar="NAME", help="e.g. qwen-coder-0.5b or qwen-coder-0.5b:q8_0")
    models.set_defaults(func=cmd_models)

    bench.register(commands)
    serve.register(commands)
    doctor.register(commands)
    corpus_command.register(commands)
    rpc_command.register(commands)
    return parser


def parse(argv: list[str], environ=os.environ) -> argparse.Namespace:
    """The command line; for `serve`, llama-server's LLAMA_ARG_* variables in `environ` first, as
    the flags they stand for, so that the command line's override them (llama_cli.env_arguments)."""
    parser = build_parser()
    if argv[:1] == ["serve"]:
        try:
            argv = ["serve", *llama_cli.env_arguments(environ), *argv[1:]]
        except ValueError as e:
            parser.exit(2, f"plookup serve: {e}\n")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(list(sys.argv[1:] if argv is None else argv))
    if hasattr(args, "quiet"):  # a command that loads a model: a line per start-up phase, unless --quiet
        log.to_stderr(args.quiet)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, RpcError) as e:
        print(f"plookup {args.command}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
