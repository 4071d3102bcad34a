#!/bin/bash
# qwen-code 0.15 against plookup through the recording proxy (OpenAI chat completions).
# Provider, model and telemetry settings: /tmp/agents/home-qwen/.qwen/settings.json
cd /tmp/agents/repo-qwen
export HOME=/tmp/agents/home-qwen
export OPENAI_BASE_URL=http://127.0.0.1:8092/v1 OPENAI_API_KEY=unused OPENAI_MODEL=qwen
exec timeout 1200 /tmp/agents/node_modules/.bin/qwen --auth-type openai -m qwen --yolo \
  --output-format stream-json --max-session-turns 12 "$@" \
  "${PROMPT:-Fix the bug in calc.py so that test_calc.py passes.}"
