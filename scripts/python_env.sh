#!/usr/bin/env bash
# Creates build/py_venv, a Python virtual environment with the `gguf` package (llama.cpp's gguf-py,
# from PyPI) and NumPy: chapter 08's test reads the GGUF files tvlab writes with it, and compares
# its NumPy quantizers and dequantizers with tvlab's, byte for byte. Run by `make deps` (and so by
# `make test`); needs network access to PyPI the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/py_venv
wanted="gguf==0.19.0"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import gguf, numpy' 2>/dev/null; then
  exit 0
fi
python3 -m venv "$venv" || {
  echo "python_env.sh: python3 -m venv failed: install the Debian package python3-venv" >&2
  exit 1
}
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$wanted" numpy || {
  echo "python_env.sh: pip could not install $wanted and numpy into $venv (is PyPI reachable?)" >&2
  exit 1
}
"$venv/bin/python" -c 'import gguf, numpy; import importlib.metadata as m; print("build/py_venv: gguf", m.version("gguf"), "numpy", numpy.__version__)'
