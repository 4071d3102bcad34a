"""llama-server's command line, so that `plookup serve` takes what people copy from llama.cpp's and
editors' READMEs: its spellings, short and long (the model options every command shares take them
too, :mod:`plookup.app.options`), its presets, its environment variables (defaults the command line
overrides) and, refused by name with what to do instead, its flags plookup cannot honour.

From llama.cpp's common/arg.cpp as vendored in llama-cpp-python 0.3.36, the version the Makefile
builds, and the spellings older READMEs still show (``-fa`` alone, ``--draft-max``, ``--mlock``,
``--no-mmap``). A llama-server flag in none of these tables is argparse's "unrecognized
arguments", which names it too.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import struct
from typing import Optional

from .models import MODEL_NAMES, QUANT_ALIASES, QUANTS

# -- values, each a clear error naming what it takes (argparse prefixes the option)


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def at_least(low: int, meaning: str = ""):
    """A type for whole numbers >= `low`; `meaning` says what the lowest means, e.g. "0: ..."."""

    def whole_number(text: str) -> int:
        value = _integer(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}{meaning}, got {value}")
        return value

    return whole_number


ctx_size = at_least(0, " (0: the context the model was trained with)")
positive = at_least(1)
non_negative = at_least(0)
n_predict = at_least(-1, " (-1: up to the context)")


def threads(text: str) -> int:
    """-t, -tb: as llama.cpp, 0 or less means every core."""
    value = _integer(text)
    return value if value > 0 else os.cpu_count() or 1


def parallel(text: str) -> int:
    """-np: slots; llama-server's -1 (auto: 4 slots sharing one cache) is plookup's default, 1 (each
    slot here has the whole context, so 4 would hold four times the cache)."""
    value = _integer(text)
    if value == -1:
        return 1
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (or -1: plookup's default, 1), got {value}")
    return value


def port(text: str) -> int:
    value = _integer(text)
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"not a TCP port: {value}")
    return value


def host(text: str) -> str:
    """--host: one address (llama-server takes several, comma-separated), or a UNIX socket path
    ending in .sock."""
    if "," in text:
        raise argparse.ArgumentTypeError(f"plookup listens on one address, got {text!r}: give one")
    return text.strip()


def gpu_layers(text: str):
    """-ngl N|auto|all, as llama-server reads it (-1: auto, -2 or less: all); resolved to a count
    where the model loads (plookup.api.load.gpu_layers), which knows whether the build has a GPU."""
    word = text.strip().lower()
    if word in ("auto", "all"):
        return word
    try:
        value = int(word)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of layers, 'auto' or 'all', got {text!r}") from None
    return "auto" if value == -1 else "all" if value < -1 else value


TRUTHY, FALSY = ("on", "enabled", "true", "1"), ("off", "disabled", "false", "0")  # arg.cpp's is_truthy/is_falsey


def flash_attn(text: str) -> str:
    """-fa on|off|auto (arg.cpp's spellings of each too); auto: plookup's choice, which is the
    doctor's for the model, else llama.cpp's own, as llama-server's (plookup.api.load.load_model)."""
    word = text.strip().lower()
    if word in TRUTHY:
        return "on"
    if word in FALSY:
        return "off"
    if word in ("auto", "-1"):
        return "auto"
    raise argparse.ArgumentTypeError(f"on, off or auto, got {text!r}")


# arg.cpp's kv_cache_types by ggml_type_name, as the ggml_type values llama_cpp's type_k/type_v take
# (ggml.h; llama_cpp 0.3.36 names no GGML_TYPE_BF16).
CACHE_TYPES = {"f32": 0, "f16": 1, "bf16": 30, "q8_0": 8, "q4_0": 2, "q4_1": 3, "iq4_nl": 20, "q5_0": 6, "q5_1": 7}


def cache_type(text: str) -> int:
    try:
        return CACHE_TYPES[text.strip().lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(f"a KV cache type of {', '.join(CACHE_TYPES)}, got {text!r}") from None


def api_keys(text: str) -> list[str]:
    """--api-key KEY[,KEY...] (CSV, as arg.cpp's parse_csv_row reads it)."""
    keys = [key.strip() for row in csv.reader([text]) for key in row if key.strip()]
    if not keys:
        raise argparse.ArgumentTypeError("no key in it")
    return keys


def api_key_file(path: str) -> list[str]:
    """--api-key-file FILE: a key a line, lines starting with # left out. A file without a key is
    refused (llama-server would serve without one)."""
    try:
        with open(path, encoding="utf-8") as f:
            keys = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {e.strerror}") from None
    if not keys:
        raise argparse.ArgumentTypeError(f"no key in {path}")
    return keys


# llama-server's built-in chat templates (src/llama-chat.cpp) that llama_cpp has a chat format for.
CHAT_FORMATS = {"chatml": "chatml", "llama2": "llama-2", "llama3": "llama-3", "gemma": "gemma", "zephyr": "zephyr",
                "vicuna": "vicuna", "openchat": "openchat", "chatglm3": "chatglm3"}


def chat_template(text: str) -> tuple[str, str]:
    """--chat-template NAME|JINJA: ("format", llama_cpp's chat_format) for a built-in name, or
    ("jinja", the template), checked for syntax now."""
    if text.strip() in CHAT_FORMATS:
        return "format", CHAT_FORMATS[text.strip()]
    if "{%" in text or "{{" in text:
        return "jinja", _checked_jinja(text)
    raise argparse.ArgumentTypeError(
        f"no built-in template {text!r} here: plookup maps {', '.join(CHAT_FORMATS)} onto llama_cpp's chat "
        f"formats; for another, give its Jinja text (or --chat-template-file FILE)")


def chat_template_file(path: str) -> tuple[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            return "jinja", _checked_jinja(f.read())
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {e.strerror}") from None


def _checked_jinja(text: str) -> str:
    """The template, compiled now as llama_cpp compiles it (its environment, its extensions)."""
    import jinja2
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    try:
        Jinja2ChatFormatter(template=text, eos_token="", bos_token="")
    except jinja2.TemplateSyntaxError as e:
        raise argparse.ArgumentTypeError(f"the Jinja template does not parse: {e}") from None
    return text


def use_chat_template(llm, template: tuple[str, str]) -> None:
    """Render `llm`'s chats with --chat-template's template, as llama_cpp.Llama builds its handler
    from the GGUF's (Jinja2ChatFormatter with the model's BOS and EOS), or with a chat format."""
    kind, value = template
    if kind == "format":
        llm.chat_format, llm.chat_handler = value, None
        return
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    eos, bos = llm.token_eos(), llm.token_bos()
    text = llm.token_text
    llm.chat_handler = Jinja2ChatFormatter(template=value, eos_token=text(eos) if eos != -1 else "",
                                           bos_token=text(bos) if bos != -1 else "",
                                           stop_token_ids=[eos]).to_chat_handler()


# -- -hf: llama-server's model repositories onto the models plookup can get (`plookup models list`)

SHIPPED_QUANT = {"smollm2": "q4_1", "gemma3": "q4_k_m", "qwen-coder-0.5b": "q4_k_m", "qwen-coder-1.5b": "q4_k_m"}
_QUANT = re.compile(r"(?:^|[-_.:])(f16|bf16|f32|q8_0|q6_k|q5_[01]|q5_k(?:_[sm])?|q4_[01]|q4_k(?:_[sm])?|iq\w+)(?:$|[-_.])")


def _family(name: str) -> Optional[str]:
    """The model of `plookup models list` nearest to a repository or file name, or None."""
    if "qwen3-coder" in name:
        return "qwen-coder-1.5b"  # the largest code model plookup gets
    sized = re.search(r"qwen2\.5-coder-(\d+(?:\.\d+)?)b", name)
    if sized:
        return "qwen-coder-0.5b" if float(sized.group(1)) <= 0.5 else "qwen-coder-1.5b"
    if "smollm2-135m" in name:
        return "smollm2"
    if "gemma-3-270m" in name or "gemma3-270m" in name:
        return "gemma3"
    return None


def hf_model(repo: str) -> tuple[str, str]:
    """(the `-m` spec, a line saying so) in place of ``-hf USER/MODEL[:QUANT]`` (or an -hff file
    name): the nearest model plookup can get, requantized to the repository's quantization where
    plookup makes that one (e.g. ggml-org/Qwen2.5-Coder-1.5B-Q8_0-GGUF -> qwen-coder-1.5b:q8_0).
    A ValueError where plookup can get no such model."""
    name, _, quant = repo.strip().lower().partition(":")
    family = _family(name)
    if family is None:
        raise ValueError(f"{repo}: plookup downloads nothing from Hugging Face, and no model it can get is "
                         f"near it; give -m with a GGUF file or a name of `plookup models list` "
                         f"({', '.join(MODEL_NAMES)})")
    found = quant or (m.group(1) if (m := _QUANT.search(name)) else "")
    found = QUANT_ALIASES.get(found, found)
    spec = family if found in ("", SHIPPED_QUANT[family]) or found not in QUANTS else f"{family}:{found}"
    how = f", requantized to {found}" if spec != family else ""
    return spec, (f"{repo}: serving {spec} in its place, the nearest model plookup can get "
                  f"({MODEL_NAMES[family]}{how})")


# -- actions: notes kept for `plookup serve` to print once, presets, refusals


def add_note(namespace, text: str) -> None:
    """A line `plookup serve` prints before loading (what a llama-server flag became here)."""
    namespace.llama_notes = [*(getattr(namespace, "llama_notes", None) or ()), text]


class Noted(argparse.Action):
    """Stores the value and notes `note` (formatted with the option and value)."""

    def __init__(self, *args, note: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.note = note

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        add_note(namespace, self.note.format(option=option_string, value=values))


class HfRepo(argparse.Action):
    """-hf / -hff: the model plookup can get in its place, said; exit 2 where there is none."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            spec, note = hf_model(values)
        except ValueError as e:
            parser.exit(2, f"{parser.prog}: {option_string} {e}\n")
        namespace.model = spec
        add_note(namespace, f"{option_string} {note}")


class Alias(argparse.Action):
    """-a/--alias NAME[,NAME]: the model id /v1/models lists; plookup serves one."""

    def __call__(self, parser, namespace, values, option_string=None):
        names = [name.strip() for name in values.split(",") if name.strip()]
        if not names:
            parser.error(f"argument {option_string}: no alias in {values!r}")
        namespace.model_alias = names[0]
        if len(names) > 1:
            add_note(namespace, f"{option_string}: plookup serves the model under one id, {names[0]} "
                                f"({', '.join(names[1:])} left out)")


class Keys(argparse.Action):
    """--api-key KEY[,KEY] and --api-key-file FILE, as often as given: every key is valid."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or ()), *values])


# llama.cpp's speculative types (common/speculative.cpp): its n-gram drafters are what plookup's
# own drafter does; its draft-model ones need a model plookup does not load.
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
DRAFT_MODEL_TYPES = ("draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark", "draft", "eagle3")


def spec_types(text: str) -> list[str]:
    types = [t.strip() for t in text.split(",") if t.strip()]
    for t in types:
        if t not in ("none", *NGRAM_TYPES, *DRAFT_MODEL_TYPES):
            raise argparse.ArgumentTypeError(f"a speculative type of none, {', '.join(NGRAM_TYPES)}, got {t!r}")
    if not types:
        raise argparse.ArgumentTypeError("no type in it")
    return types


class SpecType(argparse.Action):
    """--spec-type TYPE[,TYPE]: none turns drafting off; an n-gram type is plookup's own drafting
    (said); a draft-model type is refused."""

    def __call__(self, parser, namespace, values, option_string=None):
        model_types = [t for t in values if t in DRAFT_MODEL_TYPES]
        if model_types:
            parser.exit(2, f"{parser.prog}: {option_string} {model_types[0]}: plookup drafts from the text itself, "
                           f"with no draft model; use ngram-mod (plookup's drafting, the default) or none\n")
        namespace.spec_type = values
        ngram = [t for t in values if t in NGRAM_TYPES]
        if ngram and "none" not in values:
            add_note(namespace, f"{option_string} {','.join(ngram)}: plookup drafts with its own drafter "
                                f"(--drafter, default suffix: the request's text and earlier requests')")


# llama-server's FIM presets (arg.cpp, "presets"): their repository, draft model, and values.
FIM_VALUES = dict(port=8012, n_ubatch=1024, n_batch=1024, n_ctx=0, cache_reuse=256)
FIM_PRESETS = {
    "--fim-qwen-1.5b-default": ("ggml-org/Qwen2.5-Coder-1.5B-Q8_0-GGUF", None),
    "--fim-qwen-3b-default": ("ggml-org/Qwen2.5-Coder-3B-Q8_0-GGUF", None),
    "--fim-qwen-7b-default": ("ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF", None),
    "--fim-qwen-7b-spec": ("ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF", "ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF"),
    "--fim-qwen-14b-spec": ("ggml-org/Qwen2.5-Coder-14B-Q8_0-GGUF", "ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF"),
    "--fim-qwen-30b-default": ("ggml-org/Qwen3-Coder-30B-A3B-Instruct-Q8_0-GGUF", None),
}


class Preset(argparse.Action):
    """A FIM preset: llama-server's values, set where the flag stands (a later flag overrides
    them, as in llama-server), with the nearest model plookup can get, said."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        repo, draft = FIM_PRESETS[option_string]
        spec, note = hf_model(repo)
        for name, value in dict(FIM_VALUES, model=spec).items():
            setattr(namespace, name, value)
        add_note(namespace, f"{option_string}: {note}")
        if draft:
            add_note(namespace, f"{option_string}: plookup drafts from the text itself in place of the draft "
                                f"model {draft}")


class Refuse(argparse.Action):
    """A llama-server flag plookup cannot honour: exit 2 with one line naming it and what to do."""

    def __init__(self, option_strings, dest, advice: str, **kwargs):
        super().__init__(option_strings, dest, nargs="?", default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)
        self.advice = advice

    def __call__(self, parser, namespace, values, option_string=None):
        parser.exit(2, f"{parser.prog}: {option_string}: {self.advice}\n")


# (llama-server's spellings, its environment variables, what to do instead)
REFUSED = (
    (("-mm", "--mmproj", "-mmu", "--mmproj-url"), ("LLAMA_ARG_MMPROJ", "LLAMA_ARG_MMPROJ_URL"),
     "plookup serves text models, with no multimodal projector: drop it"),
    (("--embedding", "--embeddings", "--pooling", "--embd-gemma-default"), ("LLAMA_ARG_EMBEDDINGS", "LLAMA_ARG_POOLING"),
     "plookup serves text generation, not embeddings: run llama-server for them"),
    (("--rerank", "--reranking"), ("LLAMA_ARG_RERANKING",), "plookup does not rerank: run llama-server for it"),
    (("--lora", "--lora-scaled", "--control-vector", "--control-vector-scaled"), (),
     "plookup loads no adapter: merge it into the GGUF first (llama.cpp's llama-export-lora)"),
    (("-sm", "--split-mode", "-ts", "--tensor-split", "-mg", "--main-gpu", "-dev", "--device"),
     ("LLAMA_ARG_SPLIT_MODE", "LLAMA_ARG_TENSOR_SPLIT", "LLAMA_ARG_MAIN_GPU", "LLAMA_ARG_DEVICE"),
     "plookup puts layers on the build's GPU with -ngl, or on other machines with --rpc HOST:PORT,...: drop it"),
    (("-md", "--model-draft", "--spec-draft-model", "-hfd", "-hfrd", "--hf-repo-draft", "--spec-draft-hf",
      "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "--spec-draft-ngl"),
     ("LLAMA_ARG_SPEC_DRAFT_MODEL", "LLAMA_ARG_MODEL_DRAFT", "LLAMA_ARG_SPEC_DRAFT_HF_REPO", "LLAMA_ARG_N_GPU_LAYERS_DRAFT"),
     "plookup drafts from the text itself, with no draft model: drop it (--draft-max N bounds the drafts)"),
    (("-mu", "--model-url", "-dr", "--docker-repo"), ("LLAMA_ARG_MODEL_URL", "LLAMA_ARG_DOCKER_REPO"),
     "plookup downloads no model: give -m with a GGUF file or a name of `plookup models list`"),
    (("--gpt-oss-20b-default", "--gpt-oss-120b-default", "--vision-gemma-4b-default", "--vision-gemma-12b-default"), (),
     "plookup can get no such model: give -m with a GGUF file or a name of `plookup models list`"),
    (("--ssl-key-file", "--ssl-cert-file"), ("LLAMA_ARG_SSL_KEY_FILE", "LLAMA_ARG_SSL_CERT_FILE"),
     "plookup serves plain HTTP: put a TLS proxy in front of it (README, Access)"),
    (("--context-shift",), ("LLAMA_ARG_CONTEXT_SHIFT",),
     "plookup shifts no context, a generation stops at it: drop it (a longer -c gives more room)"),
)


def add_server_flags(serve: argparse.ArgumentParser) -> None:
    """llama-server's flags that only `plookup serve` takes (the model's are in add_model_options;
    host, port, keys, alias and slots are serve's own options, spelled both ways)."""
    serve.set_defaults(llama_notes=None, spec_type=None)
    add = serve.add_argument
    add("-n", "--predict", "--n-predict", dest="n_predict", type=n_predict, default=-1, metavar="N",
        help="tokens a request generates when it names no number, and the most it may name (default -1: up "
             "to the context)")
    add("--cache-reuse", type=non_negative, default=0, metavar="N",
        help="after the common prefix, reuse cached chunks of at least N tokens further on in a new prompt "
             "by shifting them into place (default 0: the common prefix only)")
    add("--spec-type", action=SpecType, type=spec_types, metavar="TYPE[,TYPE]",
        help="none: no drafting; llama-server's n-gram types (ngram-mod, ...): plookup's own drafting, the default")
    add("--draft-min", "--draft-n-min", "--spec-draft-n-min", "--spec-ngram-mod-n-min", dest="draft_min",
        type=non_negative, default=0, metavar="N",
        help="a request's shortest draft, where it sends speculative.n_min (accepted; plookup sizes drafts "
             "by what they pay here)")
    add("-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", dest="model", action=HfRepo, metavar="USER/MODEL[:QUANT]",
        help="llama-server's model repository: the nearest model `plookup models list` has, said (e.g. "
             "ggml-org/Qwen2.5-Coder-1.5B-Q8_0-GGUF: qwen-coder-1.5b:q8_0); one plookup cannot get is refused")
    for flag in FIM_PRESETS:
        add(flag, action=Preset, help=f"llama-server's preset: --port 8012 -ub 1024 -b 1024 -c 0 --cache-reuse 256, "
                                      f"the nearest model plookup can get to {FIM_PRESETS[flag][0]}")
    add("--spec-default", dest="max_draft", action="store_const", const=64, default=argparse.SUPPRESS,
        help="llama-server's default speculative decoding: plookup's drafting, up to 64 tokens (its default)")
    add("-dt", "--defrag-thold", type=float, action=Noted, metavar="N",
        note="{option}: deprecated in llama.cpp, which defragments by itself; no effect here")
    add("--jinja", action=argparse.BooleanOptionalAction, default=True,
        help="accepted: plookup renders the chat template through llama_cpp's Jinja either way")
    add("--chat-template", type=chat_template, metavar="NAME|JINJA",
        help=f"the chat template: a built-in name llama_cpp has ({', '.join(CHAT_FORMATS)}) or Jinja text "
             "(default: the GGUF's)")
    add("--chat-template-file", dest="chat_template", type=chat_template_file, metavar="FILE",
        help="the chat template's Jinja text from FILE")
    add("--slots", action=argparse.BooleanOptionalAction, default=True, help="accepted: /slots is always served")
    add("--metrics", action="store_true", help="accepted: /metrics is always served")
    add("--warmup", action=argparse.BooleanOptionalAction, default=True,
        help="accepted: plookup runs no empty warm-up decode (a model's first load measures it once instead)")
    add("--no-context-shift", action="store_true", help="accepted: plookup never shifts the context")
    for names, _, advice in REFUSED:
        add(*names, action=Refuse, advice=advice)


# -- llama-server's environment variables (arg.cpp's set_env), for `plookup serve`: each stands for a
# flag, given before the command line's so that they override it, as llama.cpp applies them.

ENV_FLAGS = {
    "LLAMA_ARG_MODEL": "--model", "LLAMA_ARG_HF_REPO": "--hf-repo", "LLAMA_ARG_HF_FILE": "--hf-file",
    "LLAMA_ARG_CTX_SIZE": "--ctx-size", "LLAMA_ARG_N_PARALLEL": "--parallel",
    "LLAMA_ARG_N_GPU_LAYERS": "--n-gpu-layers", "LLAMA_ARG_THREADS": "--threads",
    "LLAMA_ARG_BATCH": "--batch-size", "LLAMA_ARG_UBATCH": "--ubatch-size", "LLAMA_ARG_FLASH_ATTN": "--flash-attn",
    "LLAMA_ARG_CACHE_TYPE_K": "--cache-type-k", "LLAMA_ARG_CACHE_TYPE_V": "--cache-type-v",
    "LLAMA_ARG_DEFRAG_THOLD": "--defrag-thold", "LLAMA_ARG_N_PREDICT": "--n-predict", "LLAMA_ARG_HOST": "--host",
    "LLAMA_ARG_PORT": "--port", "LLAMA_ARG_ALIAS": "--alias",
    # The keys through flags of their own: the command line's keys replace them, where every other
    # flag's last value wins anyway (llama-server adds both).
    "LLAMA_API_KEY": "--env-api-key", "LLAMA_ARG_API_KEY_FILE": "--env-api-key-file",
    "LLAMA_ARG_CACHE_REUSE": "--cache-reuse", "LLAMA_ARG_CHAT_TEMPLATE": "--chat-template",
    "LLAMA_ARG_CHAT_TEMPLATE_FILE": "--chat-template-file", "LLAMA_ARG_SPEC_TYPE": "--spec-type",
    "LLAMA_ARG_DRAFT_MAX": "--draft-max", "LLAMA_ARG_DRAFT_MIN": "--draft-min",
    "LLAMA_ARG_SPEC_DRAFT_N_MAX": "--draft-max", "LLAMA_ARG_SPEC_DRAFT_N_MIN": "--draft-min",
    "LLAMA_ARG_RPC": "--rpc", "LLAMA_ARG_CORS_ORIGINS": "--cors-origins",
}
# Switches: (the flag a true value gives, the one a false value gives or None).
ENV_SWITCHES = {
    "LLAMA_ARG_JINJA": ("--jinja", "--no-jinja"), "LLAMA_ARG_ENDPOINT_SLOTS": ("--slots", "--no-slots"),
    "LLAMA_ARG_ENDPOINT_METRICS": ("--metrics", None), "LLAMA_ARG_MMAP": ("--mmap", "--no-mmap"),
    "LLAMA_ARG_MLOCK": ("--mlock", None), "LLAMA_ARG_NO_MMAP": ("--no-mmap", None),  # older llama.cpp's
}


def env_arguments(environ) -> list[str]:
    """The flags llama-server's environment variables in `environ` stand for, to go before the
    command line's; a ValueError naming the variable for a value no flag takes, or a variable
    for something plookup cannot honour. Empty variables count as unset."""
    given = {name: value for name, value in environ.items() if value != ""}
    for _, names, advice in REFUSED:
        for name in names:
            if name in given and given[name].lower() not in FALSY:
                raise ValueError(f"{name}: {advice}")
    arguments = []
    for name, (on, off) in ENV_SWITCHES.items():
        if name in given:
            value = given[name].lower()
            if value not in TRUTHY + FALSY:
                raise ValueError(f"{name}={given[name]!r}: true or false ({', '.join(TRUTHY + FALSY)})")
            flag = on if value in TRUTHY else off
            arguments += [flag] if flag else []
    for name, flag in ENV_FLAGS.items():
        if name in given:
            _check_env(name, flag, given[name])
            arguments.append(f"{flag}={given[name]}")  # "=": a value starting with "-" stays a value
    return arguments


def _check_env(name: str, flag: str, value: str) -> None:
    """Checks the value as the flag's type would, so that the error names the variable."""
    check = {"--ctx-size": ctx_size, "--parallel": parallel, "--n-gpu-layers": gpu_layers, "--threads": threads,
             "--batch-size": positive, "--ubatch-size": positive, "--flash-attn": flash_attn,
             "--cache-type-k": cache_type, "--cache-type-v": cache_type, "--defrag-thold": float,
             "--n-predict": n_predict, "--host": host, "--port": port, "--env-api-key": api_keys,
             "--env-api-key-file": api_key_file, "--cache-reuse": non_negative, "--chat-template": chat_template,
             "--chat-template-file": chat_template_file, "--spec-type": spec_types, "--draft-max": non_negative,
             "--draft-min": non_negative, "--hf-repo": hf_model, "--hf-file": hf_model}.get(flag)
    if check is None:
        return
    try:
        check(value)
    except (argparse.ArgumentTypeError, ValueError) as e:
        raise ValueError(f"{name}={value!r}: {e}") from None


def settle(args: argparse.Namespace) -> None:
    """What llama-server's flags mean once all are read: --spec-type none turns drafting off
    whatever --draft-max says (llama-server drafts nothing with it either)."""
    if args.spec_type and "none" in args.spec_type:
        args.max_draft = 0


# -- the model file's header: -c 0 and where -ngl puts the layers, without loading the model

_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


def model_shape(path: str) -> dict:
    """{"context_length", "block_count"} of a GGUF file, read from its header (gguf's GGUFReader
    parses every tensor and array first: 9 s for Gemma 3's vocabulary). A ValueError naming a file
    that is missing or not GGUF."""
    try:
        with open(path, "rb") as f:
            found = _header(f, path)
    except OSError as e:
        raise ValueError(f"cannot read the model file {path}: {e.strerror}") from None
    except struct.error:
        raise ValueError(f"the model file {path} ends inside its GGUF header") from None
    arch = found.get("general.architecture", "?")
    return {name: found.get(f"{arch}.{name}") for name in ("context_length", "block_count")}


def _header(f, path: str) -> dict:
    """The architecture, context length and block count among a GGUF file's metadata."""
    def read(kind: str):
        return struct.unpack("<" + kind, f.read(struct.calcsize("<" + kind)))[0]

    def skip(kind: int) -> None:
        if kind == _STRING:
            f.seek(read("Q"), 1)
        elif kind == _ARRAY:
            inner, count = read("I"), read("Q")
            if inner in _SCALARS:
                f.seek(count * struct.calcsize("<" + _SCALARS[inner]), 1)
            else:
                for _ in range(count):
                    skip(inner)
        else:
            f.seek(struct.calcsize("<" + _SCALARS[kind]), 1)

    if f.read(4) != b"GGUF":
        raise ValueError(f"not a GGUF file: {path}")
    read("I"), read("Q")  # version, tensor count
    wanted, found = {"general.architecture"}, {}
    for _ in range(read("Q")):
        key = f.read(read("Q")).decode("utf-8", "replace")
        kind = read("I")
        if key in wanted and (kind in _SCALARS or kind == _STRING):
            found[key] = f.read(read("Q")).decode() if kind == _STRING else read(_SCALARS[kind])
            if key == "general.architecture":  # the first key, in the files llama.cpp writes
                wanted |= {f"{found[key]}.context_length", f"{found[key]}.block_count"}
            if len(found) == 3:
                break
        else:
            skip(kind)
    return found


def trained_context(path: str) -> int:
    """-c 0: the context the model was trained with, as llama-server reads it."""
    n_ctx = model_shape(path)["context_length"]
    if not n_ctx:
        raise ValueError(f"-c 0: {path} does not say the context it was trained with; give -c N")
    return int(n_ctx)
