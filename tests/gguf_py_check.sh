#!/usr/bin/env bash
# gguf_py_check.sh — cross-check our GGUF writer and reader with llama.cpp's own
# gguf-py (pip package "gguf"): a file written by helix must load in gguf-py with
# the exact values written, and for that file and every GGUF under ../shared our
# reader's view (kvs, types, counts, tensor types/shapes/offsets/sizes) must equal
# gguf-py's. Skips (exit 77, with a reason) when python3, gguf-py or the
# test_gguf binary is missing.
set -u
cd "$(dirname "$0")/.."
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
python3 -c "import gguf" 2>/dev/null || { echo "SKIP: python module gguf (llama.cpp gguf-py; pip install gguf) not importable"; exit 77; }
TG="${HX_TEST_GGUF:-}"
if [ -z "$TG" ] && [ -n "${HX_BIN:-}" ]; then TG="$(dirname "$HX_BIN")/tests/test_gguf"; fi
[ -n "$TG" ] && [ -x "$TG" ] || { echo "SKIP: test_gguf binary not found (set HX_BIN or HX_TEST_GGUF)"; exit 77; }

tmp="$(mktemp -d /tmp/hx_gguf_py.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
"$TG" --write-sample "$tmp/sample.gguf" || { echo "FAIL: --write-sample"; exit 1; }

cat > "$tmp/check.py" <<'PY'
import sys, math
import numpy as np
from gguf import GGUFReader, GGUFValueType as VT

VT_NAME = {0: "u8", 1: "i8", 2: "u16", 3: "i16", 4: "u32", 5: "i32", 6: "f32", 7: "bool",
           8: "string", 9: "array", 10: "u64", 11: "i64", 12: "f64"}

def dump(path):
    """The same lines as `test_gguf --dump`, from gguf-py's parse."""
    r = GGUFReader(path)
    out = ["version %d" % int(r.fields["GGUF.version"].parts[-1][0])]
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        t = int(f.types[0])
        line = "kv %s %s" % (k, VT_NAME[t])
        if t == 9:
            line += "/%s %d" % (VT_NAME[int(f.parts[3][0])], int(f.parts[4][0]))
        out.append(line)
    for t in r.tensors:
        out.append("tensor %s %s %s %d %d" % (t.name, t.tensor_type.name,
                   ",".join(str(int(x)) for x in t.shape), t.data_offset, t.n_bytes))
    return out

def check_sample(path):
    r = GGUFReader(path)
    f = r.fields
    c = lambda k: f[k].contents()
    exp = {"general.architecture": "llama", "general.name": "", "t.u8": 200, "t.i8": -100,
           "t.u16": 60000, "t.i16": -30000, "t.u32": 4000000000, "t.i32": -2000000000,
           "t.f32": 1.5, "t.bool": True, "t.u64": 2**64 - 2, "t.i64": -2**63, "t.f64": -0.1,
           "t.replaced": 2, "a.u8": [1, 2, 255], "a.i8": [-128, 0, 127], "a.u16": [0, 65535],
           "a.i16": [-32768, 32767], "a.u32": [0, 1, 2, 2**32 - 1], "a.i32": [-5, 0, 5],
           "a.bool": [True, False, True], "a.u64": [0, 2**64 - 1], "a.i64": [-2**63, 2**63 - 1],
           "a.f64": [3.25, -1e300], "a.empty": [], "a.str": ["hello", "", "w\u00f6rld", "x\x00y"],
           "a.str0": ["hello", "", "w\u00f6rld"], "a.str_empty": []}
    bad = 0
    for k, v in exp.items():
        if c(k) != v:
            print("sample: %s = %r, expected %r" % (k, c(k), v)); bad += 1
    if c("a.f32")[:2] != [0.5, -2.0] or not math.isclose(c("a.f32")[2], 1e30, rel_tol=1e-7):
        print("sample: a.f32 =", c("a.f32")); bad += 1
    types = {"n.strs": [9, 9, 8], "n.i32": [9, 9, 9, 5]}
    for k, tv in types.items():
        if [int(t) for t in f[k].types] != tv:
            print("sample: %s types %r" % (k, f[k].types)); bad += 1
    # tensor data as the C test fills it (sample_fill in test_gguf.c)
    ts = {t.name: t for t in r.tensors}
    f32 = np.arange(24, dtype=np.float32) * 0.5 - 3.0
    if not np.array_equal(np.asarray(ts["w.f32"].data).reshape(-1), f32): print("sample: w.f32 data"); bad += 1
    q8 = np.array([(i * 7 + 1) & 255 for i in range(136)], dtype=np.uint8)
    if bytes(np.asarray(ts["w.q8"].data).tobytes()) != q8.tobytes(): print("sample: w.q8 data"); bad += 1
    f16 = (np.arange(5, dtype=np.float32) + 0.25).astype(np.float16)
    if not np.array_equal(np.asarray(ts["w.f16"].data).reshape(-1), f16): print("sample: w.f16 data"); bad += 1
    if [int(x) for x in ts["w.q4k"].shape] != [256, 1, 2]: print("sample: w.q4k shape"); bad += 1
    return bad

mode = sys.argv[1]
if mode == "sample":
    sys.exit(1 if check_sample(sys.argv[2]) else 0)
# dump OUTDIR FILE...: OUTDIR/<i>.txt per file, or OUTDIR/<i>.err when gguf-py fails
outdir = sys.argv[2]
for i, path in enumerate(sys.argv[3:]):
    try:
        text = "\n".join(dump(path)) + "\n"
        open("%s/%d.txt" % (outdir, i), "w").write(text)
    except Exception as ex:
        open("%s/%d.err" % (outdir, i), "w").write(repr(ex))
PY

fail=0
python3 "$tmp/check.py" sample "$tmp/sample.gguf" || { echo "FAIL: gguf-py sees other values in our written file"; fail=1; }
files=("$tmp/sample.gguf")
# gguf-py parses big vocabularies slowly (~10 s for the 150k-token files), so by
# default only files up to 1 MB are compared; HX_GGUF_PY_FULL=1 compares all.
size_arg=(-size -1000001c)
[ "${HX_GGUF_PY_FULL:-0}" = 1 ] && size_arg=()
SHARED="${HX_SHARED:-../shared}"
for d in "$SHARED/models" "$SHARED/tokenizers/vocab-gguf"; do
  [ -d "$d" ] && while IFS= read -r f; do files+=("$f"); done < <(find "$d" -name '*.gguf' "${size_arg[@]}" | sort)
done
mkdir -p "$tmp/py"
python3 "$tmp/check.py" dump "$tmp/py" "${files[@]}" || { echo "FAIL: gguf-py dump crashed"; fail=1; }
i=0
for f in "${files[@]}"; do
  if [ -f "$tmp/py/$i.err" ]; then echo "FAIL: gguf-py cannot read $f: $(cat "$tmp/py/$i.err")"; fail=1
  elif ! "$TG" --dump "$f" > "$tmp/c.txt"; then echo "FAIL: our reader cannot read $f"; fail=1
  elif ! diff -q "$tmp/py/$i.txt" "$tmp/c.txt" >/dev/null; then
    echo "FAIL: $f: our view differs from gguf-py:"; diff "$tmp/py/$i.txt" "$tmp/c.txt" | head -10; fail=1
  fi
  i=$((i + 1))
done
echo "gguf_py_check: ${#files[@]} files compared with gguf-py $(python3 -c 'import importlib.metadata as m; print(m.version("gguf"))'), fail=$fail"
exit $fail
