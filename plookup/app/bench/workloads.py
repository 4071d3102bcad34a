"""Workloads made from real text that ships with Python: source code to edit, prose to proofread.

Each workload is a list of chat messages plus a kind: "copy" (the answer repeats the input: code
edits, proofreading, a second turn that edits the first answer), "whole-file" (a 200-400-line
module sent back with one rename, as editors ask for it: longer context and output, so the bench
runs them with settings of their own) or "free" (a question whose answer is new text: the
negative control). Everything is deterministic for a given seed.
"""

from __future__ import annotations

import inspect
import json
import os
import random
import re
import textwrap
from dataclasses import dataclass, field

# Real functions from the standard library, 7-80 lines each: the code being edited.
CODE_SOURCES = [
    ("textwrap", "dedent"),
    ("textwrap", "indent"),
    ("shutil", "copyfileobj"),
    ("shutil", "which"),
    ("json", "dumps"),
    ("random", "Random.shuffle"),
    ("copy", "deepcopy"),
    ("tempfile", "mkdtemp"),
    ("statistics", "median"),
    ("glob", "glob"),
    ("string", "capwords"),
    ("heapq", "merge"),
    ("ast", "literal_eval"),
    ("base64", "b64encode"),
    ("calendar", "Calendar.monthdatescalendar"),
    ("difflib", "get_close_matches"),
]

# Module docstrings that are prose: the text being proofread.
PROSE_SOURCES = ["heapq.__about__", "difflib", "random", "tokenize", "sched", "inspect", "string"]

# Functions whose purpose the model is asked to explain in its own words.
QUESTION_SUBJECTS = [
    "itertools.groupby", "functools.lru_cache", "collections.Counter", "os.walk",
    "contextlib.contextmanager", "subprocess.run", "threading.Lock", "pathlib.Path.glob",
    "asyncio.gather", "dataclasses.field",
]

EDIT_KINDS = ("rename", "docstring", "constant", "whole")

# Standard-library modules of 200-400 lines: the files a whole-file edit sends back.
WHOLE_FILE_SOURCES = ("copy", "glob", "string", "shlex")
WHOLE_FILE_SYSTEM = "You are a careful programmer. Reply with the complete file only, in one code block."


@dataclass
class Workload:
    name: str
    kind: str  # "copy" or "free"
    messages: list[dict] = field(default_factory=list)


def _resolve(dotted: str):
    module_name, _, attr_path = dotted.partition(".")
    obj = __import__(module_name)
    for part in filter(None, attr_path.split(".")):
        obj = getattr(obj, part)
    return obj


def function_source(module: str, qualname: str) -> str:
    return textwrap.dedent(inspect.getsource(_resolve(f"{module}.{qualname}")))


def prose(source: str) -> str:
    obj = _resolve(source)
    text = obj if isinstance(obj, str) else inspect.getdoc(obj) or ""
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def inject_typos(text: str, rng: random.Random, rate: float = 0.04) -> str:
    """Swap two adjacent letters in about `rate` of the words (never the first letter)."""

    def maybe_typo(m: re.Match) -> str:
        word = m.group(0)
        if len(word) < 4 or rng.random() >= rate:
            return word
        i = rng.randrange(1, len(word) - 1)
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]

    return re.sub(r"[A-Za-z]+", maybe_typo, text)


def _local_names(code: str) -> list[str]:
    names = sorted(set(re.findall(r"\b([a-z_][a-z0-9_]{2,})\s*=[^=]", code)))
    return [n for n in names if n not in ("self", "kwargs", "args")]


def code_edit(module: str, qualname: str, edit: str, rng: random.Random) -> Workload:
    code = function_source(module, qualname)
    if edit == "rename" and _local_names(code):
        old = rng.choice(_local_names(code))
        task = f"Rename the variable `{old}` to `{old}_value` everywhere in this function."
    elif edit == "docstring":
        task = "Add a one-line comment above the `def` line saying what the function does."
    elif edit == "constant" and re.search(r"\b\d+\b", code):
        number = rng.choice(re.findall(r"\b\d+\b", code))
        task = f"Change the number {number} to {int(number) + 1} everywhere in this function."
    else:
        edit, task = "whole", "Fix any bug you see; if there is none, leave it as it is."
    prompt = f"{task} Reply with the whole function only.\n\n```python\n{code}```"
    return Workload(f"code-{edit}:{module}.{qualname}", "copy", [{"role": "user", "content": prompt}])


def renamable_function(code: str, rng: random.Random) -> str:
    """A function the module defines and uses again: renaming it touches several places."""
    names = sorted({n for n in re.findall(r"^def (\w+)\(", code, re.M) if len(re.findall(rf"\b{n}\b", code)) >= 3})
    return rng.choice(names)


def whole_file_edit(module: str, rng: random.Random) -> Workload:
    """Rename one function everywhere in a whole module, as an editor asks for an edit."""
    code = inspect.getsource(_resolve(module))
    old = renamable_function(code, rng)
    task = f"Rename the function `{old}` to `{old}_renamed` everywhere in this file."
    messages = [{"role": "system", "content": WHOLE_FILE_SYSTEM},
                {"role": "user", "content": f"{task}\n\n```python\n{code}```"}]
    return Workload(f"whole-file:{module}.py:{old}", "whole-file", messages)


def whole_file_workloads(seed: int = 0, count: int = 2) -> list[Workload]:
    rng = random.Random(seed)
    return [whole_file_edit(module, rng) for module in WHOLE_FILE_SOURCES[:count]]


def proofread(source: str, rng: random.Random) -> Workload:
    text = inject_typos(prose(source), rng)
    prompt = f"Correct the spelling mistakes in this text. Reply with the corrected text only.\n\n{text}"
    return Workload(f"proofread:{source}", "copy", [{"role": "user", "content": prompt}])


def multi_turn(module: str, qualname: str, first_answer: str) -> Workload:
    """A second turn that edits the first answer (passed in, as the model gave it)."""
    first = code_edit(module, qualname, "whole", random.Random(0))
    return Workload(
        f"multiturn:{module}.{qualname}",
        "copy",
        first.messages
        + [
            {"role": "assistant", "content": first_answer},
            {"role": "user", "content": "Now add type hints to it. Reply with the whole function."},
        ],
    )


def question(subject: str) -> Workload:
    prompt = f"In a few sentences of your own, explain when a Python programmer would use {subject}."
    return Workload(f"question:{subject}", "free", [{"role": "user", "content": prompt}])


def standard_workloads(seed: int = 0) -> list[Workload]:
    """Code edits of every source, proofreading of every text, and every free-form question."""
    rng = random.Random(seed)
    loads = [
        code_edit(module, qualname, EDIT_KINDS[i % len(EDIT_KINDS)], rng)
        for i, (module, qualname) in enumerate(CODE_SOURCES)
    ]
    loads += [proofread(source, rng) for source in PROSE_SOURCES]
    loads += [question(subject) for subject in QUESTION_SUBJECTS]
    return loads


def load_jsonl(path: str) -> list[Workload]:
    """A user's own workloads: one JSON object per line, {"messages": [...], "kind"?, "name"?}."""
    loads = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                messages = record["messages"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{lineno}: expected {{'messages': [...]}}: {e}") from None
            loads.append(Workload(record.get("name", f"{path}:{lineno}"), record.get("kind", "copy"), messages))
    return loads


# `plookup bench`'s selection from standard_workloads: one code edit of each kind, two short
# proofreading texts and three questions keep a default run near ten minutes on 2 CPU cores.
BENCH_PICKS = (0, 1, 2, 7, 17, 18, 23, 25, 26)
QUICK_PICKS = (1, 18, 23)
# The function whose first answer a second turn edits.
MULTI_TURN_SOURCE = ("string", "capwords")


def bench_workloads(first_answer, seed: int = 0, quick: bool = False) -> list[Workload]:
    """The benchmark's workloads; `first_answer(messages) -> str` answers the multi-turn case's
    first turn (with plain decoding), and is not called for a quick selection."""
    loads = standard_workloads(seed)
    picked = [loads[i] for i in (QUICK_PICKS if quick else BENCH_PICKS)]
    if quick:
        return picked
    first = code_edit(*MULTI_TURN_SOURCE, "whole", random.Random(0))
    second = multi_turn(*MULTI_TURN_SOURCE, first_answer(first.messages))
    copies = [w for w in picked if w.kind == "copy"]
    return copies + [second] + [w for w in picked if w.kind != "copy"]


# `plookup bench --workloads corpus --corpus FILE`: new code against a project and libraries that
# the prompt does not show, and proofreading, with FILE built from `corpus_sources()` (this
# package's own source and the libraries below), e.g.
#   plookup corpus build $(python -c 'from plookup.app.bench.workloads import corpus_sources as c; print(*c())') \
#       -o corpus.idx -m MODEL
CORPUS_LIBRARIES = ("argparse", "dataclasses", "json", "pathlib", "random", "string", "inspect", "tokenize")
# (name, prompt): code the model writes anew; the corpus holds the project or library it uses.
CORPUS_CODE_TASKS = (
    ("argparse-cli", "Write a Python function `build_parser()` that returns an argparse.ArgumentParser for a tool "
                     "with two subcommands: `build` (a positional PATH and `-o/--output FILE`, required) and "
                     "`serve` (`--port N`, an int, default 8080, and `--host`, default 127.0.0.1). "
                     "Reply with the code only."),
    ("plookup-workload", "In the plookup project, plookup/app/bench/workloads.py builds benchmark workloads as "
                         "`Workload(name, kind, messages)` dataclasses, like `proofread(source, rng)` and "
                         "`question(subject)` do. Add a function `summary(source: str) -> Workload` that asks the "
                         "model to summarise the docstring of `source` in three sentences (a \"free\" workload). "
                         "Reply with the function only."),
    ("dataclass-json", "Write a Python dataclass `CacheEntry` with fields `key: str`, `value: str` and "
                       "`expires: float`, a method `expired(self, now: float) -> bool`, and a function "
                       "`load_entries(path)` that reads a list of them from a JSON file with json.load. "
                       "Reply with the code only."),
    ("pathlib-walk", "Write a Python function `python_files(root)` that uses pathlib to yield every .py file "
                     "under the folder `root`, skipping hidden folders and files larger than 1 MB, sorted by "
                     "path. Reply with the code only."),
)
# Texts to proofread; the corpus holds other docstrings of the same authors (the standard library's),
# not these.
CORPUS_PROSE_SOURCES = ("heapq.__about__", "difflib", "sched")


def corpus_sources() -> list[str]:
    """The paths the corpus workloads' index is built from: plookup's own package and the
    standard-library modules of CORPUS_LIBRARIES (none of the texts the workloads proofread)."""
    import plookup

    paths = [os.path.dirname(inspect.getsourcefile(plookup))]
    return paths + [inspect.getsourcefile(_resolve(name)) for name in CORPUS_LIBRARIES]


def corpus_workloads(seed: int = 0) -> list[Workload]:
    """New code (kind "free": nothing in the prompt to copy) and proofreading (kind "copy")."""
    rng = random.Random(seed)
    loads = [Workload(f"corpus-code:{name}", "free", [{"role": "user", "content": prompt}])
             for name, prompt in CORPUS_CODE_TASKS]
    return loads + [proofread(source, rng) for source in CORPUS_PROSE_SOURCES]
