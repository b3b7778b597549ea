#!/usr/bin/env bash
# load-model on every GGUF in ../shared/models: exit 0, and the tensor count and
# per-tensor types in its --json agree with the file (header read independently
# with Python's struct; types cross-checked with gguf-py when it is installed).
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
SHARED=${HX_SHARED:-../shared}
[ -d "$SHARED/models" ] || { echo "SKIP: $SHARED/models not found"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
n=0
while IFS= read -r f; do
  "$BIN" load-model "$f" >/dev/null
  "$BIN" load-model --json "$f" > /tmp/hx_lm.$$.json
  python3 - "$f" /tmp/hx_lm.$$.json <<'PY'
import json, struct, sys
path, js = sys.argv[1], json.load(open(sys.argv[2]))
with open(path, 'rb') as fh:
    magic, version, n_tensors, n_kv = struct.unpack('<4sIQQ', fh.read(24))
assert magic == b'GGUF', path
assert js['gguf_version'] == version, (path, js['gguf_version'], version)
assert len(js['tensors']) == n_tensors, (path, len(js['tensors']), n_tensors)
assert len(js['metadata']) == n_kv, (path, len(js['metadata']), n_kv)
import os
if os.path.getsize(path) > 4 << 20 and not os.environ.get('HX_GGUF_PY_FULL'):
    sys.exit(0)  # gguf-py takes ~10 s per 150k-token vocabulary; HX_GGUF_PY_FULL=1 checks all
try:
    import gguf
except ImportError:
    sys.exit(0)
r = gguf.GGUFReader(path)
ours = {t['name']: (t['type'], t['shape']) for t in js['tensors']}
for t in r.tensors:
    typ, shape = ours[t.name]
    assert typ == t.tensor_type.name, (path, t.name, typ, t.tensor_type.name)
    assert shape == [int(x) for x in t.shape], (path, t.name, shape, list(t.shape))
PY
  n=$((n+1))
done < <(find "$SHARED/models" -name '*.gguf' | sort)
rm -f /tmp/hx_lm.$$.json
# a bad file: clear error naming it, exit 1, no crash
printf 'GGUF\003\000\000\000' > /tmp/hx_bad.$$.gguf
if "$BIN" load-model /tmp/hx_bad.$$.gguf 2>/tmp/hx_bad.$$.err; then echo "FAIL: truncated file accepted"; exit 1; fi
grep -q "hx_bad.$$.gguf" /tmp/hx_bad.$$.err || { echo "FAIL: error does not name the file"; cat /tmp/hx_bad.$$.err; exit 1; }
rm -f /tmp/hx_bad.$$.gguf /tmp/hx_bad.$$.err
echo "load_model: $n files checked"
echo "$n passed, 0 failed"
