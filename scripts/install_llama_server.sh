#!/usr/bin/env bash
# Make llama.cpp's OpenAI-compatible server (llama-cpp-python[server]) available in the venv,
# for the tests of the server sampler (make test). PyPI ships llama-cpp-python as source only,
# so the wheel is compiled once (a few minutes) and kept in $MECHSCOPE_CACHE/wheels; later
# venvs install it from there in seconds. Idempotent and quiet: nothing happens when the pinned
# version is already importable. Always exits 0: where it cannot be built or installed the
# server tests skip and say why; the build goes on.
#
# CMAKE_ARGS may be set to override the build options (e.g. -DGGML_NATIVE=ON for speed on a
# machine that keeps its own cache). Usage: scripts/install_llama_server.sh [python]
set -u
PIN=0.3.16
PY=${1:-${VENV:-.venv}/bin/python}
CACHE=${MECHSCOPE_CACHE:-$HOME/.cache/mechscope}
WHEELS=$CACHE/wheels
LOG=$CACHE/llama-cpp-python-$PIN-build.log

installed() {
  "$PY" - "$PIN" >/dev/null 2>&1 <<'EOF'
import sys
from importlib.metadata import version

import llama_cpp.server.app  # noqa: F401  (the [server] extra's deps import too)

sys.exit(version("llama_cpp_python") != sys.argv[1])
EOF
}

have_wheel() {
  compgen -G "$WHEELS/llama_cpp_python-$PIN-*.whl" >/dev/null
}

if installed; then
  exit 0
fi
if [ ! -x "$PY" ]; then
  echo "install_llama_server: no python at $PY; the server sampler tests will skip"
  exit 0
fi
mkdir -p "$WHEELS" || {
  echo "install_llama_server: cannot create $WHEELS; the server sampler tests will skip"
  exit 0
}
if ! have_wheel; then
  for tool in cmake c++; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "install_llama_server: no $tool to compile llama-cpp-python; the server sampler tests will skip"
      exit 0
    fi
  done
  echo "install_llama_server: compiling llama-cpp-python==$PIN once into $WHEELS (minutes; log: $LOG)"
  # Portable CPU code (no -march=native), no CUDA/Metal/curl, no llama.cpp tools or tests:
  # the package only needs the shared libraries. Two build jobs keep a small machine usable.
  export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF}"
  export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
  start=$(date +%s)
  if ! "$PY" -m pip wheel --no-deps --no-binary llama-cpp-python "llama-cpp-python==$PIN" \
    -w "$WHEELS" >"$LOG" 2>&1; then
    echo "install_llama_server: building llama-cpp-python==$PIN failed (see $LOG); the server sampler tests will skip"
    exit 0
  fi
  echo "install_llama_server: built in $(($(date +%s) - start)) s"
fi
if "$PY" -m pip install -q --find-links "$WHEELS" --only-binary llama-cpp-python \
  "llama-cpp-python[server]==$PIN" >>"$LOG" 2>&1 && installed; then
  echo "install_llama_server: llama-cpp-python[server]==$PIN is ready"
else
  echo "install_llama_server: installing llama-cpp-python[server]==$PIN failed (see $LOG); the server sampler tests will skip"
fi
exit 0
