"""Planted bugs, and the tests that must catch each: a mutation check of the engine's invariants.

Each mutant replaces one exact piece of plookup's source (found exactly once, or the run stops) in
a copy of the repository (its tracked files and the untracked ones git does not ignore), then runs
the tests named for it against that copy: the copy first on the import path, its own tests, its
own conftest. A mutant is caught when one of its tests fails; one whose tests all pass survived,
and the run exits non-zero. Before the mutants, the same tests run on an unmutated copy and must
pass (else a "catch" would mean nothing). The remedy for a survivor is a behaviour test that
catches it (tests/model/test_invariants.py), never a weaker mutant.

    python tests/mutants.py              # every mutant; writes docs/mutants.txt
    python tests/mutants.py --list       # what each plants, and its tests
    python tests/mutants.py --only NAME  # one (repeatable); docs/mutants.txt is left as it is
    python tests/mutants.py --dry-run    # no mutant: which plookup a copy imports, which tests it collects
    python tests/mutants.py -v           # each mutant's test output too (how it was caught)

Each copy is seeded with the numba kernels compiled so far (numba checks a source's content, not
its path), so that no mutant compiles them again. Not part of CI: each mutant loads models (a
minute and a half in all on 2 cores). On a shared machine, wrap it in the lock the model tests take:
``flock /tmp/plookup-cpu.lock python tests/mutants.py``.
"""

from __future__ import annotations

import argparse
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
INVARIANTS = "tests/model/test_invariants.py"


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the repository's root
    find: str  # the exact source text, present exactly once
    replace: str
    tests: tuple[str, ...]  # pytest node ids, relative to the root
    what: str  # the bug, in a line


def invariant(test: str) -> str:
    return f"{INVARIANTS}::{test}"


PREDICTION = invariant("test_a_prediction_drafts_from_the_first_step_where_the_prompt_ends_inside_it")
OWN_TEXT = invariant("test_each_slot_drafts_from_its_own_text")
NO_STALE_CELL = invariant("test_a_step_with_rejected_draft_tokens_leaves_no_cell_behind")
LOGPROBS = invariant("test_logprobs_are_plain_decodings_token_by_token")
PREFIX = invariant("test_a_prompt_reuses_the_cache_up_to_its_first_different_token")
COST = invariant("test_no_draft_where_a_verify_row_costs_a_whole_decode")
FILLER = invariant("test_an_idle_slots_throwaway_row_leaves_its_cells")
BRANCHES = "tests/model/test_branches_greedy.py::test_two_branches_verified_in_one_decode_and_greedy_unchanged[smollm2]"

MUTANTS = [
    Mutant(
        "prediction_never_consulted", "plookup/draft/index_drafter.py",
        "return [] if self._prediction is None else [(PREDICTION, self._prediction)]",
        "return []",
        (PREDICTION,),
        "the request's prediction is never matched against its history: nothing is drafted from it",
    ),
    Mutant(
        "slot_offered_slot_0s_draft", "plookup/engine/step.py",
        "offers = [timed(gen, gen.drafter.offer, limit) for gen, limit in zip(decoding, limits)]",
        "offers = [timed(gen, decoding[0].drafter.offer, limit) for gen, limit in zip(decoding, limits)]",
        (OWN_TEXT,),
        "with several slots decoding, every slot verifies the first one's draft",
    ),
    Mutant(
        "slots_share_one_drafter", "plookup/engine/admission.py",
        "gen.drafter = self._drafter(slot)",
        "gen.drafter = self._drafter(self.slots[0])",
        (OWN_TEXT,),
        "every request drafts with the model's drafter (slot 0's): one index for all slots' texts",
    ),
    Mutant(
        "roll_back_keeps_a_stale_cell", "plookup/engine/verdicts.py",
        "rolled_back &= context.roll_back(slot.seq, keep)",
        "rolled_back &= context.roll_back(slot.seq, keep + 1)",
        (NO_STALE_CELL,),
        "a step's first rejected draft token stays in the cache",
    ),
    Mutant(
        "logprobs_one_row_late", "plookup/engine/verdicts.py",
        "gen.call.logprobs.read(self.context.logits_row(start + row), token)",
        "gen.call.logprobs.read(self.context.logits_row(start + row + 1), token)",
        (LOGPROBS,),
        "each token's logprobs from the row after its own",
    ),
    Mutant(
        "logprobs_one_row_late_within_the_step", "plookup/engine/verdicts.py",
        "gen.call.logprobs.read(self.context.logits_row(start + row), token)",
        "gen.call.logprobs.read(self.context.logits_row(start + min(row + 1, verdict.rows[-1])), token)",
        (LOGPROBS,),
        "the same, but never past a step's last row read (no read fails: only the values show it)",
    ),
    Mutant(
        "samples_the_row_before", "plookup/engine/verdicts.py",
        "token = context.sample(sampler, start + row)",
        "token = context.sample(sampler, start + max(row - 1, 0))",
        (PREDICTION,),
        "each draft position's token sampled from the previous position's row",
    ),
    Mutant(
        "accepts_one_past_the_first_disagreement", "plookup/verify/accept.py",
        "if i == len(path) or token != path[i]:",
        "if i == len(path) or (i > 0 and tokens[-2] != path[i - 1]):",
        (LOGPROBS,),
        "the walk stops one row after the first disagreement: a token from a row after a rejected draft token",
    ),
    Mutant(
        "drafts_never_cut_by_the_cost_curve", "plookup/draft/policy.py",
        "return int(best_draft(match_length, agree, hits, trials, self.cost, MIN_PREFIX_PROBABILITY)[0])",
        "return len(agree)",
        (COST,),
        "a lone slot drafts the index's whole continuation, whatever a verify row costs",
    ),
    Mutant(
        "several_slots_drafts_never_cut_by_the_cost_curve", "plookup/engine/step.py",
        "lengths = size_streams(chances, cost, n_batch, [gen.slot.seq for gen in decoding], fixed)",
        "lengths = [len(p) for p in chances]",
        (COST,),
        "slots decoding together each draft all their likely tokens, whatever the step costs",
    ),
    Mutant(
        "reuses_one_cached_token_too_many", "plookup/engine/slot.py",
        "return int(differ[0]) if differ.size else n",
        "return int(differ[0]) + 1 if differ.size else n",
        (PREFIX,),
        "a new prompt keeps the cached cell of its first different token",
    ),
    Mutant(
        "whole_cached_prompt_not_decoded_again", "plookup/engine/admission.py",
        "reuse = cached - 1 if cached == len(prompt) else cached",
        "reuse = cached",
        (PREFIX,),
        "a prompt cached whole keeps its last token's cell too, whose row is gone",
    ),
    Mutant(
        "branch_fork_copied_one_cell_late", "plookup/engine/verdicts.py",
        "fork = n_past + 1 + branch.at",
        "fork = n_past + 2 + branch.at",
        (BRANCHES,),
        "where the target took a draft's second branch, the cell where the branches part stays the draft's",
    ),
    Mutant(
        "filler_row_left_in_an_idle_slot", "plookup/engine/step.py",
        "self.context.roll_back(filler.owner.seq, filler.owner.n)",
        "self.context.roll_back(filler.owner.seq, filler.owner.n + 1)",
        (FILLER,),
        "an idle slot's throwaway row (a step's filler) stays in its cells",
    ),
    Mutant(
        "drafter_misses_each_steps_last_token", "plookup/engine/verdicts.py",
        "gen.drafter.cover(end)",
        "gen.drafter.cover(end - 1)",
        (PREDICTION,),
        "the drafter's index lags each step's last emitted token (the correction, or the first token)",
    ),
]


# -- the copy


def repository_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode()
    return sorted({f for f in listed.split("\0") if f and (ROOT / f).is_file()})  # (a deleted file is still listed)


def numba_caches(tree: Path) -> dict[str, Path]:
    """plookup's numba kernels compiled in `tree` (relative path -> file): a copy seeded with them
    loads them in place of compiling (numba checks a source's content, not its path)."""
    return {str(p.relative_to(tree)): p for p in (tree / "plookup").rglob("__pycache__/*.nb[ic]")}


def copy_repository(files: list[str], caches: dict[str, Path], into: Path) -> None:
    for name in files:
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target, follow_symlinks=False)
    for name, source in caches.items():
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, into / name)


def check_source(mutant: Mutant) -> str:
    """The mutated text of the mutant's file; stops the run unless `find` is there exactly once."""
    source = (ROOT / mutant.path).read_text()
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


def run_tests(copy: Path, tests: tuple[str, ...]) -> tuple[str, list[str], str]:
    """(outcome, the failed tests, output's tail): "passed", "failed", "error" (pytest could not run
    them: exit status 2 to 5) or "timed out". A failed test as "node id (how)": how it failed, an
    assertion on what the user sees, or the exception a user would get instead (its type)."""
    env = environment(copy)
    check_import(copy, env)
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

    def run(self, tests: tuple[str, ...], path: str | None = None, text: str | None = None):
        with tempfile.TemporaryDirectory(prefix="plookup-mutant-") as folder:
            copy = Path(folder)
            copy_repository(self.files, self.caches, copy)
            if path is not None:
                (copy / path).write_text(text)
            result = run_tests(copy, tests)
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

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + (" with uncommitted changes (the copies hold them)" if dirty else "")


def short(test: str) -> str:
    return test.removeprefix(INVARIANTS + "::") if test.startswith(INVARIANTS) else test


def report(command: str, baseline_s: float, rows: list[tuple[Mutant, str, list[str], float]], total_s: float) -> str:
    caught = sum(outcome == "caught" for _, outcome, _, _ in rows)
    width = max(len(m.name) for m, _, _, _ in rows)
    lines = [
        "# tests/mutants.py: planted bugs and the tests that caught them",
        "",
        f"command:  {command}",
        f"date:     {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
        f"machine:  {machine()}",
        f"source:   {revision()}",
        f"baseline: the named tests pass on an unmutated copy ({baseline_s:.0f} s)",
        "",
        "caught by: the first test of the mutant's that failed (tests/model/test_invariants.py:: unless",
        "named in full), and how: an assertion on what the user sees, or the error the request raised",
        "",
        f"{'mutant':<{width}}  {'outcome':<9}  {'s':>4}  caught by",
    ]
    for mutant, outcome, failed, seconds in rows:
        lines.append(f"{mutant.name:<{width}}  {outcome:<9}  {seconds:4.0f}  {', '.join(map(short, failed)) or '-'}")
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
    args = parser.parse_args(argv)
    names = {m.name for m in MUTANTS}
    if args.list:
        for m in MUTANTS:
            print(f"{m.name}\n  {m.path}: {m.what}\n  - {m.find}\n  + {m.replace}")
            print("".join(f"  test: {t}\n" for t in m.tests))
        return 0
    unknown = sorted(set(args.only or ()) - names)
    if unknown:
        parser.error(f"unknown mutant {', '.join(unknown)}; known: {', '.join(sorted(names))}")
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    mutated = {m.name: check_source(m) for m in chosen}  # every text found once, before any run
    tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
    if args.dry_run:
        return dry_run(tests)

    began = time.perf_counter()
    copies = Copies()
    try:
        outcome, failed, tail = copies.run(tests)
        baseline_s = time.perf_counter() - began
        print(f"baseline  {outcome} in {baseline_s:.0f} s", flush=True)
        if outcome != "passed":
            print(tail, file=sys.stderr)
            print("the tests fail without a mutant: fix them first", file=sys.stderr)
            return 2
        rows = []
        for mutant in chosen:
            start = time.perf_counter()
            outcome, failed, tail = copies.run(mutant.tests, mutant.path, mutated[mutant.name])
            seconds = time.perf_counter() - start
            verdict = {"failed": "caught", "passed": "SURVIVED"}.get(outcome, outcome.upper())
            rows.append((mutant, "caught" if verdict == "caught" else verdict, failed, seconds))
            print(f"{mutant.name:<50} {verdict:<9} {seconds:5.0f} s  {', '.join(map(short, failed))}", flush=True)
            if verdict != "caught" or args.verbose:
                print(tail, file=sys.stderr if verdict != "caught" else sys.stdout)
    finally:
        copies.close()
    total_s = time.perf_counter() - began
    text = report(" ".join(["python", "tests/mutants.py", *argv]), baseline_s, rows, total_s)
    if not args.only:
        RESULT.write_text(text)
        print(f"written to {RESULT.relative_to(ROOT)}")
    bad = [m.name for m, outcome, _, _ in rows if outcome != "caught"]
    missed = f"; not caught: {', '.join(bad)}" if bad else ""
    print(f"{len(rows) - len(bad)} of {len(rows)} caught in {total_s / 60:.1f} minutes{missed}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
