"""Tool calls in open-weight models' output, per model family, as llama.cpp's ``llama-server
--jinja`` reads them (common/chat.cpp, common/parsers/*.cpp): parsing whole and streamed outputs
into content, reasoning and calls, the stream deltas an OpenAI client needs, the GBNF grammar that
holds a call to its tool's schema, and the messages a family's chat template is rendered with;
the README's map lists its modules.
"""

from plookup.app.serve.toolcalls.base import Call, Parsed, ToolFormat, deltas
from plookup.app.serve.toolcalls.families import (
    DeepSeek,
    Generic,
    GptOss,
    Hermes,
    Llama3,
    Mistral,
    Qwen3Xml,
    detect,
)

__all__ = [
    "Call",
    "DeepSeek",
    "Generic",
    "GptOss",
    "Hermes",
    "Llama3",
    "Mistral",
    "Parsed",
    "Qwen3Xml",
    "ToolFormat",
    "deltas",
    "detect",
]
