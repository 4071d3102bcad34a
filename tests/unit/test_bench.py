"""`plookup bench`: its arithmetic with fakes (the tiny runs on the real model:
tests/model/test_bench_real_model.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from plookup.app import cli
from plookup.app.bench.measure import (
    divergence,
    geometric_mean,
    pairwise_speedups,
    pool_positions,
    run_interleaved,
    speedup,
    summarize,
    system_overview,
)
from plookup.app.bench.replay import (
    accepted_length,
    best_lengths,
    cheapest_length,
    load_recorded,
    modelled_speedup,
    replay,
    score_drafts,
    step_cost,
)
from plookup.app.bench.report import overview_table
from plookup.app.bench.workloads import bench_workloads, whole_file_workloads
from plookup.draft.values import Branch, Candidate
from plookup.measure.costs import oracle_speedup
from plookup.native.draft_length import batch_cost

from support.oracle import brute_force_least_cost


def record(tokens, total_s, ttft_s=0.1, drafted=(0,), accepted=(0,), passes=None, rss=100.0):
    """A run record as plookup.bench_systems makes them."""
    drafted_at, accepted_at = list(drafted), list(accepted)
    return dict(
        tokens=list(tokens), prefill_s=ttft_s / 2, ttft_s=ttft_s, total_s=total_s, peak_rss_mib=rss,
        drafted=sum(drafted_at), accepted=sum(accepted_at), generated=len(tokens),
        forward_passes=len(tokens) if passes is None else passes, draft_seconds=0.001,
        drafted_per_position=drafted_at, accepted_per_position=accepted_at,
    )


# -- identity with plain greedy decoding


def test_identical_output_has_no_divergence():
    assert divergence([1, 2, 3], [5.0, 0.1, 2.0], [1, 2, 3]) is None


def test_divergence_reports_position_and_plain_gap_there():
    assert divergence([1, 2, 3], [5.0, 0.1, 2.0], [1, 9, 3]) == {"position": 1, "gap": 0.1}


def test_early_stop_diverges_where_the_shorter_output_ends():
    assert divergence([1, 2, 3], [5.0, 0.1, 2.0], [1, 2]) == {"position": 2, "gap": 2.0}
    assert divergence([1, 2], [5.0, 0.1], [1, 2, 3]) == {"position": 2, "gap": None}


# -- medians and ratios


def test_summary_takes_medians_of_timings_and_averages_counters():
    reference, gaps = [1, 2, 3, 4, 5], [1.0] * 5
    runs = [
        record([1, 2, 3, 4, 5], total_s=3.0, drafted=(2, 1), accepted=(2, 1), passes=3),
        record([1, 2, 3, 4, 5], total_s=1.0, drafted=(2, 2), accepted=(2, 0), passes=3),
        record([1, 2, 3, 4, 5], total_s=2.0, drafted=(2,), accepted=(1,), passes=4),
    ]
    s = summarize(runs, reference, gaps)
    assert s["total_s"] == 2.0 and s["ttft_s"] == 0.1
    assert s["decode_tps"] == pytest.approx(4 / (2.0 - 0.1))  # tokens after the first / time after it
    assert s["e2e_tps"] == pytest.approx(5 / 2.0)
    assert s["drafted"] == pytest.approx(9 / 3) and s["accepted"] == pytest.approx(6 / 3)
    assert s["mean_accepted"] == pytest.approx(6 / 6)  # accepted tokens per step that drafted
    assert s["passes_per_token"] == pytest.approx(10 / 15)
    assert s["drafted_per_position"] == [6, 3] and s["accepted_per_position"] == [5, 1]
    assert s["identical"] and s["divergence"] is None


def test_summary_flags_a_run_that_diverged():
    runs = [record([1, 2, 3], 1.0), record([1, 7, 3], 1.0)]
    s = summarize(runs, [1, 2, 3], [3.0, 0.2, 3.0])
    assert not s["identical"] and s["divergence"] == {"position": 1, "gap": 0.2}


def test_unknown_forward_passes_stay_unknown():
    s = summarize([record([1, 2], 1.0, passes=None) | {"forward_passes": None}], [1, 2], [1.0, 1.0])
    assert s["passes_per_token"] is None


def fake_summary():
    """Two workloads; fast is 2x plain end to end on copy (3x in decoding) and 1x on free."""

    def row(e2e, decode):
        return dict(e2e_tps=e2e, decode_tps=decode, identical=True)

    return {
        "plain": {"edit": row(25.0, 50.0), "ask": row(40.0, 50.0)},
        "fast": {"edit": row(50.0, 150.0), "ask": row(40.0, 50.0)},
    }


def test_speedups_are_rate_ratios():
    s = fake_summary()
    assert speedup(s, "fast", "edit") == 2.0
    assert speedup(s, "fast", "edit", "decode_tps") == 3.0
    assert speedup(s, "fast", "ask") == 1.0


def test_geometric_mean_and_pairwise_ratios():
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    pairs = pairwise_speedups(fake_summary(), ["edit", "ask"])
    assert pairs["fast"]["plain"] == pytest.approx(2**0.5)
    assert pairs["plain"]["fast"] == pytest.approx(2**-0.5)
    assert pairs["fast"]["fast"] == 1.0


def test_overview_splits_copy_from_free_and_divides_by_the_oracle():
    overview = system_overview(fake_summary(), {"edit": "copy", "ask": "free"}, oracle=4.0)
    assert overview["fast"]["copy_speedup"] == 2.0 and overview["fast"]["free_speedup"] == 1.0
    assert overview["fast"]["oracle_fraction"] == pytest.approx(3 / 4)  # the decode speedup against the ceiling
    assert overview["plain"]["oracle_fraction"] == 0.25
    assert overview["fast"]["identical"] == 2


def test_overview_of_whole_file_edits_reports_passes_per_token():
    summary = {
        "plain": {"file": dict(e2e_tps=20.0, decode_tps=25.0, identical=True, passes_per_token=1.0)},
        "fast": {"file": dict(e2e_tps=40.0, decode_tps=75.0, identical=False, passes_per_token=0.08)},
    }
    overview = system_overview(summary, {"file": "whole-file"}, oracle=2.5)
    assert overview["fast"]["whole-file_decode_speedup"] == pytest.approx(3.0)
    assert overview["fast"]["oracle_fraction"] == pytest.approx(1.2)
    assert overview["fast"]["whole-file_passes_per_token"] == 0.08 and "copy_speedup" not in overview["fast"]
    table = overview_table(overview, 1)
    assert "whole-file passes/tok" in table.splitlines()[0] and "0.080" in table


def test_whole_file_edits_rename_a_function_the_module_uses_again():
    loads = whole_file_workloads(seed=0, count=2)
    assert [w.kind for w in loads] == ["whole-file", "whole-file"] and loads == whole_file_workloads(seed=0, count=2)
    for load in loads:
        old = load.name.rsplit(":", 1)[1]
        code = load.messages[-1]["content"]
        assert 200 <= code.count("\n") <= 420 and code.count(old) >= 3 and f"`{old}_renamed`" in code


def test_positions_pool_over_unequal_lengths():
    assert pool_positions([record([1], 1, drafted=(3, 2), accepted=(2, 1)), record([1], 1, drafted=(1,), accepted=(1,))]) == ([4, 2], [3, 1])


def test_oracle_speedup_is_tokens_per_step_over_step_cost():
    # A step of n tokens yields n tokens when the drafter is always right: rate n / cost(n).
    assert oracle_speedup(np.array([1.0, 1.5, 2.5, 4.5])) == (2, pytest.approx(2 / 1.5))
    assert oracle_speedup(np.array([1.0, 3.0])) == (1, 1.0)


# -- interleaving


class FakeSystem:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def run(self, prompt, max_tokens):
        self.log.append((self.name, prompt[0]))
        return record(prompt[:max_tokens], 1.0)


def test_systems_take_turns_on_each_workload_every_repeat():
    log = []
    systems = [FakeSystem(n, log) for n in "ABC"]
    runs = run_interleaved(systems, {"w1": [1, 5], "w2": [2, 6]}, max_tokens=1, repeats=2)
    one_repeat = [("A", 1), ("B", 1), ("C", 1), ("A", 2), ("B", 2), ("C", 2)]
    assert log == one_repeat * 2
    assert [r["tokens"] for r in runs["B"]["w2"]] == [[2], [2]]


# -- workloads


def test_bench_workloads_are_deterministic_for_a_seed():
    asked, first_answer = [], "def capwords(s, sep=None):\n    return s"

    def answer(messages):
        asked.append(messages)
        return first_answer

    first, again = bench_workloads(answer, seed=7), bench_workloads(answer, seed=7)
    assert first == again
    assert bench_workloads(answer, seed=8) != first  # the typos and edits follow the seed
    kinds = [w.kind for w in first]
    assert kinds.count("copy") >= 5 and kinds.count("free") >= 2
    multi = [w for w in first if w.name.startswith("multiturn:")]
    assert len(multi) == 1 and multi[0].messages[1]["content"] == first_answer
    assert multi[0].messages[0] == asked[0][0]  # the first turn is what was answered


def test_quick_workloads_need_no_model():
    loads = bench_workloads(lambda messages: pytest.fail("a quick run has no multi-turn case"), quick=True)
    assert {w.kind for w in loads} == {"copy", "free"} and len(loads) == 3


# -- replay


class ScriptedDrafter:
    """Proposes the drafts it is given, one per step, and records what the replay told it."""

    def __init__(self, drafts):
        self.drafts = [np.array(d, dtype=np.int32) for d in drafts]
        self.calls = []

    def sync(self, tokens):
        self.calls.append(("sync", list(tokens)))

    def candidate(self):  # the next unsized draft
        tokens = self.drafts.pop(0)
        return Candidate(tokens, np.ones(len(tokens)), 2, "request")

    def propose(self):
        candidate = self.candidate()
        return candidate.draft(len(candidate.tokens))

    def observe(self, draft, accepted):
        self.calls.append(("observe", len(draft), accepted))

    def extend(self, tokens):
        self.calls.append(("extend", list(tokens)))


def test_replay_accepts_the_matching_prefix_and_advances_past_the_models_token():
    drafter = ScriptedDrafter([[4, 5, 9], [], [8, 1]])
    stats, lengths = replay(drafter, [1, 2, 3], [4, 5, 6, 7, 8])
    assert drafter.calls == [
        ("sync", [1, 2, 3]),
        ("observe", 3, 2), ("extend", [4, 5, 6]),  # 2 accepted + the model's 6
        ("observe", 0, 0), ("extend", [7]),
        ("observe", 2, 1), ("extend", [8]),  # the output ends after the accepted 8
    ]
    assert (stats.drafted, stats.accepted, stats.forward_passes, stats.generated) == (5, 3, 3, 5)
    assert stats.drafted_per_position == [2, 2, 1] and stats.accepted_per_position == [2, 1, 0]
    assert lengths == [3, 0, 2]
    # Steps verifying 4, 1 and 3 tokens cost 2.5 + 1 + 2 single-token decodes for 5 tokens.
    assert modelled_speedup(lengths, 5, np.array([1.0, 1.5, 2.0, 2.5])) == pytest.approx(5 / 5.5)


class BranchingDrafter(ScriptedDrafter):
    """Proposes [4, 5, 9] with the fork [4, 6, 7] (the branch [6, 7] at position 1), then nothing."""

    def propose(self):
        tokens = self.drafts.pop(0)
        if not len(tokens):
            return Candidate(tokens, np.ones(0), 0, "request").draft(0)
        return Candidate(tokens, np.ones(3), 2, "request").draft(3, Branch(1, np.array([6, 7], dtype=np.int32)))


def test_replay_takes_a_branch_where_the_output_does_and_costs_both_branches():
    drafter = BranchingDrafter([[4, 5, 9], [], []])
    stats, lengths = replay(drafter, [1, 2, 3], [4, 6, 7, 8, 1])
    assert drafter.calls[1:3] == [("observe", 3, 3), ("extend", [4, 6, 7, 8])]  # the fork, all of it accepted
    assert lengths == [5, 0]  # one batch of the pending token, 4 5 9 and the fork's 6 7
    assert (stats.accepted, stats.generated) == (3, 5)
    _, lengths = replay(BranchingDrafter([[4, 5, 9], [], []]), [1, 2, 3], [4, 5, 8, 8, 1])
    assert lengths == [5, 0, 0]  # 4 5 accepted along the draft; the fork was verified all the same


class CandidatesByPosition(ScriptedDrafter):
    """Offers the candidate given for each position of the output (the oracle asks at every one)."""

    def __init__(self, candidates):
        super().__init__([])
        self.candidates, self.position = candidates, 0

    def candidate(self):
        tokens = np.array(self.candidates.get(self.position, []), dtype=np.int32)
        return Candidate(tokens, np.ones(len(tokens)), 2, "request")

    def extend(self, tokens):
        self.position += len(tokens)


class PolicyOfWholeCandidates(CandidatesByPosition):
    """A length policy that drafts every candidate whole."""

    def propose(self):
        candidate = self.candidate()
        return candidate.draft(len(candidate.tokens))


def test_the_oracle_finds_the_cheapest_draft_lengths():
    output = [4, 5, 6, 7, 8]
    candidates = {0: [4, 5, 9], 1: [5, 6, 7], 3: [0], 4: [8, 1]}
    cost = np.array([1.0, 1.5, 2.0, 2.5])
    lengths = best_lengths(CandidatesByPosition(candidates), [1, 2, 3], output, cost)
    # Drafting all that is accepted at 0 ([4, 5]) costs 2 + 1 + 1.5; declining it and drafting
    # [5, 6, 7] at 1 costs 1 + 2.5, and emits 5 6 7 8 in one step.
    assert lengths == [0, 3]
    assert modelled_speedup(lengths, 5, cost) == pytest.approx(5 / 3.5)
    # A curve with a dip: 3 draft tokens verify cheaper than 2, so [4, 5] is padded with the rejected 9.
    dip = np.array([1.0, 1.5, 2.5, 2.0])
    assert best_lengths(CandidatesByPosition({0: [4, 5, 9]}), [1, 2, 3], [4, 5, 6], dip) == [3]
    assert cheapest_length(1, 1, dip) == 1 and cheapest_length(0, 3, dip) == 0  # nothing to pad; ties: shortest
    assert cheapest_length(2, 9, dip) == 3  # past the curve's end batches cost more (extrapolated)


def test_a_batch_past_the_measured_curve_costs_what_the_policy_assumes():
    # A curve of 1..16 rows and a 16-token draft: a 17-row batch, never measured. The replay costs
    # it as the draft-length policy does (native.draft_length.batch_cost), linearly extrapolated.
    cost = np.linspace(1.0, 4.0, 16)  # 0.2 a row
    assert step_cost(15, cost) == 4.0 and step_cost(16, cost) == pytest.approx(4.2) == batch_cost(17, cost)
    assert step_cost(18, cost) == pytest.approx(4.6)
    assert modelled_speedup([16], 17, cost) == pytest.approx(17 / 4.2)


def test_the_oracle_is_the_least_cost_and_bounds_the_policy():
    rng = np.random.default_rng(0)
    for _ in range(200):
        output = rng.integers(0, 3, size=int(rng.integers(1, 12))).tolist()
        candidates = {p: (output[p : p + int(rng.integers(0, 6))] if rng.random() < 0.6 else rng.integers(0, 3, size=4).tolist())
                      for p in range(len(output))}
        cost = np.cumsum(np.r_[1.0, rng.uniform(-0.3, 1.0, size=6)]).clip(min=0.5)
        lengths = best_lengths(CandidatesByPosition(candidates), [9], output, cost)
        spent = sum(step_cost(d, cost) for d in lengths)
        assert spent == pytest.approx(brute_force_least_cost(candidates, output, cost))
        # Any policy drafting prefixes of the same candidates spends at least as much: here, all of each.
        policy = PolicyOfWholeCandidates(candidates)
        _, drafted = replay(policy, [9], output)
        assert modelled_speedup(drafted, len(output), cost) <= len(output) / spent + 1e-9


def test_recorded_drafts_are_scored_against_the_output():
    assert accepted_length([4, 5, 9], [4, 5, 6]) == 2 and accepted_length([], [1]) == 0
    stats = score_drafts([(1, [5, 6, 0]), (3, [7, 8, 9])], [4, 5, 6, 7, 8])
    assert (stats.drafted, stats.accepted, stats.forward_passes, stats.generated) == (6, 4, 3, 5)


def test_replay_command_reads_jsonl(tmp_path, capsys):
    path = tmp_path / "recorded.jsonl"
    text = list(range(10, 40))
    path.write_text(json.dumps({"name": "echo", "prompt_tokens": text, "output_tokens": text}) + "\n")
    assert load_recorded(str(path)) == ([("echo", text, text)], None)
    assert cli.main(["bench", "--replay", str(path)]) == 0
    out = capsys.readouterr().out
    assert "echo" in out and "suffix" in out and "ngram" in out
    assert "oracle-length" not in out  # JSONL records no cost curve to model speed with


def test_bad_replay_line_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt_tokens": [1]}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        load_recorded(str(path))


def test_a_failing_worker_reports_its_traceback(tmp_path):
    # The bench's systems and the doctor's measurements run in processes of their own (no model
    # here: the file is missing); the parent's error carries where the worker failed, not only what.
    from plookup.app.bench.systems import WorkerSystem
    from plookup.app.doctor import in_fresh_process
    from plookup.measure.settings import Settings

    missing = str(tmp_path / "missing.gguf")
    with pytest.raises(RuntimeError, match="Traceback") as failed:
        WorkerSystem("plain", dict(model_path=missing, verbose=False), max_draft=4)
    assert "in build_local" in str(failed.value) and "ValueError: Model path does not exist" in str(failed.value)
    with pytest.raises(RuntimeError, match="Traceback") as failed:
        in_fresh_process(missing, Settings(), threads=1, n_ctx=256)
    assert "in measure_settings" in str(failed.value) and "ValueError: model file not found" in str(failed.value)


@pytest.mark.parametrize("argv, where", [
    (["--editor", "fim"], "python -m benchmarks.editors"),
    (["--editor-report", "a.json"], "python -m benchmarks.editors"),
    (["--llama-server", "llama-server"], "python -m benchmarks.servers"),
    (["--concurrency", "4", "--server-draft-max", "16"], "python -m benchmarks.servers"),
])
def test_the_runs_that_left_for_benchmarks_say_where_they_went(argv, where, capsys):
    """The editors' and llama-server's runs drive servers over HTTP: a checkout's benchmarks/ runs
    them, the package does not ship them; `plookup bench` still takes their options, to say so."""
    assert cli.main(["bench", "-m", "no-such-model.gguf", *argv]) == 1
    err = capsys.readouterr().err
    assert "moved out of the package" in err and where in err and "no-such-model" not in err


def test_bench_requires_the_plain_baseline(capsys):
    assert cli.main(["bench", "--systems", "pld"]) == 1
    assert "must include plain" in capsys.readouterr().err


# -- the real model, tiny


def test_memory_system_needs_its_file(tmp_path, capsys):
    assert cli.main(["bench", "--quick", "--memory", str(tmp_path / "missing.npz")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_concurrency_kinds_are_checked_before_a_model_loads(capsys):
    # An unknown kind would otherwise run nothing after minutes of loading and llama-server starts.
    assert cli.main(["bench", "-m", "no-such-model.gguf", "--concurrency", "4", "--kinds", "copy,randm"]) == 1
    err = capsys.readouterr().err
    assert "--kinds" in err and "random T=1" in err and "no-such-model" not in err


def test_apply_workloads_send_the_old_file_and_its_diff_from_two_release_wheels(tmp_path, monkeypatch):
    """No download: two wheels of a made-up package in the cache, as pip would have left them."""
    import zipfile

    from plookup.app.bench import releases

    monkeypatch.setenv("PLOOKUP_CACHE_DIR", str(tmp_path))
    folder = tmp_path / "bench-releases"
    folder.mkdir()
    body = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(80))  # 2.3k characters
    files = {
        "1.0": {"pkg/a.py": body, "pkg/same.py": body, "pkg/small.py": "x = 1\n", "pkg/big.py": body * 4},
        "1.1": {"pkg/a.py": body.replace("x + 7\n", "x + 70\n"), "pkg/same.py": body, "pkg/small.py": "x = 2\n",
                "pkg/big.py": body.replace("x + 7\n", "x + 70\n") * 4},
    }
    for version, contents in files.items():
        with zipfile.ZipFile(folder / f"pkg-{version}-py3-none-any.whl", "w") as wheel:
            for name, text in contents.items():
                wheel.writestr(name, text)
    assert [c.path for c in releases.changes("pkg", "1.0", "1.1")] == ["pkg/a.py", "pkg/big.py", "pkg/small.py"]
    (load,) = releases.apply_workloads(5, releases=[("pkg", "1.0", "1.1")])  # small and big are out of bounds
    assert load.kind == "apply" and load.name == "apply:pkg-1.0..1.1:pkg/a.py"
    prompt = load.messages[-1]["content"]
    assert f"```python\n{body}```" in prompt and "-    return x + 7\n+    return x + 70\n" in prompt


def test_a_cells_decode_rate_weighs_every_token_once():
    # One request of 1001 tokens decoded at 20 tok/s and one of 10 whose tokens came in one chunk
    # (llama-server's streams carry several at once): the cell decodes at about 20 tok/s, where a
    # mean of the two requests' rates would read thousands.
    from plookup.app.bench.concurrency import run_cell

    def request(prompt, max_tokens, temperature, seed, through_eog):
        start = 100.0 * seed
        step = 0.05 if prompt == "long" else 1e-6
        times = [start + 1.0 + step * i for i in range(1001 if prompt == "long" else 10)]
        return dict(start=start, times=times, tokens=None, forward_passes=None, accepted=None)

    cell = run_cell(request, ["long", "short"], clients=1, max_tokens=2000, temperature=0.0)
    assert cell["decode_tokens_per_second"] == pytest.approx(1009 / (50.0 + 9e-6))
    assert [r["tokens"] for r in cell["requests"]] == [1001, 10]
    assert cell["requests"][0]["ttft"] == pytest.approx(1.0)


def test_the_concurrency_plot_draws_each_system_s_ratio_to_plain_batching(tmp_path, monkeypatch):
    """Bottom row: a system's mean wall ratio over its repeats at each level, its spread as the
    error bar, and plookup's always-right bound; top row: the best run's rates."""
    import matplotlib.figure

    from plookup.app.bench.concurrency import plot

    def cell(level, system, ratios, bound):
        best = {"decode_tokens_per_second": 10.0 * level, "tokens_per_second": 5.0 * level}
        return dict(concurrency=level, workload="copy", system=system, bound=bound, best=best, wall_x_plain=ratios)

    record = {"levels": [4, 8], "cells": [cell(4, "plain batched", [1.0, 1.0], 1.9), cell(8, "plain batched", [1.0, 1.0], 1.5),
                                         cell(4, "plookup", [1.2, 1.4], 1.9), cell(8, "plookup", [1.1, 1.3], 1.5)]}
    figures = []
    savefig = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: (figures.append(fig), savefig(fig, *a, **k)))
    plot(str(tmp_path / "c.png"), record)
    assert (tmp_path / "c.png").stat().st_size > 0
    rates, ratios = figures[0].axes
    lines = {line.get_label(): line for line in ratios.get_lines()}
    assert list(lines["always-right bound (decoding alone)"].get_ydata()) == [1.9, 1.5]
    means = [list(line.get_ydata()) for line in ratios.get_lines() if list(line.get_xdata()) == [4, 8]]
    assert [1.0, 1.0] in means and pytest.approx([1.3, 1.2]) in means
    assert sorted(list(line.get_ydata()) for line in rates.get_lines())[-1] == [40.0, 80.0]


def test_an_odd_count_of_repeats_is_named_unbalanced():
    """The systems' order reverses every other repeat: 3 repeats run the first system first twice
    (measured: the second of a pair read 2-4 % slower), 2 and 4 balance it."""
    from plookup.app.bench.concurrency import order_unbalanced

    assert order_unbalanced(3, 2) and order_unbalanced(5, 5)
    assert not order_unbalanced(2, 2) and not order_unbalanced(4, 5)
    assert not order_unbalanced(1, 2) and not order_unbalanced(3, 1)


def test_runs_priced_at_pooled_step_costs_drop_the_machines_drift():
    """Two systems' runs with the same steps, the second on a machine 10 % slower, price alike
    (their decode times differ by the drift); a run with one 8-row step more prices that step's
    pooled median more; steps with a prompt in them are left out."""
    from plookup.app.bench.concurrency import priced_at_pooled_costs, priced_ratios

    def step(rows, decode, prefilled=0):
        return dict(rows=rows, decode=decode, prefilled=prefilled)

    plain = [step(64, 0.25, prefilled=64)] + [step(8, 0.060)] * 10 + [step(2, 0.040)] * 3
    slower = [step(64, 0.30, prefilled=64)] + [step(8, 0.066)] * 10 + [step(2, 0.044)] * 3
    longer = plain + [step(8, 0.060)]
    priced = priced_at_pooled_costs({"plain batched": [plain, longer], "plookup": [slower]})
    eight = float(np.median([0.060] * 21 + [0.066] * 10))
    two = float(np.median([0.040] * 6 + [0.044] * 3))
    assert priced["plookup"] == [pytest.approx(10 * eight + 3 * two)]
    assert priced["plain batched"] == [pytest.approx(10 * eight + 3 * two), pytest.approx(11 * eight + 3 * two)]
    runs = [dict(priced_decode_seconds=s) for s in priced["plookup"]]
    first = [dict(priced_decode_seconds=s) for s in priced["plain batched"][:1]]
    assert priced_ratios(runs, first) == [pytest.approx(1.0)]
    assert priced_ratios([dict(tokens=3)], first) is None  # a run not traced (llama-server's)
    # control: their decode times differ by the drift, prefill aside
    assert sum(s["decode"] for s in slower[1:]) == pytest.approx(1.1 * sum(s["decode"] for s in plain[1:]))


def test_random_prompts_are_one_per_request():
    """A run's random prompts are distinct, as many as its requests where --per-kind is fewer (a
    repeated prompt prefills in one token where its slot last held it), the first ones the same
    whatever the count (one seed)."""
    from plookup.app.bench.concurrency import request_sets

    class Vocab:
        def n_vocab(self):
            return 1000

    few = request_sets(Vocab(), 7, 4, ["random T=1"])["random T=1"].prompts
    many = request_sets(Vocab(), 7, 4, ["random T=1"], requests=24)["random T=1"].prompts
    assert len(few) == 4 and len(many) == 24
    assert len({tuple(p) for p in many}) == 24 and many[:4] == few
    assert len(request_sets(Vocab(), 7, 30, ["random T=1"], requests=24)["random T=1"].prompts) == 30
