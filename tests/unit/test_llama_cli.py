"""llama-server's command line on `plookup serve` (plookup.app.llama_cli), and -ngl on every command
that loads a model: each spelling reaches the plookup value it stands for, presets give
llama-server's values, LLAMA_ARG_* variables are defaults the command line overrides, what plookup
cannot honour is refused by name with exit 2, a bad value is a clear error. No model is loaded:
the serve subprocess tests are in tests/server/test_serve_command_line.py."""

from __future__ import annotations

import argparse
import re
from dataclasses import asdict
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from plookup.api.load import gpu_layers
from plookup.app import cli, doctor, llama_cli
from plookup.app.models import MODEL_NAMES, QUANTS
from plookup.app.options import layers_line, llama_cpp_kwargs, model_kwargs
from plookup.app.serve import command as serve_command
from plookup.app.serve.guards import RequireKey

from support.doctor_reports import config

# The llama.cpp that the Makefile builds, where the build left its sources.
ARG_CPP = Path.home() / ".cache/plookup/llama-build/0.3.36/src/vendor/llama.cpp/common/arg.cpp"


def serve(*argv: str, env: dict | None = None) -> argparse.Namespace:
    args = cli.parse(["serve", *argv], env or {})
    llama_cli.settle(args)
    return args


def refused(capsys, *argv: str, env: dict | None = None) -> str:
    """The one-line message of a command line `plookup serve` refuses with exit code 2."""
    with pytest.raises(SystemExit) as stopped:
        cli.parse(["serve", *argv], env or {})
    assert stopped.value.code == 2
    return capsys.readouterr().err


# -- every spelling reaches the plookup value


@pytest.mark.parametrize("argv, name, value", [
    (["-m", "x.gguf"], "model", "x.gguf"), (["--model", "x.gguf"], "model", "x.gguf"),
    (["-c", "512"], "n_ctx", 512), (["--ctx-size", "512"], "n_ctx", 512), (["--n-ctx", "512"], "n_ctx", 512),
    (["-c", "0"], "n_ctx", 0),
    (["-np", "3"], "parallel", 3), (["--parallel", "3"], "parallel", 3), (["-np", "-1"], "parallel", 1),
    (["-ngl", "99"], "n_gpu_layers", 99), (["--n-gpu-layers", "0"], "n_gpu_layers", 0),
    (["--gpu-layers", "all"], "n_gpu_layers", "all"), (["-ngl", "auto"], "n_gpu_layers", "auto"),
    (["-ngl", "-1"], "n_gpu_layers", "auto"), (["-ngl", "-2"], "n_gpu_layers", "all"),
    (["-t", "3"], "threads", 3), (["--threads", "3"], "threads", 3),
    (["-tb", "5"], "threads_batch", 5), (["--threads-batch", "5"], "threads_batch", 5),
    (["-b", "1024"], "n_batch", 1024), (["--batch-size", "1024"], "n_batch", 1024),
    (["-ub", "256"], "n_ubatch", 256), (["--ubatch-size", "256"], "n_ubatch", 256),
    (["-fa"], "flash_attn", "on"), (["-fa", "off"], "flash_attn", "off"), (["-fa", "auto"], "flash_attn", "auto"),
    (["--flash-attn", "on"], "flash_attn", "on"), (["--flash-attn", "enabled"], "flash_attn", "on"),
    (["--flash-attn"], "flash_attn", "on"),
    (["--cache-reuse", "256"], "cache_reuse", 256),
    (["-ctk", "q8_0"], "type_k", 8), (["--cache-type-k", "q4_0"], "type_k", 2),
    (["-ctv", "f16"], "type_v", 1), (["--cache-type-v", "bf16"], "type_v", 30),
    (["--mlock"], "use_mlock", True), (["--no-mmap"], "use_mmap", False), (["--mmap"], "use_mmap", True),
    (["-dt", "0.1"], "defrag_thold", 0.1), (["--defrag-thold", "0.1"], "defrag_thold", 0.1),
    (["-n", "128"], "n_predict", 128), (["--n-predict", "128"], "n_predict", 128), (["--predict", "-1"], "n_predict", -1),
    (["--no-warmup"], "warmup", False), (["--warmup"], "warmup", True),
    (["--host", "0.0.0.0"], "host", "0.0.0.0"), (["--port", "8012"], "port", 8012),
    (["--api-key", "k1"], "api_key", ["k1"]), (["--api-key", "k1,k2", "--api-key", "k3"], "api_key", ["k1", "k2", "k3"]),
    (["--jinja"], "jinja", True), (["--no-jinja"], "jinja", False),
    (["--chat-template", "chatml"], "chat_template", ("format", "chatml")),
    (["--chat-template", "llama3"], "chat_template", ("format", "llama-3")),
    (["--chat-template", "{{ messages[0].content }}"], "chat_template", ("jinja", "{{ messages[0].content }}")),
    (["--slots"], "slots", True), (["--no-slots"], "slots", False), (["--metrics"], "metrics", True),
    (["-a", "coder"], "model_alias", "coder"), (["--alias", "coder"], "model_alias", "coder"),
    (["--model-alias", "coder"], "model_alias", "coder"),
    (["--draft-max", "16"], "max_draft", 16), (["--draft", "16"], "max_draft", 16),
    (["--draft-n", "16"], "max_draft", 16), (["--spec-draft-n-max", "16"], "max_draft", 16),
    (["--max-draft", "16"], "max_draft", 16), (["--spec-default"], "max_draft", 64),
    (["--draft-min", "5"], "draft_min", 5), (["--spec-draft-n-min", "5"], "draft_min", 5),
    (["--spec-type", "none"], "max_draft", 0), (["--spec-type", "none", "--draft-max", "16"], "max_draft", 0),
    (["--spec-type", "ngram-mod", "--draft-max", "16"], "max_draft", 16),
    (["--rpc", "10.0.0.2:50052"], "rpc", "10.0.0.2:50052"), (["--drafter", "ngram"], "drafter", "ngram"),
    (["--backend-sampling"], "backend_sampling", "on"), (["--backend-sampling", "off"], "backend_sampling", "off"),
])
def test_each_spelling_reaches_its_value(argv, name, value):
    assert getattr(serve(*argv), name) == value


def test_the_defaults_are_llama_servers_where_plookup_has_none_of_its_own():
    args = serve()
    assert args.port == 8080 and args.host == "127.0.0.1"  # llama-server's
    assert args.n_gpu_layers == "auto" and args.n_predict == -1 and args.cache_reuse == 0
    assert args.n_ctx == 4096 and args.parallel == 1 and args.max_draft == 64  # plookup's own
    assert args.n_batch == 2048  # llama-server's -b, which also sizes its FIM prompts
    assert args.flash_attn == "auto"  # llama-server's -fa auto: the doctor's choice, else llama.cpp's
    assert args.n_ubatch is None and args.llama_notes is None
    assert cli.parse(["bench"]).flash_attn is None  # elsewhere the doctor's choice, else llama_cpp's off


def test_what_has_no_effect_here_is_said_once_read():
    args = serve("-dt", "0.1", "-a", "coder,other", "--spec-type", "ngram-mod")
    assert [note.split(":")[0] for note in args.llama_notes] == ["-dt", "-a", "--spec-type ngram-mod"]
    assert "deprecated in llama.cpp" in args.llama_notes[0] and "(other left out)" in args.llama_notes[1]


def test_the_model_options_reach_llama_cpp(monkeypatch):
    args = serve("-m", "smollm2", "-c", "512", "-t", "2", "-tb", "3", "-ngl", "7", "-b", "256", "-ub", "128", "-fa",
                 "-ctk", "q8_0", "-ctv", "q8_0", "--mlock", "--no-mmap")
    kwargs = model_kwargs(args)
    assert {k: v for k, v in kwargs.items() if k != "model_path"} == dict(
        n_ctx=512, n_threads=2, n_threads_batch=3, n_gpu_layers=7, n_batch=256, n_ubatch=128, flash_attn=True,
        type_k=8, type_v=8, use_mlock=True, use_mmap=False, verbose=False)
    plain = model_kwargs(serve("-m", "smollm2"))
    assert "use_mlock" not in plain  # llama_cpp's own
    assert plain["n_batch"] == 2048 and plain["flash_attn"] == "auto"  # serve's, llama-server's
    assert model_kwargs(serve("-m", "smollm2", "-fa", "off"))["flash_attn"] is False
    assert "flash_attn" not in model_kwargs(cli.parse(["bench", "-m", "smollm2"]))  # the doctor's, else off
    # llama_cpp.Llama takes a bool: auto is on there, what llama.cpp's auto resolves to with the kernel
    assert llama_cpp_kwargs(plain)["flash_attn"] is True


def test_ctx_size_0_is_the_context_the_model_was_trained_with():
    assert model_kwargs(serve("-m", "smollm2", "-c", "0"))["n_ctx"] == 8192  # SmolLM2-135M's n_ctx_train


# -- -ngl in every command that loads a model


@pytest.mark.parametrize("command", ["generate", "bench", "doctor", "serve"])
def test_ngl_reaches_n_gpu_layers_in_every_command(command):
    parse = lambda *argv: cli.parse([command, "-m", "smollm2", *argv], {})  # noqa: E731
    assert model_kwargs(parse())["n_gpu_layers"] == "auto"  # llama-server's default; plookup.Llama resolves it
    for flag in ("-ngl", "--n-gpu-layers", "--gpu-layers"):
        assert model_kwargs(parse(flag, "7"))["n_gpu_layers"] == 7
    # A plain llama_cpp.Llama (generate --no-spec, bench's baseline) gets the count llama_cpp takes.
    assert llama_cpp_kwargs(model_kwargs(parse()))["n_gpu_layers"] == gpu_layers("auto")
    assert llama_cpp_kwargs(model_kwargs(parse("-ngl", "all")))["n_gpu_layers"] == -1


def test_the_doctor_passes_ngl_to_its_measurements_in_fresh_processes(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLOOKUP_CACHE_DIR", str(tmp_path))
    asked = []

    def measured(path, settings, threads, n_ctx, max_n, load=None):
        asked.append((n_ctx, load))
        return dict(config(True, 2.0, **asdict(settings)), cost=[1.0] * max_n)

    monkeypatch.setattr(doctor, "in_fresh_process", measured)
    monkeypatch.setattr(doctor, "tensor_types", lambda path: {"Q4_1": 1})
    assert cli.main(["doctor", "-ngl", "3", "-b", "256", "-tb", "1", "-c", "0"]) == 0
    assert asked and all(a == (8192, dict(n_threads_batch=1, n_gpu_layers=3, n_batch=256)) for a in asked)
    assert "\nlayers: " in capsys.readouterr().out  # where they went, in the report

    class Loaded(Exception):
        pass

    def fake_llama(path, **kwargs):
        raise Loaded(kwargs)

    monkeypatch.setattr("plookup.api.llama.Llama", fake_llama)
    monkeypatch.setenv(doctor.TILED_ENV, "1")  # the worker sets it: put back after
    with pytest.raises(Loaded) as loaded:  # what the worker process loads
        doctor.measure_settings("m.gguf", doctor.Settings(), 2, 256, 9, dict(n_gpu_layers=3, n_batch=256))
    assert {k: loaded.value.args[0][k] for k in ("n_gpu_layers", "n_batch", "n_threads", "n_threads_batch")} == dict(
        n_gpu_layers=3, n_batch=256, n_threads=2, n_threads_batch=2)


def test_the_layers_line_says_where_the_layers_went(monkeypatch):
    from plookup.api import load, rpc

    kwargs = model_kwargs(serve("-m", "smollm2"))  # 30 blocks, and the output layer
    monkeypatch.setattr(load, "has_gpu_device", lambda: False)
    assert layers_line(kwargs) == "layers: on the CPU (this llama.cpp build has no GPU backend)"
    assert "(-ngl 99 has nothing to offload to)" in layers_line(dict(kwargs, n_gpu_layers=99))

    class Ggml:
        def ggml_backend_dev_by_type(self, kind):
            return 1 if kind == load.GPU_DEVICE else None

        def ggml_backend_dev_name(self, device):
            return b"CUDA0"

    monkeypatch.setattr(load, "has_gpu_device", lambda: True)
    monkeypatch.setattr(rpc, "ggml", Ggml)
    assert layers_line(kwargs) == "layers: 31/31 on the GPU (CUDA0)"
    assert layers_line(dict(kwargs, n_gpu_layers=10)) == "layers: 10/31 on the GPU (CUDA0), the rest on the CPU"
    assert layers_line(dict(kwargs, n_gpu_layers=0)) == "layers: on the CPU (-ngl 0; the GPU CUDA0 unused)"
    assert layers_line(dict(kwargs, rpc_servers=["h:1"])) == "layers: 31/31 on the RPC servers h:1"


# -- presets


@pytest.mark.parametrize("preset", list(llama_cli.FIM_PRESETS))
def test_fim_presets_give_llama_servers_values(preset):
    args = serve(preset)
    assert (args.port, args.n_ubatch, args.n_batch, args.n_ctx, args.cache_reuse) == (8012, 1024, 1024, 0, 256)
    assert args.model == "qwen-coder-1.5b:q8_0"  # the largest code model plookup gets, requantized to the repo's Q8_0
    assert args.llama_notes[0].startswith(f"{preset}: ggml-org/") and "nearest model plookup can get" in args.llama_notes[0]
    assert len(args.llama_notes) == (2 if preset.endswith("-spec") else 1)  # the draft model, left out, said


def test_a_preset_is_applied_where_it_stands():
    assert serve("--fim-qwen-1.5b-default", "--port", "9000", "-c", "4096").port == 9000
    args = serve("--port", "9000", "-c", "4096", "--fim-qwen-1.5b-default")  # as llama-server: the preset's
    assert (args.port, args.n_ctx) == (8012, 0)
    assert serve("--fim-qwen-1.5b-default", "-m", "qwen-coder-0.5b").model == "qwen-coder-0.5b"


@pytest.mark.skipif(not ARG_CPP.exists(), reason="the llama.cpp sources the Makefile builds are not unpacked here")
def test_the_tables_are_the_vendored_llama_cpps():
    source = ARG_CPP.read_text()
    for preset, (repo, draft) in llama_cli.FIM_PRESETS.items():
        block = source[source.index(f'{{"{preset}"}}'):][:1200].split("add_opt(")[0]
        assert f'params.model.hf_repo = "{repo}";' in block
        assert (draft is not None) == ("speculative.draft.mparams.hf_repo" in block)
        found = {k: int(v) for k, v in re.findall(r"params\.(port|n_ubatch|n_batch|n_ctx|n_cache_reuse) = (\d+);", block)}
        assert found == dict(port=8012, n_ubatch=1024, n_batch=1024, n_ctx=0, n_cache_reuse=256)
    names = set(re.findall(r'set_env\("([A-Z_0-9]+)"\)', source))
    older = {"LLAMA_ARG_MLOCK", "LLAMA_ARG_NO_MMAP", "LLAMA_ARG_MMAP", "LLAMA_ARG_MODEL_DRAFT"}  # READMEs of older builds
    ours = set(llama_cli.ENV_FLAGS) | set(llama_cli.ENV_SWITCHES) | {e for _, envs, _ in llama_cli.REFUSED for e in envs}
    assert ours - older <= names
    for name in llama_cli.CACHE_TYPES:
        assert f"GGML_TYPE_{name.upper()}," in source


# -- LLAMA_ARG_* variables: defaults the command line overrides


@pytest.mark.parametrize("env, value, flag, name, expected", [
    ("LLAMA_ARG_MODEL", "a.gguf", "-m", "model", "a.gguf"), ("LLAMA_ARG_CTX_SIZE", "1024", "-c", "n_ctx", 1024),
    ("LLAMA_ARG_N_PARALLEL", "2", "-np", "parallel", 2), ("LLAMA_ARG_N_GPU_LAYERS", "99", "-ngl", "n_gpu_layers", 99),
    ("LLAMA_ARG_THREADS", "3", "-t", "threads", 3), ("LLAMA_ARG_BATCH", "1024", "-b", "n_batch", 1024),
    ("LLAMA_ARG_UBATCH", "256", "-ub", "n_ubatch", 256), ("LLAMA_ARG_FLASH_ATTN", "on", "-fa", "flash_attn", "on"),
    ("LLAMA_ARG_HOST", "0.0.0.0", "--host", "host", "0.0.0.0"), ("LLAMA_ARG_PORT", "8012", "--port", "port", 8012),
    ("LLAMA_ARG_ALIAS", "coder", "-a", "model_alias", "coder"),
    ("LLAMA_ARG_CACHE_REUSE", "256", "--cache-reuse", "cache_reuse", 256),
    ("LLAMA_ARG_N_PREDICT", "64", "-n", "n_predict", 64), ("LLAMA_ARG_CACHE_TYPE_K", "q8_0", "-ctk", "type_k", 8),
    ("LLAMA_ARG_CACHE_TYPE_V", "q8_0", "-ctv", "type_v", 8), ("LLAMA_ARG_DRAFT_MAX", "16", "--draft-max", "max_draft", 16),
    ("LLAMA_ARG_SPEC_DRAFT_N_MAX", "16", "--draft-max", "max_draft", 16),
    ("LLAMA_ARG_DRAFT_MIN", "4", "--draft-min", "draft_min", 4),
    ("LLAMA_ARG_CHAT_TEMPLATE", "chatml", "--chat-template", "chat_template", ("format", "chatml")),
    ("LLAMA_ARG_HF_REPO", "ggml-org/Qwen2.5-Coder-1.5B-Q8_0-GGUF", "-m", "model", "qwen-coder-1.5b:q8_0"),
])
def test_a_llama_arg_variable_is_a_default_the_command_line_overrides(env, value, flag, name, expected):
    assert getattr(serve(env={env: value}), name) == expected
    other = {"-m": "b.gguf", "-fa": "off", "--host": "127.0.0.2", "--api-key": "k9", "-a": "other",
             "-ctk": "f16", "-ctv": "f16", "--chat-template": "llama3"}.get(flag, "5")
    assert getattr(serve(flag, other, env={env: value}), name) == getattr(serve(flag, other), name) != expected


@pytest.mark.parametrize("env, value, name, expected", [
    ("LLAMA_ARG_JINJA", "false", "jinja", False), ("LLAMA_ARG_ENDPOINT_SLOTS", "0", "slots", False),
    ("LLAMA_ARG_ENDPOINT_METRICS", "1", "metrics", True), ("LLAMA_ARG_MLOCK", "true", "use_mlock", True),
    ("LLAMA_ARG_NO_MMAP", "1", "use_mmap", False), ("LLAMA_ARG_MMAP", "off", "use_mmap", False),
])
def test_switch_variables(env, value, name, expected):
    assert getattr(serve(env={env: value}), name) == expected


def test_a_bad_variable_or_one_plookup_cannot_honour_is_named(capsys):
    assert "LLAMA_ARG_PORT='http': not a whole number" in refused(capsys, env={"LLAMA_ARG_PORT": "http"})
    assert "LLAMA_ARG_N_GPU_LAYERS='lots'" in refused(capsys, env={"LLAMA_ARG_N_GPU_LAYERS": "lots"})
    assert "LLAMA_ARG_JINJA='maybe'" in refused(capsys, env={"LLAMA_ARG_JINJA": "maybe"})
    assert refused(capsys, env={"LLAMA_ARG_MMPROJ": "p.gguf"}).startswith("plookup serve: LLAMA_ARG_MMPROJ: ")
    assert "LLAMA_ARG_HF_REPO" in refused(capsys, env={"LLAMA_ARG_HF_REPO": "bartowski/Llama-3-8B-GGUF"})
    assert serve(env={"LLAMA_ARG_EMBEDDINGS": "0", "LLAMA_ARG_PORT": ""}).port == 8080  # off, and unset


def test_variables_reach_only_serve():
    assert cli.parse(["generate"], {"LLAMA_ARG_CTX_SIZE": "1024"}).n_ctx == 4096


# -- refused by name, exit 2, one line that says what to do


@pytest.mark.parametrize("flag", [flag for names, _, _ in llama_cli.REFUSED for flag in names])
def test_a_flag_plookup_cannot_honour_is_refused_by_name(capsys, flag):
    message = refused(capsys, "-m", "smollm2", flag, "value")
    assert message.startswith(f"plookup serve: {flag}: ") and message.count("\n") == 1


@pytest.mark.parametrize("argv, said", [
    (["-hf", "bartowski/Llama-3-8B-GGUF"], "-hf bartowski/Llama-3-8B-GGUF: plookup downloads nothing"),
    (["--spec-type", "draft-simple"], "--spec-type draft-simple: plookup drafts from the text itself"),
    (["--spec-type", "ngram-mod,draft-eagle3"], "--spec-type draft-eagle3: "),
])
def test_what_needs_a_model_plookup_cannot_get_is_refused(capsys, argv, said):
    message = refused(capsys, *argv)
    assert message.startswith(f"plookup serve: {said}") and message.count("\n") == 1


@pytest.mark.parametrize("argv, said", [
    (["-ngl", "lots"], "argument -ngl/--n-gpu-layers/--gpu-layers: a number of layers, 'auto' or 'all', got 'lots'"),
    (["-c", "-5"], "argument -c/--ctx-size/--n-ctx: must be >= 0"),
    (["-np", "0"], "argument -np/--parallel: must be >= 1"), (["-b", "0"], "argument -b/--batch-size: must be >= 1"),
    (["--port", "70000"], "not a TCP port: 70000"), (["-fa", "maybe"], "on, off or auto, got 'maybe'"),
    (["-ctk", "q3_k"], "a KV cache type of f32, f16"), (["--host", "a,b"], "plookup listens on one address"),
    (["--chat-template", "mistral-v7"], "no built-in template 'mistral-v7' here"),
    (["--chat-template", "{% if %}"], "the Jinja template does not parse"),
    (["--chat-template-file", "/no/such/file"], "cannot read /no/such/file"),
    (["--api-key-file", "/no/such/file"], "cannot read /no/such/file"), (["--api-key", ","], "no key in it"),
    (["--spec-type", "ngram-fancy"], "a speculative type of none, ngram-simple"),
    (["-n", "-3"], "must be >= -1"), (["--draft-max", "-1"], "must be >= 0"),
])
def test_a_bad_value_is_a_clear_error(capsys, argv, said):
    assert said in refused(capsys, *argv)


def test_an_api_key_file_without_a_key_is_refused(capsys, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# comments only\n\n")
    assert f"no key in {keys}" in refused(capsys, "--api-key-file", str(keys))
    keys.write_text("# ours\nk1\n\nk2\n")
    assert serve("--api-key-file", str(keys), "--api-key", "k3").api_key == ["k1", "k2", "k3"]


def test_the_command_lines_keys_replace_plookups_variable(monkeypatch):
    monkeypatch.setenv(serve_command.API_KEY_ENV, "old")
    assert serve_command.api_keys(serve()) == ("old",)
    assert serve_command.api_keys(serve("--api-key", "new")) == ("new",)
    assert serve_command.api_keys(serve(env={"LLAMA_API_KEY": "a,b"})) == ("a", "b")  # llama-server's variable
    assert serve_command.api_keys(serve("--api-key", "new", env={"LLAMA_API_KEY": "a,b"})) == ("new",)
    monkeypatch.delenv(serve_command.API_KEY_ENV)
    assert serve_command.api_keys(serve()) == ()


# -- -hf: llama-server's repositories onto `plookup models list`


@pytest.mark.parametrize("repo, spec", [
    ("ggml-org/Qwen2.5-Coder-1.5B-Q8_0-GGUF", "qwen-coder-1.5b:q8_0"),
    ("ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF", "qwen-coder-0.5b:q8_0"),
    ("ggml-org/Qwen2.5-Coder-3B-Q8_0-GGUF", "qwen-coder-1.5b:q8_0"),
    ("ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF:Q8_0", "qwen-coder-1.5b:q8_0"),
    ("ggml-org/Qwen3-Coder-30B-A3B-Instruct-Q8_0-GGUF", "qwen-coder-1.5b:q8_0"),
    ("Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF", "qwen-coder-1.5b"),  # llama-server's default quant, Q4_K_M: as shipped
    ("Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:q4_k_m", "qwen-coder-0.5b"),
    ("Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q4_0", "qwen-coder-0.5b:q4_0"),
    ("unsloth/Qwen2.5-Coder-1.5B-Instruct-GGUF:IQ4_XS", "qwen-coder-1.5b"),  # a quant plookup does not make
    ("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", "smollm2"),
    ("bartowski/SmolLM2-135M-Instruct-GGUF:Q8_0", "smollm2:q8_0"), ("ggml-org/gemma-3-270m-GGUF", "gemma3"),
    ("qwen2.5-coder-0.5b-q8_0.gguf", "qwen-coder-0.5b:q8_0"),  # an -hff file name
])
def test_hf_repositories_map_onto_the_nearest_model_plookup_can_get(repo, spec):
    found, note = llama_cli.hf_model(repo)
    assert found == spec and note.startswith(f"{repo}: serving {spec} in its place")
    name, _, quant = spec.partition(":")
    assert name in MODEL_NAMES and (not quant or quant in QUANTS)  # what -m (resolve_model) takes


@pytest.mark.parametrize("repo", ["bartowski/Llama-3-8B-GGUF", "ggml-org/gpt-oss-20b-GGUF", "ggml-org/gemma-3-4b-it-qat-GGUF"])
def test_other_repositories_are_refused(repo):
    with pytest.raises(ValueError, match="plookup downloads nothing from Hugging Face"):
        llama_cli.hf_model(repo)


def test_the_hf_flags_set_the_model_and_say_so():
    for flag in ("-hf", "-hfr", "--hf-repo"):
        args = serve(flag, "ggml-org/Qwen2.5-Coder-1.5B-Q8_0-GGUF")
        assert args.model == "qwen-coder-1.5b:q8_0" and args.llama_notes[0].startswith(f"{flag} ggml-org/")
    args = serve("--hf-repo", "ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF", "--hf-file", "qwen2.5-coder-0.5b-q8_0.gguf")
    assert args.model == "qwen-coder-0.5b:q8_0"


# -- the chat template, the API keys, the GGUF header


def test_a_chat_template_is_used_as_llama_cpp_uses_the_ggufs():
    class Llm:
        chat_format, chat_handler = "chat_template.default", None
        token_bos, token_eos = staticmethod(lambda: 1), staticmethod(lambda: 2)
        token_text = staticmethod(lambda token: {1: "<s>", 2: "</s>"}[token])

    llm = Llm()
    llama_cli.use_chat_template(llm, ("format", "chatml"))
    assert (llm.chat_format, llm.chat_handler) == ("chatml", None)
    llama_cli.use_chat_template(llm, ("jinja", "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"))
    assert callable(llm.chat_handler)


def test_the_chat_template_file(tmp_path):
    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert serve("--chat-template-file", str(template)).chat_template == ("jinja", template.read_text())


def test_any_of_several_api_keys_passes():
    app = FastAPI()
    app.get("/v1/models")(lambda: {"ok": True})
    app.add_middleware(RequireKey, key=("k1", "k2"))
    with TestClient(app) as client:
        for key, status in (("k1", 200), ("k2", 200), ("k3", 401), ("k1,k2", 401), ("", 401)):
            assert client.get("/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == status
    with pytest.raises(ValueError):
        RequireKey(app, key=())


def test_the_gguf_header_is_read_without_loading_the_model(tmp_path):
    import gguf

    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("tokenizer.ggml.tokens", ["a", "bb", "ccc"])  # arrays before the keys: skipped
    writer.add_array("tokenizer.ggml.scores", [0.5, 1.5, 2.5])
    writer.add_context_length(1234)
    writer.add_block_count(7)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    assert llama_cli.model_shape(str(path)) == dict(context_length=1234, block_count=7)
    assert llama_cli.trained_context(str(path)) == 1234
    (tmp_path / "not.gguf").write_bytes(b"GGML....")
    with pytest.raises(ValueError, match="not a GGUF file"):
        llama_cli.model_shape(str(tmp_path / "not.gguf"))
    with pytest.raises(ValueError, match="cannot read the model file"):
        llama_cli.model_shape(str(tmp_path / "missing.gguf"))
