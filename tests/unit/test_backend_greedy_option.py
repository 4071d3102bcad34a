"""plookup's --backend-sampling option: the command line reaches plookup's model and not llama_cpp's."""

from __future__ import annotations


def test_the_command_line_option_reaches_plookup_only():
    import argparse

    from plookup.app.options import add_model_options, llama_cpp_kwargs, model_kwargs

    parser = argparse.ArgumentParser()
    add_model_options(parser)
    kwargs = model_kwargs(parser.parse_args(["--backend-sampling", "on"]))
    assert kwargs["backend_sampling"] is True and "backend_sampling" not in llama_cpp_kwargs(kwargs)
    assert "backend_sampling" not in model_kwargs(parser.parse_args([]))  # the doctor's choice, else off
