#!/usr/bin/env bash
# make_corpus.sh — build the seed corpus for fuzz_gguf in fuzz/corpus-work/gguf
# (git-ignored) from the GGUF files under ../shared:
#   - "mini" copies: every kv and tensor info of a real file, arrays cut to 40
#     elements, tensors shrunk to one row of their own type, so the seeds are
#     small, valid and carry real key names, value types and tensor types;
#   - header prefixes of each real file (truncations inside kvs / tensor infos);
#   - seeded bit flips and byte sets of the mini files;
#   - our writer's sample file (every value type, nested arrays) when the
#     test_gguf binary is built (build/tests/test_gguf).
# Python 3 standard library only. Usage: fuzz/make_corpus.sh [SHARED_DIR]
set -eu
cd "$(dirname "$0")/.."
SHARED="${1:-../shared}"
OUT=fuzz/corpus-work/gguf
mkdir -p "$OUT"
[ -d "$SHARED" ] || { echo "no $SHARED: only the writer sample is added"; }
if [ -x build/tests/test_gguf ]; then build/tests/test_gguf --write-sample "$OUT/sample.gguf.bin"; fi

python3 - "$SHARED" "$OUT" <<'PY'
import os, random, struct, sys
shared, out = sys.argv[1], sys.argv[2]
SZ = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
# ggml type -> (block size, bytes per block)
BLK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 36),
       10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
       24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 30: (1, 2)}
MAXA = 40

class R:
    def __init__(s, b): s.b, s.o = b, 0
    def take(s, n): v = s.b[s.o:s.o + n]; s.o += n; return v
    def u32(s): return struct.unpack("<I", s.take(4))[0]
    def u64(s): return struct.unpack("<Q", s.take(8))[0]
    def str(s): return s.take(s.u64())

def val(r, t):
    """Read a value of type t; return its re-encoded (shortened) payload."""
    if t in SZ: return r.take(SZ[t])
    if t == 8: s = r.str(); return struct.pack("<Q", len(s)) + s
    et, n = r.u32(), r.u64()
    items = [val(r, et) for _ in range(n)]
    items = items[:MAXA]
    return struct.pack("<IQ", et, len(items)) + b"".join(items)

def mini(path):
    b = open(path, "rb").read()
    r = R(b)
    assert r.take(4) == b"GGUF"
    ver, nt, nkv = r.u32(), r.u64(), r.u64()
    kvs, align = [], 32
    for _ in range(nkv):
        k = r.str(); t = r.u32(); p = val(r, t)
        if k == b"general.alignment": align = struct.unpack("<I", p)[0]
        kvs.append(struct.pack("<Q", len(k)) + k + struct.pack("<I", t) + p)
    infos, data = [], b""
    for _ in range(nt):
        name = r.str(); nd = r.u32(); ne = [r.u64() for _ in range(nd)]; typ = r.u32(); r.u64()
        bs, ts = BLK[typ]
        ne = [bs] + [1] * (nd - 1)
        off = len(data)
        data += bytes((i * 37 + off) & 255 for i in range(ts)) + b"\0" * ((-ts) % align)
        infos.append(struct.pack("<Q", len(name)) + name + struct.pack("<I", nd) +
                     b"".join(struct.pack("<Q", x) for x in ne) + struct.pack("<IQ", typ, off))
    head = b"GGUF" + struct.pack("<IQQ", ver, nt, nkv) + b"".join(kvs) + b"".join(infos)
    head += b"\0" * ((-len(head)) % align)
    return head + data, r.o

files = []
for d in ("models", "tokenizers/vocab-gguf"):
    for root, _, names in os.walk(os.path.join(shared, d)):
        files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".gguf")]
rng = random.Random(1234)
n_out = 0
def put(name, blob):
    global n_out
    open(os.path.join(out, name), "wb").write(blob); n_out += 1
for f in sorted(files):
    base = os.path.basename(f)[:-5]
    m, hdr_end = mini(f)
    put(base + ".mini", m)
    raw = open(f, "rb").read(min(hdr_end, 1 << 16))
    for frac in (0.1, 0.5, 0.9):
        put("%s.prefix%d" % (base, int(frac * 100)), raw[:int(len(raw) * frac)])
    for k in range(4):
        b = bytearray(m)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(min(len(b), 4096))
            if rng.random() < 0.5: b[i] ^= 1 << rng.randrange(8)
            else: b[i] = rng.choice((0, 1, 0x7f, 0x80, 0xff, rng.randrange(256)))
        put("%s.flip%d" % (base, k), bytes(b))
print("corpus: %d seeds from %d files in %s" % (n_out, len(files), out))
PY
ls "$OUT" | wc -l
du -sh "$OUT"
