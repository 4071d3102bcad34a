"""The --memory option on a real model's vocabulary, and a second request drafting from memory."""

from __future__ import annotations

import itertools

from plookup.draft.drafters import SuffixDrafter
from plookup.draft.policy import CPU_COST_CURVE
from plookup.index.memory import GlobalMemory


def test_memory_option_reports_a_bad_file_starts_empty_and_replaces_it(tmp_path, model_path, capsys):
    import argparse

    from plookup.app.options import open_memory

    path = tmp_path / "memory.npz"
    path.write_bytes(b"garbage")
    args = argparse.Namespace(memory=str(path), memory_tokens=500, drafter="suffix")
    memory = open_memory(args, model_path["smollm2"])
    assert "not a plookup memory file" in capsys.readouterr().err and len(memory) == 0
    memory.add([5, 6, 7])
    from plookup.app.options import model_vocabulary

    memory.save(path, model_vocabulary(model_path["smollm2"]))
    assert [d.tolist() for d in open_memory(args, model_path["smollm2"]).documents_tokens()] == [[5, 6, 7]]
    GlobalMemory(10).save(path, vocabulary="another model")
    assert len(open_memory(args, model_path["smollm2"])) == 0
    assert "another model's vocabulary" in capsys.readouterr().err


def test_second_request_drafts_from_memory(model_path, smol):
    import plookup

    from conftest import LLAMA_KWARGS
    from support.plain import NEAR_TIE, chat_prompt_tokens, first_near_tie, greedy_with_gaps, standard_workloads

    max_tokens = 64
    memory = GlobalMemory(100_000)
    # sized by the built-in curve, as `smol` (a clean machine measured SmolLM2's here otherwise)
    llm = plookup.Llama(model_path["smollm2"], drafter=SuffixDrafter(memory=memory), cost_curve=CPU_COST_CURVE,
                        **LLAMA_KWARGS)
    messages = standard_workloads(0)[0].messages
    first_prompt = chat_prompt_tokens(llm, messages)
    first = list(itertools.islice(llm.generate(first_prompt, temp=0.0), max_tokens))
    assert llm.last_stats.accepted_from_memory == 0
    assert len(memory) == len(llm.drafter.index)  # prompt + output (as far as indexed)

    # Agent loops resend near-identical text: same request, a different system message.
    edited = [{"role": "system", "content": "You are a careful programmer."}, *messages]
    second_prompt = chat_prompt_tokens(llm, edited)
    second = list(itertools.islice(llm.generate(second_prompt, temp=0.0), max_tokens))
    stats = llm.last_stats
    # The request's own index holds only this request, so these drafts came from request 1.
    assert stats.accepted_from_memory > 0
    assert len(memory) <= memory.max_tokens and memory.documents == 2

    reference, gaps = greedy_with_gaps(smol, second_prompt, max_tokens)
    tie = first_near_tie(gaps, NEAR_TIE["smollm2"])
    assert second[:tie] == reference[:tie]
    assert tie >= 36  # the first near-tie of plain decoding is at token 41 (measured, portable build)
    print(
        f"\nrequest 2: {stats.accepted_from_memory}/{stats.accepted} accepted tokens from memory, "
        f"{len(second)} generated in {stats.forward_passes} passes; output shares "
        f"{sum(a == b for a, b in zip(first, second))} positions with request 1's"
    )
