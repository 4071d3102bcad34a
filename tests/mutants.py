"""Planted bugs, and the legs of tests that must catch each: a mutation check of the engine's invariants.

Each mutant is a slip as it would be made (an off-by-one in the suffix automaton, a draft judged on
another slot's rows, a prediction matched after the prompt, a grammar a greedy request skips, a
cache shift one cell short, a memory scope keyed wrong or dropped while in use, ...), never a
test's own control planted again. It replaces one exact piece of plookup's source (found exactly
once, or the run stops) in a copy of the repository (its tracked files and the untracked ones git
does not ignore), never in the checkout, then runs against that copy the whole leg of tests its
source belongs to (LEGS): the copy first on the import path, its own tests, its own conftest. The
leg's file that mirrors the source runs first, then the rest of the leg, to the first failure (-x):
a catch there takes seconds, and a mutant it misses meets every other test of the leg. A mutant is
caught when a test fails; one the whole leg passes survived, and the run exits non-zero. Before the
mutants, each leg runs on an unmutated copy and must pass (else a "catch" would mean nothing). The
remedy for a survivor is a behaviour test that catches it (tests/model/test_invariants.py, or the
test file mirroring the source), never a weaker mutant.

The legs: "unit" is CI's unit leg (a minute on 2 cores), less test_sizes.py, which reads the
source's shape (function lengths), not its behaviour, and fails on other work in progress. The
model leg takes far longer than a run of mutants can (over 20 minutes on 2 cores, more on a shared
machine): the engine's mutants run against "engine", its files that decode several slots at once,
with drafts, branches, and prompts cached and reused (test_invariants, test_engine,
test_branches_greedy, test_slot_cache), a few minutes.

    python tests/mutants.py              # every mutant; writes docs/mutants.txt
    python tests/mutants.py --list       # what each plants, and its pytest runs
    python tests/mutants.py --only NAME  # one (repeatable); docs/mutants.txt is left as it is
    python tests/mutants.py --dry-run    # no mutant: which plookup a copy imports, which tests it collects
    python tests/mutants.py -v           # each mutant's test output too (how it was caught)
    python tests/mutants.py --head       # copies of HEAD's files: a checkout others are editing as committed

Each copy is seeded with the numba kernels compiled so far (numba checks a source's content, not
its path), so that no mutant compiles them again (a mutant of a kernel compiles its own). Not part
of CI: the engine leg loads models. On a shared machine, wrap it in the lock the model tests take:
``flock /tmp/plookup-cpu.lock python tests/mutants.py``.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "docs" / "mutants.txt"
TIMEOUT_S = 600  # one mutant's tests; a hang is no catch

# The legs a mutant runs against (see the docstring): the tests of the leg its source belongs to.
LEGS = {
    "unit": ("tests/unit", "-m", "not slow", "--ignore=tests/unit/test_sizes.py"),
    "engine": ("tests/model/test_invariants.py", "tests/model/test_engine.py", "tests/model/test_branches_greedy.py",
               "tests/model/test_slot_cache.py", "-m", "not slow"),
}


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the repository's root
    find: str  # the exact source text, present exactly once
    replace: str
    leg: str  # a key of LEGS: the tests it runs against
    what: str  # the bug, in a line
    first: str = ""  # the leg's test file that mirrors the source, run first (the rest follow it)

    @property
    def runs(self) -> list[tuple[str, ...]]:
        """The pytest runs that make its leg: the mirroring file's first (a catch there ends it in
        seconds), then the rest of the leg, which meets a mutant that file misses."""
        if not self.first:
            return [LEGS[self.leg]]
        rest = [arg for arg in LEGS[self.leg] if arg != self.first]  # (--ignore leaves a named file in)
        return [(self.first, "-m", "not slow"), (*rest, f"--ignore={self.first}")]


# Slips as they would be made, none a test's own control planted again (grep the tests for
# "control": the prediction never consulted, slot 0's draft, a roll-back one cell long, a filler
# left, a logprobs row late, one cached token too many, drafts never cut are theirs).
MUTANTS = [
    Mutant(
        "automaton_clone_one_token_long", "plookup/native/suffix_automaton.py",
        "clone = _new_state(\n                states[p, LEN] + 1,",
        "clone = _new_state(\n                states[p, LEN] + 2,",
        "unit",
        "the suffix automaton's clone (the new suffix link of the split state) one token longer than "
        "the longest string it stands for: match lengths and drafts read off it are wrong",
        first="tests/unit/test_kernels.py",
    ),
    Mutant(
        "draft_verified_against_another_slots_rows", "plookup/engine/step.py",
        "    for i in order:\n        starts[i] = len(rows)",
        "    for k, i in enumerate(order):\n        starts[k] = len(rows)",
        "engine",
        "each piece's first row counted in the batch's order (by sequence), not the pieces' own: where "
        "the two differ, a slot's draft is judged on another slot's logits rows",
        first="tests/model/test_engine.py",
    ),
    Mutant(
        "prediction_matched_after_the_prompt", "plookup/draft/index_drafter.py",
        "            self.reset()\n        self._begin(prediction)\n",
        "            self.reset()\n        self._begin(prediction)\n"
        "        if self._prediction is not None:  # a prediction is of the answer: matched from the prompt's end on\n"
        "            self._prediction._fed = len(prompt)\n",
        "unit",
        "the engine's prediction is matched against the answer only, from the prompt's end on: where the "
        "prompt ends inside the predicted text, the first steps draft nothing from it",
        first="tests/unit/test_prediction_source.py",
    ),
    Mutant(
        "grammar_read_as_a_plain_argmax", "plookup/verify/greedy.py",
        "if temp != 0 or grammar is not None or frequency_penalty != 0 or presence_penalty != 0:",
        "if temp != 0 or frequency_penalty != 0 or presence_penalty != 0:",
        "unit",
        "a greedy request with a grammar takes each row's argmax in place: the grammar lets any token through",
        first="tests/unit/test_greedy_rows.py",
    ),
    Mutant(
        "cache_reuse_shifts_a_chunk_one_cell_short", "plookup/engine/reuse.py",
        "context.shift(seq, move.cached, move.cached + move.length, move.prompt - move.cached)",
        "context.shift(seq, move.cached, move.cached + move.length - 1, move.prompt - move.cached)",
        "unit",
        "--cache-reuse moves a chunk's cells but its last (the shift's end read as inclusive): that cell "
        "stays at its old position, and the prompt's position for it has none",
        first="tests/unit/test_reuse.py",
    ),
    Mutant(
        "staged_chunk_brought_in_a_position_late", "plookup/engine/reuse.py",
        "context.shift(slot.branch_seq, context.n_ctx + to, context.n_ctx + end, -context.n_ctx)",
        "context.shift(slot.branch_seq, context.n_ctx + to, context.n_ctx + end, 1 - context.n_ctx)",
        "unit",
        "a cached chunk staged behind new tokens is shifted back from its waiting place one position too "
        "far: the slot's sequence then holds a gap before it and its cells one position late",
        first="tests/unit/test_reuse.py",
    ),
    Mutant(
        "kept_cells_taken_still_recorded", "plookup/engine/admission.py",
        "            held[take.at - first : take.at - first + take.length] = False\n",
        "",
        "unit",
        "the chunks a request takes from the cells kept from an earlier prompt stay recorded as kept: "
        "a later request plans chunks from cells that moved into another sequence",
        first="tests/unit/test_reuse.py",
    ),
    Mutant(
        "memory_scope_keyed_by_the_salt_alone", "plookup/index/scopes.py",
        'return hashlib.sha256(f"{key or \'\'}\\0{salt or \'\'}".encode()).hexdigest()[:24]',
        'return hashlib.sha256(f"{salt or key or \'\'}".encode()).hexdigest()[:24]',
        "unit",
        "a request's memory scope is its cache_salt where it sends one, whatever its API key: two "
        "tenants with the same salt draft from each other's requests",
        first="tests/unit/test_scopes.py",
    ),
    Mutant(
        "memory_scope_in_use_dropped_as_stale", "plookup/index/scopes.py",
        "memory = self._scopes.pop(scope, None)",
        "memory = self._scopes.get(scope)",
        "unit",
        "a scope's use does not make it the most recent: the busiest tenant's memory is the first dropped",
        first="tests/unit/test_scopes.py",
    ),
    Mutant(
        "memory_draft_runs_into_the_separator", "plookup/index/memory.py",
        "draft, agree = draft[: cut[0]], agree[: cut[0]]",
        "draft, agree = draft[: cut[0] + 1], agree[: cut[0] + 1]",
        "unit",
        "a draft from the cross-request memory keeps the separator after its document (no token of any vocabulary)",
        first="tests/unit/test_memory.py",
    ),
    Mutant(
        "branch_rows_forget_the_pending_token", "plookup/verify/rows.py",
        "rows += [(int(token), n_past + len(shared) + j, (seq,)) for j, token in enumerate(tokens)]",
        "rows += [(int(token), n_past + branch.at + j, (seq,)) for j, token in enumerate(tokens)]",
        "engine",
        "a two-branch draft's tokens after the fork placed one position early (the pending token not counted)",
        first="tests/model/test_branches_greedy.py",
    ),
    Mutant(
        "drafter_misses_each_steps_last_token", "plookup/engine/verdicts.py",
        "gen.drafter.cover(end)",
        "gen.drafter.cover(end - 1)",
        "engine",
        "the drafter's index lags each step's last emitted token (the correction, or the first token)",
        first="tests/model/test_invariants.py",
    ),
    Mutant(
        "whole_cached_prompt_not_decoded_again", "plookup/engine/admission.py",
        "reuse = cached - 1 if cached == len(prompt) else cached",
        "reuse = cached",
        "engine",
        "a prompt cached whole keeps its last token's cell too, whose row is gone",
        first="tests/model/test_slot_cache.py",
    ),
]


# -- the copy


SOURCE = ROOT  # the tree the copies are made from: the checkout, or HEAD's files (--head)


def repository_files() -> list[str]:
    if SOURCE != ROOT:
        return sorted(str(f.relative_to(SOURCE)) for f in SOURCE.rglob("*") if f.is_file() and not f.is_symlink())
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode()
    return sorted({f for f in listed.split("\0") if f and (ROOT / f).is_file()})  # (a deleted file is still listed)


def extract_head(into: Path) -> Path:
    """HEAD's files in `into` (git archive): a checkout others are editing copied as last committed.
    A file the checkout holds unchanged takes its time stamp, which numba's cache compares."""
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    for f in into.rglob("*.py"):
        same = ROOT / f.relative_to(into)
        if same.is_file() and same.read_bytes() == f.read_bytes():
            stat = same.stat()
            os.utime(f, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    return into


def numba_caches(tree: Path) -> dict[str, Path]:
    """plookup's numba kernels compiled in `tree` (relative path -> file): a copy seeded with them
    loads them in place of compiling (numba checks a source's content, not its path)."""
    return {str(p.relative_to(tree)): p for p in (tree / "plookup").rglob("__pycache__/*.nb[ic]")}


def copy_repository(files: list[str], caches: dict[str, Path], into: Path) -> None:
    for name in files:
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(SOURCE / name, target, follow_symlinks=False)
    for name, source in caches.items():
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, into / name)


def check_source(mutant: Mutant) -> str:
    """The mutated text of the mutant's file; stops the run unless `find` is there exactly once."""
    source = (SOURCE / mutant.path).read_text()
    found = source.count(mutant.find)
    if found != 1:
        sys.exit(f"mutant {mutant.name}: {mutant.find!r} found {found} times in {mutant.path}, not once")
    return source.replace(mutant.find, mutant.replace)


# -- running tests in a copy


def environment(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(copy), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PLOOKUP_STRICT_BUDGETS", None)  # a test over its time budget is no catch
    return env


def check_import(copy: Path, env: dict[str, str]) -> None:
    """The copy's plookup is the one imported (not the checkout's editable install)."""
    found = subprocess.run([sys.executable, "-c", "import plookup; print(plookup.__file__)"], cwd=copy, env=env,
                           check=True, capture_output=True, text=True).stdout.strip()
    if not Path(found).resolve().is_relative_to(copy.resolve()):
        sys.exit(f"the copy at {copy} imports plookup from {found}: the mutants would test the checkout")


def how(kind: str) -> str:
    return "assertion" if kind == "AssertionError" else kind or "error"


def run_tests(copy: Path, runs: list[tuple[str, ...]]) -> tuple[str, list[str], str]:
    """pytest `runs` (arguments each) in turn, up to the first that does not pass: its outcome."""
    env = environment(copy)
    check_import(copy, env)
    for tests in runs:
        outcome, failed, tail = run_pytest(copy, env, tests)
        if outcome != "passed":
            break
    return outcome, failed, tail


def run_pytest(copy: Path, env: dict[str, str], tests: tuple[str, ...]) -> tuple[str, list[str], str]:
    """(outcome, the failed tests, output's tail): "passed", "failed", "error" (pytest could not run
    them: exit status 2 to 5) or "timed out". A failed test as "node id (how)": how it failed, an
    assertion on what the user sees, or the exception a user would get instead (its type)."""
    command = [sys.executable, "-m", "pytest", *tests, "-x", "-q", "-p", "no:cacheprovider"]
    try:
        done = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        return "timed out", [], str(e.stdout or "")[-2000:]
    output = done.stdout + done.stderr
    # (with -x, one failure: its traceback ends in "file:line: ExceptionType", its summary in its id)
    kinds = re.findall(r"^\S+:\d+: (\w+)$", output, flags=re.M)
    failed = [f"{test} ({how(kinds[-1] if kinds else '')})"
              for test in re.findall(r"^(?:FAILED|ERROR) (\S+)", output, flags=re.M)]
    outcome = {0: "passed", 1: "failed"}.get(done.returncode, "error")
    return outcome, failed, output[-3000:]


def dry_run(tests: tuple[str, ...]) -> int:
    """A copy, the plookup it imports, and the tests it collects; no mutant, no test run."""
    with tempfile.TemporaryDirectory(prefix="plookup-mutant-") as folder:
        copy = Path(folder)
        copy_repository(repository_files(), numba_caches(ROOT), copy)
        env = environment(copy)
        check_import(copy, env)
        print(f"copy: {copy}\nPYTHONPATH={env['PYTHONPATH']}")
        probe = ("import plookup, plookup.engine.admission as a, plookup.verify.accept as b; "
                 "print('plookup:', plookup.__file__); print('engine:', a.__file__); print('accept:', b.__file__)")
        subprocess.run([sys.executable, "-c", probe], cwd=copy, env=env, check=True)
        collect = [sys.executable, "-m", "pytest", *tests, "--collect-only", "-q", "-p", "no:cacheprovider"]
        return subprocess.run(collect, cwd=copy, env=env).returncode


class Copies:
    """A fresh copy of the repository per run, seeded with the compiled kernels found so far."""

    def __init__(self):
        self.files = repository_files()
        self.caches = numba_caches(ROOT)
        self.stash = Path(tempfile.mkdtemp(prefix="plookup-mutants-kernels-"))

    def run(self, runs: list[tuple[str, ...]], path: str | None = None, text: str | None = None):
        with tempfile.TemporaryDirectory(prefix="plookup-mutant-") as folder:
            copy = Path(folder)
            copy_repository(self.files, self.caches, copy)
            if path is not None:
                (copy / path).write_text(text)
            result = run_tests(copy, runs)
            self._keep_kernels(copy)
            return result

    def _keep_kernels(self, copy: Path) -> None:
        for name, source in numba_caches(copy).items():
            if name not in self.caches:
                kept = self.stash / name
                kept.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, kept)
                self.caches[name] = kept

    def close(self) -> None:
        shutil.rmtree(self.stash, ignore_errors=True)


# -- the report


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        names = [line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    import llama_cpp

    return (f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} cores; Python "
            f"{platform.python_version()}, llama_cpp {llama_cpp.__version__}")


def revision() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no") and SOURCE == ROOT
    return git("rev-parse", "--short", "HEAD") + (" with uncommitted changes (the copies hold them)" if dirty else "")


def short(test: str) -> str:
    return test.removeprefix("tests/")


def report(command: str, baselines: dict[str, float], rows: list[tuple[Mutant, str, list[str], float]],
           total_s: float) -> str:
    caught = sum(outcome == "caught" for _, outcome, _, _ in rows)
    width = max(len(m.name) for m, _, _, _ in rows)
    lines = [
        "# tests/mutants.py: planted bugs and the tests that caught them",
        "",
        f"command:  {command}",
        f"date:     {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
        f"machine:  {machine()}",
        f"source:   {revision()}",
        "legs:     each mutant runs against its leg's tests, all of them (-x: to the first failure);",
        *(f"          {leg}: pytest {' '.join(LEGS[leg])}; passes on an unmutated copy ({s:.0f} s)"
          for leg, s in baselines.items()),
        "",
        "caught by: the first test of the leg that failed, and how: an assertion on what the user",
        "sees, or the error the request raised",
        "",
        f"{'mutant':<{width}}  {'leg':<6}  {'outcome':<9}  {'s':>4}  caught by",
    ]
    for mutant, outcome, failed, seconds in rows:
        lines.append(f"{mutant.name:<{width}}  {mutant.leg:<6}  {outcome:<9}  {seconds:4.0f}  "
                     f"{', '.join(map(short, failed)) or '-'}")
    lines += ["", f"{caught} of {len(rows)} caught, in {total_s / 60:.1f} minutes", "", "what each plants:"]
    lines += [f"  {m.name} ({m.path}): {m.what}" for m, _, _, _ in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="list the mutants and their tests")
    parser.add_argument("--only", action="append", metavar="NAME", help="run this mutant only (repeatable)")
    parser.add_argument("--dry-run", action="store_true",
                        help="no mutant: show which plookup a copy imports and which tests it collects")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the end of each mutant's test output")
    parser.add_argument("--head", action="store_true",
                        help="copy HEAD's files, not the checkout's (where others' edits in progress fail a leg)")
    args = parser.parse_args(argv)
    if args.head:
        global SOURCE
        SOURCE = extract_head(Path(tempfile.mkdtemp(prefix="plookup-mutants-head-")))
        atexit.register(shutil.rmtree, SOURCE, True)
    names = {m.name for m in MUTANTS}
    if args.list:
        for m in MUTANTS:
            print(f"{m.name}\n  {m.path}: {m.what}\n  - {m.find}\n  + {m.replace}")
            print("".join(f"  pytest {' '.join(run)}\n" for run in m.runs))
        return 0
    unknown = sorted(set(args.only or ()) - names)
    if unknown:
        parser.error(f"unknown mutant {', '.join(unknown)}; known: {', '.join(sorted(names))}")
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    mutated = {m.name: check_source(m) for m in chosen}  # every text found once, before any run
    legs = list(dict.fromkeys(m.leg for m in chosen))
    if args.dry_run:
        return max(dry_run(LEGS[leg]) for leg in legs)

    began = time.perf_counter()
    copies = Copies()
    try:
        baselines = {}
        for leg in legs:
            start = time.perf_counter()
            outcome, failed, tail = copies.run([LEGS[leg]])
            baselines[leg] = time.perf_counter() - start
            print(f"baseline {leg}: {outcome} in {baselines[leg]:.0f} s", flush=True)
            if outcome != "passed":
                print(tail, file=sys.stderr)
                print(f"the {leg} leg fails without a mutant: fix it first", file=sys.stderr)
                return 2
        rows = []
        for mutant in chosen:
            start = time.perf_counter()
            outcome, failed, tail = copies.run(mutant.runs, mutant.path, mutated[mutant.name])
            seconds = time.perf_counter() - start
            verdict = {"failed": "caught", "passed": "SURVIVED"}.get(outcome, outcome.upper())
            rows.append((mutant, "caught" if verdict == "caught" else verdict, failed, seconds))
            print(f"{mutant.name:<50} {verdict:<9} {seconds:5.0f} s  {', '.join(map(short, failed))}", flush=True)
            if verdict != "caught" or args.verbose:
                print(tail, file=sys.stderr if verdict != "caught" else sys.stdout)
    finally:
        copies.close()
    total_s = time.perf_counter() - began
    text = report(" ".join(["python", "tests/mutants.py", *argv]), baselines, rows, total_s)
    if not args.only:
        RESULT.write_text(text)
        print(f"written to {RESULT.relative_to(ROOT)}")
    bad = [m.name for m, outcome, _, _ in rows if outcome != "caught"]
    missed = f"; not caught: {', '.join(bad)}" if bad else ""
    print(f"{len(rows) - len(bad)} of {len(rows)} caught in {total_s / 60:.1f} minutes{missed}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
