#!/bin/bash
# Claude Code 2.1 against plookup through the recording proxy (Anthropic Messages API)
cd /tmp/agents/repo-claude
export HOME=/tmp/agents/home-claude
export ANTHROPIC_BASE_URL=http://127.0.0.1:8092 ANTHROPIC_API_KEY=unused
export IS_SANDBOX=1  # lets --dangerously-skip-permissions run as root
export DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 DISABLE_AUTOUPDATER=1 DISABLE_BUG_COMMAND=1
# Work-around: with a model name it does not know (qwen), Claude Code 2.1.197 sends role "system"
# messages inside `messages` (beta mid-conversation-system-2026-04-07), which plookup refuses with
# a 400 that Claude Code does not recognise as "no such beta here". plookup answers to any model
# name, so name a model Claude Code knows lacks that feature (claude-sonnet-4-6). MODEL=qwen: the bug.
MODEL=${MODEL:-claude-sonnet-4-6}
export ANTHROPIC_MODEL=$MODEL ANTHROPIC_SMALL_FAST_MODEL=$MODEL ANTHROPIC_DEFAULT_HAIKU_MODEL=$MODEL
export ANTHROPIC_DEFAULT_SONNET_MODEL=$MODEL ANTHROPIC_DEFAULT_OPUS_MODEL=$MODEL CLAUDE_CODE_SUBAGENT_MODEL=$MODEL
export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 CLAUDE_CODE_MAX_OUTPUT_TOKENS=4096 API_TIMEOUT_MS=900000
exec timeout 1200 /tmp/agents/node_modules/.bin/claude -p "${PROMPT:-Fix the bug in calc.py so that test_calc.py passes.}" \
  --model "$MODEL" --dangerously-skip-permissions --output-format stream-json --verbose --max-turns 12 "$@"
