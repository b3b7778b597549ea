# hf_python.bash — sourced by the tests that compare with transformers
# (hf_decoders.sh, inspect_hf.sh; not a test itself: ctest runs tests/*.sh).
# hf_python NAME: sets PY to a python that imports torch, transformers and
# numpy: HX_HF_PYTHON, else the venv at HX_HF_VENV (default
# ~/.cache/helix/hf-venv), which HX_HF_INSTALL=1 creates (pip: several GB);
# otherwise the calling test skips (exit 77) saying why.
hf_python() {
  VENV="${HX_HF_VENV:-$HOME/.cache/helix/hf-venv}"
  PY="${HX_HF_PYTHON:-}"
  if [ -z "$PY" ] && [ -x "$VENV/bin/python" ]; then PY="$VENV/bin/python"; fi
  if [ -z "$PY" ] && [ "${HX_HF_INSTALL:-0}" = 1 ]; then
    command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
    python3 -m venv "$VENV" || { echo "SKIP: python3 -m venv $VENV failed (python3-venv missing?)"; exit 77; }
    echo "$1: pip install torch transformers safetensors numpy into $VENV (PyPI; several GB)"
    "$VENV/bin/pip" install -q torch transformers safetensors numpy ||
      { echo "SKIP: pip install into $VENV failed (no network?)"; exit 77; }
    PY="$VENV/bin/python"
  fi
  [ -n "$PY" ] || { echo "SKIP: no python with torch + transformers (set HX_HF_PYTHON, or HX_HF_INSTALL=1 to pip-install them into $VENV)"; exit 77; }
  "$PY" -c "import torch, transformers, numpy" 2>/dev/null ||
    { echo "SKIP: $PY cannot import torch, transformers and numpy"; exit 77; }
}
