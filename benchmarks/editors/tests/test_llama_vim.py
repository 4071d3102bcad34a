"""`python -m benchmarks.editors`: llama.vim's cases and requests, and the figures, with fakes (no model,
no server, no download: the packages are made here)."""

from __future__ import annotations

import random

import pytest

from benchmarks.editors import llama_vim as editor
from benchmarks.editors.llama_vim import (
    BUDGETS_MS,
    CHUNK_LINES,
    FimCase,
    cut_fim,
    fim_body,
    fim_cases,
    fim_summary,
    fim_table,
    instruct_body,
    instruct_messages,
    instruct_sessions,
    instruct_summary,
    instruct_table,
    merge,
    run_fim,
    run_instruct,
)


def module(name: str, functions: int) -> str:
    """A Python module of `functions` functions, 14 lines each, that tells its lines apart."""
    parts = [f'"""Module {name}."""\n\nimport os\n\n']
    for f in range(functions):
        steps = "".join(f"    x = x + {k} * y\n" for k in range(8))
        parts.append(f"def {name}_{f}(a, b):\n    x = a + {f}\n    y = b * {f}\n{steps}    if x > y:\n"
                     f"        return x - y\n    return os.sep.join([str(x), str(y), '{name}{f}'])\n\n\n")
    return "".join(parts)


PACKAGES = {
    "alpha": {f"alpha/m{i}.py": module(f"alpha{i}", 12) for i in range(5)} | {"alpha/tiny.py": "x = 1\n"},
    "beta": {f"beta/n{i}.py": module(f"beta{i}", 10) for i in range(4)},
}
FILES = {path: text for files in PACKAGES.values() for path, text in files.items()}


# -- the FIM cases


def test_a_case_is_its_file_cut_at_line_boundaries():
    cases = fim_cases(10, seed=3, chunks=4, packages=PACKAGES)
    assert len(cases) == 10
    for case in cases:
        text = FILES[case.path]
        assert case.before + case.middle + case.after == text
        assert case.before.endswith("\n") and case.after.startswith("\n")  # the cursor at a line's start
        lines = case.middle.split("\n")
        assert 2 <= len(lines) <= 6 and sum(1 for line in lines if line.strip()) >= 2
        assert case.after != "\n" or text.endswith(case.middle + "\n")


def test_chunks_are_other_files_of_the_same_package():
    for case in fim_cases(10, seed=1, chunks=4, packages=PACKAGES):
        package = case.path.split("/")[0]
        assert case.extra
        for filename, text in case.extra:
            assert filename != case.path and filename in PACKAGES[package]
            assert text.endswith("\n") and len(text.splitlines()) <= CHUNK_LINES
            assert text[:-1] in PACKAGES[package][filename]  # whole lines of that file, joined as llama.vim does


def test_one_ring_a_package_in_the_same_order_for_its_cases():
    """llama.vim sends its whole ring with every request: a package's cases share their chunks
    (but their own file's), in one order, so that the server's prompt cache keeps them."""
    cases = [c for c in fim_cases(10, seed=2, chunks=5, packages=PACKAGES) if c.path.startswith("alpha")]
    assert len(cases) >= 3
    ring = {chunk for case in cases for chunk in case.extra}
    assert len({name for name, _ in ring}) == len(ring) <= 5  # one chunk a file, one ring
    for case in cases:
        assert set(case.extra) == {c for c in ring if c[0] != case.path}
        for other in cases:  # the same order: what two requests share is laid out alike
            assert [c for c in case.extra if c in other.extra] == [c for c in other.extra if c in case.extra]


def test_cases_are_drawn_by_seed():
    assert fim_cases(8, seed=5, chunks=3, packages=PACKAGES) == fim_cases(8, seed=5, chunks=3, packages=PACKAGES)
    assert fim_cases(8, seed=5, chunks=3, packages=PACKAGES) != fim_cases(8, seed=6, chunks=3, packages=PACKAGES)


def test_a_file_too_short_has_no_case():
    assert cut_fim("t", "t.py", "x = 1\ny = 2\n", random.Random(0)) is None


# -- llama.vim's requests


def test_the_infill_body_is_llama_vims():
    case = fim_cases(1, seed=0, chunks=3, packages=PACKAGES)[0]
    body = fim_body(case, 250)
    assert set(body) == {
        "id_slot", "input_prefix", "input_suffix", "input_extra", "prompt", "n_predict", "stop", "n_indent", "top_k",
        "top_p", "samplers", "temperature", "stream", "cache_prompt", "t_max_prompt_ms", "t_max_predict_ms",
        "response_fields",
    }
    assert body["t_max_predict_ms"] == 250 and body["n_predict"] == 128 and body["t_max_prompt_ms"] == 500
    assert body["top_k"] == 40 and body["top_p"] == 0.90 and body["samplers"][:3] == ["top_k", "top_p", "infill"]
    assert body["temperature"] == 0 and body["samplers"][-1] == "temperature"  # greedy, the bench's one change
    assert body["stream"] is False and body["cache_prompt"] is True and body["prompt"] == ""
    assert body["input_extra"] == [{"text": t, "filename": f} for f, t in case.extra]
    assert "timings/predicted_n" in body["response_fields"] and "content" in body["response_fields"]
    # the window llama.vim sends: up to 256 lines before the cursor's line, up to 64 after it
    assert case.before.endswith(body["input_prefix"])
    assert body["input_prefix"].count("\n") == min(256, case.before.count("\n"))
    assert case.after.startswith(body["input_suffix"]) or case.after + "\n" == body["input_suffix"]
    assert body["input_suffix"].count("\n") <= 65
    assert fim_body(case, 0)["t_max_predict_ms"] == 0


def test_the_window_is_cut_to_llama_vims_line_counts():
    lines = [f"v{i} = {i}\n" for i in range(400)]
    case = FimCase("c", "f.py", "".join(lines[:300]), "v300 = 300\nv301 = 301", "\n" + "".join(lines[302:]))
    body = fim_body(case, 1000)
    assert body["input_prefix"] == "".join(lines[44:300])
    assert body["input_suffix"] == "\n" + "".join(lines[302:366])


def test_instruct_messages_hold_the_selection_and_context():
    session = instruct_sessions(1, seed=0, chunks=2, turns=3, packages=PACKAGES)[0]
    assert session.before + session.selection + session.after == FILES[session.path]
    assert session.selection.startswith("def ")
    system = instruct_messages(session)[0]
    assert system["role"] == "system" and system["content"].startswith("You are a text-editing assistant.")
    sections = ["--- CONTEXT", "--- PREFIX", "--- SELECTION", "--- SUFFIX"]
    at = [system["content"].index(s) for s in sections]
    assert at == sorted(at)
    assert session.selection.rstrip("\n") in system["content"]
    assert all(name != session.path for name, _ in session.extra)
    body = instruct_body(instruct_messages(session))
    assert body["samplers"] == ["min_p", "temperature"] and body["temperature"] == 0 and body["cache_prompt"]
    with pytest.raises(ValueError, match="instruct-turns"):
        instruct_sessions(1, seed=0, chunks=2, turns=9, packages=PACKAGES)


# -- running, with a fake server


class FakeServer:
    """Answers as llama-server does with response_fields: "a/b" keys."""

    started: list = []

    def __init__(self, kind):
        self.kind, self.bodies, self.closed = kind, [], False
        FakeServer.started.append(self)

    def post(self, route, body):
        self.bodies.append((route, body))
        if route == "/infill":
            budget = body["t_max_predict_ms"]
            n = {250: 5, 1000: 20}.get(budget, 40)
            return {"content": f"text{n}", "timings/predicted_n": n, "timings/predicted_ms": 250.0 if budget else 1000.0,
                    "timings/prompt_n": 100, "timings/prompt_ms": 80.0, "timings/draft_n": 10,
                    "timings/draft_n_accepted": 7, "stop_type": "limit"}, 0.5
        reply = f"answer {len(body['messages'])}"
        return {"choices": [{"message": {"content": reply}}], "usage": {"completion_tokens": 30, "prompt_tokens": 9},
                "timings": {"predicted_n": 30, "predicted_ms": 600.0, "prompt_ms": 50.0}}, 0.7

    def close(self):
        self.closed = True


def test_every_budget_pass_runs_on_a_fresh_server_with_the_systems_fields():
    FakeServer.started = []
    cases = fim_cases(3, seed=0, chunks=2, packages=PACKAGES)
    records = run_fim("plookup plain", cases, FakeServer, lambda text: None)
    assert [s.kind for s in FakeServer.started] == ["plookup serve"] * 3 and all(s.closed for s in FakeServer.started)
    for server, budget in zip(FakeServer.started, (*BUDGETS_MS, 0)):
        assert [b["t_max_predict_ms"] for _, b in server.bodies] == [budget] * 3
        assert all(b["speculative"] == {"n_max": 0} for _, b in server.bodies)
    assert [r["predicted_n"] for r in records] == [5] * 3 + [20] * 3 + [40] * 3
    assert records[0]["draft_n_accepted"] == 7 and records[0]["content"] == "text5"


def test_a_sweep_point_is_llama_server_with_its_drafter_and_length():
    FakeServer.started = []
    cases = fim_cases(2, seed=0, chunks=2, packages=PACKAGES)
    records = run_fim("llama-server ngram-simple 16", cases, FakeServer, lambda text: None, budgets=(0,))
    (server,) = FakeServer.started  # one pass: no budget only
    assert server.kind == "llama-server --spec-type ngram-simple --spec-ngram-simple-size-m 16"
    assert [b["t_max_predict_ms"] for _, b in server.bodies] == [0, 0] and len(records) == 2
    assert editor.system("llama-server ngram-mod 32")[0].split()[1:] == [
        "--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", "32", "--spec-ngram-mod-n-min", "32"]
    assert editor.plain_of("llama-server ngram-map-k 64") == "llama-server"
    assert editor.plain_of("plookup") == "plookup plain" and editor.plain_of("plookup plain") is None
    for bad in ("llama-server ngram-mod x", "llama-server ngram-mod 0", "llama-server eagle 16", "plookup fast"):
        with pytest.raises(ValueError, match="no system"):
            editor.parse_systems(f"plookup,{bad}")
    # the points of a sweep run in every workload; a workload's own systems only in it
    wanted = editor.parse_systems("llama-server ngram-mod 16, plookup --no-memory,plookup")
    assert editor.chosen(wanted, editor.FIM_SYSTEMS) == ["llama-server ngram-mod 16", "plookup"]
    assert editor.chosen(None, editor.FIM_SYSTEMS) == list(editor.FIM_SYSTEMS)


def test_the_budgets_are_parsed_in_order():
    assert editor.parse_budgets("250,1000,none") == (250, 1000, 0) and editor.parse_budgets("none") == (0,)
    for bad in ("", "fast", "250,250", "-5"):
        with pytest.raises(ValueError, match="--fim-budgets"):
            editor.parse_budgets(bad)


def test_an_instruct_turn_sends_the_last_answer_and_the_next_instruction():
    FakeServer.started = []
    sessions = instruct_sessions(2, seed=0, chunks=2, turns=3, packages=PACKAGES)
    records = run_instruct("plookup", sessions, FakeServer, lambda text: None)
    (server,) = FakeServer.started
    assert len(records) == 6 and [r["turn"] for r in records] == [1, 2, 3] * 2
    messages = server.bodies[2][1]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[2]["content"] == records[0]["content"] and messages[-1]["content"].startswith("INSTRUCTION: ")
    assert "speculative" not in server.bodies[0][1]


# -- figures


def fim_run(case_tokens: dict, contents=None, predicted_ms=1000.0) -> list:
    """Records of an FIM run: budget -> tokens of every case."""
    return [{"case": f"c{i}", "budget_ms": budget, "content": (contents or {}).get(i, f"out{i}"), "seconds": 1.0,
             "prompt_n": 100, "prompt_ms": 200.0 + budget / 10, "predicted_n": n, "predicted_ms": predicted_ms,
             "draft_n": 4, "draft_n_accepted": 3, "stop_type": "limit", "tokens_cached": 0}
            for budget, tokens in case_tokens.items() for i, n in enumerate(tokens)]


def test_the_budget_accounting():
    runs = {
        "plookup plain": fim_run({250: [4, 6], 1000: [20, 22], 0: [30, 50]}),
        "plookup": fim_run({250: [10, 12], 1000: [40, 44], 0: [30, 50]}, contents={1: "other"}, predicted_ms=500.0),
    }
    s = fim_summary(runs)
    assert s["plookup plain"]["tokens_250ms"] == 5 and s["plookup plain"]["tokens_1000ms"] == 21
    assert s["plookup"]["tokens_250ms"] == 11 and s["plookup"]["tokens_1000ms"] == 42
    assert s["plookup plain"]["decode_tok_s"] == pytest.approx(80 / 2.0)  # tokens over decode seconds, pooled
    assert s["plookup"]["decode_tok_s"] == pytest.approx(80 / 1.0)
    assert s["plookup"]["prompt_ms"] == pytest.approx(225.0)  # the first (250 ms) pass: each case's first request
    assert s["plookup"]["same_text"] == 1 and s["plookup"]["same_as"] == "plookup plain"
    assert "same_text" not in s["plookup plain"]
    assert s["plookup"]["drafted"] == 8 and s["plookup"]["accepted"] == 6  # the no-budget pass's
    table = fim_table(s)
    row = next(line for line in table.splitlines() if line.split("  ")[0] == "plookup")
    assert "11.0" in row and "42.0" in row and "80.0" in row and "1/2 (plookup plain)" in row


def test_instruct_figures_split_the_first_turn_from_the_rest():
    def turns(rates_ms):
        return [{"session": "s", "turn": t + 1, "instruction": "i", "content": f"c{t}", "seconds": 1.0,
                 "prompt_tokens": 9, "completion_tokens": 100, "prompt_n": 9, "prompt_ms": 50.0, "predicted_n": 100,
                 "predicted_ms": ms, "draft_n": 50, "draft_n_accepted": 40} for t, ms in enumerate(rates_ms)]

    runs = {"plookup plain": turns([4000, 4000, 4000]), "plookup": turns([4000, 1000, 3000])}
    s = instruct_summary(runs)
    assert s["plookup"]["first_tok_s"] == pytest.approx(25.0)
    assert s["plookup"]["later_tok_s"] == pytest.approx(200 / 4.0)
    assert s["plookup"]["same_text"] == 3 and s["plookup"]["drafted"] == 100
    row = next(line for line in instruct_table(s).splitlines() if line.split("  ")[0] == "plookup")
    assert "50.0" in row and "25.0" in row and "3/3 (plookup plain)" in row


def test_runs_of_several_systems_merge():
    a = {"command": "a", "fim": {"plookup": [1]}, "instruct": {}}
    b = {"command": "b", "fim": {"llama-server": [2]}, "instruct": {"plookup": [3]}}
    merged = merge([a, b])
    assert merged["command"] == "a" and merged["fim"] == {"plookup": [1], "llama-server": [2]}
    assert merged["instruct"] == {"plookup": [3]}


def test_unknown_systems_and_workloads_are_refused():
    with pytest.raises(ValueError, match="--editor"):
        editor.parse_list("fim,chat", editor.WORKLOADS, "--editor")
    assert editor.parse_list("fim, instruct", editor.WORKLOADS, "--editor") == ["fim", "instruct"]


def test_the_command_line_wants_a_workload_or_runs_to_report(capsys):
    from benchmarks.editors.__main__ import main

    assert main(["-m", "no-such-model.gguf"]) == 1
    assert "--editor LIST" in capsys.readouterr().err
    assert main(["-m", "no-such-model.gguf", "--editor", "fim,chat"]) == 1
    assert "--editor: choose from fim, instruct, session" in capsys.readouterr().err


@pytest.mark.parametrize("flash_attn, flag", [(None, []), ("default", []), (False, ["-fa", "off"]),
                                              (True, ["-fa", "on"]), ("auto", ["-fa", "auto"])])
def test_both_servers_get_the_same_flash_attention(monkeypatch, flash_attn, flag):
    """Not given, each server runs at its own default (llama-server's auto; plookup serve's, auto too)."""
    monkeypatch.setattr(editor.subprocess, "Popen", lambda command, **_: command)
    monkeypatch.setattr(editor, "wait_healthy", lambda *args: None)
    kwargs = {"model_path": "m.gguf", "n_threads": 2, "n_ctx": 8192, "flash_attn": flash_attn}
    for kind in ("llama-server", "plookup serve"):
        command = editor.Server(kind, kwargs, "/bin/llama-server").command
        fa = [c for i, c in enumerate(command) if c == "-fa" or command[i - 1] == "-fa"]
        assert fa == flag, (kind, command)
