"""`plookup` command line: generate, bench, serve."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .models import smollm2_path


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """Options every subcommand that loads a model shares."""
    parser.add_argument("-m", "--model", help="GGUF model file (default: the bundled SmolLM2-135M)")
    parser.add_argument("--n-ctx", type=int, default=4096, help="context window in tokens (default 4096)")
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count(),
        help="threads for single-token and batched decoding alike (default: all cores)",
    )  # fmt: skip
    parser.add_argument("--max-draft", type=int, default=16, help="most draft tokens per step (default 16)")


def add_drafter_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--drafter", choices=["suffix", "ngram"], default="suffix")


def model_kwargs(args: argparse.Namespace) -> dict:
    return dict(
        model_path=args.model or smollm2_path(),
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        verbose=False,
    )


def make_drafter(name: str):
    from .drafters import NgramDrafter, SuffixDrafter

    return {"suffix": SuffixDrafter, "ngram": NgramDrafter}[name]()


def load_llama(args: argparse.Namespace, speculative: bool = True):
    """plookup.Llama, or llama_cpp.Llama when speculation is off."""
    if speculative:
        from .decoder import Llama

        return Llama(drafter=make_drafter(args.drafter), max_draft=args.max_draft, **model_kwargs(args))
    import llama_cpp

    return llama_cpp.Llama(**model_kwargs(args))


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="plookup", description=__doc__)
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

    from . import bench, server

    bench.register(commands)
    server.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"plookup {args.command}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
