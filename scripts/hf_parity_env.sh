#!/usr/bin/env bash
# Creates build/hf_venv, a Python virtual environment with Hugging Face transformers and the CPU
# build of PyTorch, for scripts/hf_rope_parity.py. Needs network access to PyPI; not run in CI.
#
#   bash scripts/hf_parity_env.sh            # then:
#   build/hf_venv/bin/python scripts/hf_rope_parity.py --tvlab build/default/chapters/tvlab
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/hf_venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
# The CPU build of torch is much smaller than the default one (which brings CUDA libraries);
# where its index cannot be reached, the default build from PyPI works as well (on the CPU).
if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
  "$venv/bin/python" -m pip install --quiet --retries 1 --timeout 20 --index-url https://download.pytorch.org/whl/cpu torch ||
    "$venv/bin/python" -m pip install --quiet torch
fi
"$venv/bin/python" -m pip install --quiet transformers
"$venv/bin/python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
