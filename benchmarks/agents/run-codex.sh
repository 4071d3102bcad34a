#!/bin/bash
# Codex CLI 0.171 against plookup through the recording proxy (Responses API)
cd /tmp/agents/repo-codex
export CODEX_HOME=/tmp/agents/codex-home
exec timeout 1200 /tmp/agents/node_modules/.bin/codex exec \
  --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox --ephemeral --color never \
  -c model_provider=plookup \
  -c 'model_providers.plookup={name="plookup",base_url="http://127.0.0.1:8092/v1",wire_api="responses",request_max_retries=0,stream_max_retries=0,stream_idle_timeout_ms=900000,supports_websockets=false}' \
  -c model_context_window=32768 \
  -c check_for_update_on_startup=false \
  -c analytics.enabled=false \
  -c 'otel.exporter="none"' \
  -m qwen \
  "${PROMPT:-Fix the bug in calc.py so that test_calc.py passes.}"
