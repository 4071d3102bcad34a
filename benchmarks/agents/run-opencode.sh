#!/bin/bash
# opencode 1.18 against plookup through the recording proxy (OpenAI-compatible chat completions
# through the AI SDK). The provider is declared in /tmp/agents/repo-opencode/opencode.json.
cd /tmp/agents/repo-opencode
export HOME=/tmp/agents/home-opencode XDG_CONFIG_HOME=/tmp/agents/home-opencode/.config
export XDG_DATA_HOME=/tmp/agents/home-opencode/.local/share XDG_STATE_HOME=/tmp/agents/home-opencode/.local/state
export XDG_CACHE_HOME=/tmp/agents/home-opencode/.cache
export OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_SHARE=1
export OPENCODE_DISABLE_LSP_DOWNLOAD=1 OPENCODE_DISABLE_DEFAULT_PLUGINS=1 OPENCODE_DISABLE_CLAUDE_CODE=1
exec timeout 1200 /tmp/agents/node_modules/.bin/opencode run -m plookup/qwen --format json --print-logs --log-level INFO "$@" \
  "${PROMPT:-Fix the bug in calc.py so that test_calc.py passes.}"
