#!/bin/bash
# Kills `plookup serve` (SIGSEGV, stack overflow in llama.cpp's GBNF parser): one tool whose string
# parameter has a large maxLength. Claude Code 2.1.197's Workflow tool has maxLength 524288.
curl -sS -m 60 http://127.0.0.1:${PORT:-8091}/v1/chat/completions -H 'content-type: application/json' -d '{
  "model": "qwen", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}],
  "tools": [{"type": "function", "function": {"name": "Workflow", "description": "run a script",
    "parameters": {"type": "object", "properties": {"script": {"type": "string", "maxLength": 65536}},
                   "required": ["script"]}}}]}'
echo "curl rc=$?"
