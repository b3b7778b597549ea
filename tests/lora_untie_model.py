#!/usr/bin/env python3
"""lora_untie_model.py IN.gguf OUT.gguf — a copy of a GGUF decoder whose output head is tied to its token
embedding (no output.weight tensor) with an explicit output.weight: the bytes of token_embd.weight, same
type and shape. Everything else (metadata, tensor infos, data) is copied byte for byte. Standard library
only; prints the sha256 of OUT.

Why: llama.cpp decides that the head is tied by output.weight's absence and then runs the head on a
duplicate of token_embd.weight that keeps that name, so an adapter pair for token_embd.weight is applied
to the head too, as an ordinary pair, whose lora_a (ne [r, n_vocab]) does not fit the head's input: llama.cpp
aborts (GGML_ASSERT ggml_can_mul_mat). An adapter on output.weight cannot be loaded for a tied base at all.
The untied copy computes the same function and lets both engines run adapters on token_embd.weight and
on output.weight (bench/lora_llama_compare.py, tests/lora_llama.sh).
"""
import hashlib
import struct
import sys

# bytes per block and values per block of the GGML types a token embedding is stored in
TYPE_SIZE = {0: (4, 1), 1: (2, 1), 2: (18, 32), 3: (20, 32), 6: (22, 32), 7: (24, 32), 8: (34, 32),
             10: (84, 256), 11: (110, 256), 12: (144, 256), 13: (176, 256), 14: (210, 256), 30: (2, 1)}
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUF value type -> bytes


class Reader:
    def __init__(self, buf):
        self.b, self.o = buf, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.b, self.o)
        self.o += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string(self):
        n = self.take("Q")
        s = self.b[self.o:self.o + n]
        self.o += n
        return s.decode("utf-8")

    def skip_value(self, t):
        """Skips a value of GGUF type t; returns it when it is a u32/u64 scalar (for general.alignment)."""
        if t in SCALAR:
            v = struct.unpack_from("<" + {1: "B", 2: "H", 4: "I", 8: "Q"}[SCALAR[t]], self.b, self.o)[0]
            self.o += SCALAR[t]
            return v
        if t == 8:
            self.string()
            return None
        if t == 9:
            et, n = self.take("I"), self.take("Q")
            if et in SCALAR:
                self.o += SCALAR[et] * n
            else:
                for _ in range(n):
                    self.skip_value(et)
            return None
        raise ValueError("GGUF value type %d at offset %d" % (t, self.o))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    buf = open(sys.argv[1], "rb").read()
    r = Reader(buf)
    if r.take("4s") != b"GGUF":
        sys.exit("%s: not a GGUF file" % sys.argv[1])
    version, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    if version < 2:
        sys.exit("%s: GGUF version %d (2 or 3 wanted)" % (sys.argv[1], version))
    kv0 = r.o
    align = 32
    for _ in range(n_kv):
        key, t = r.string(), r.take("I")
        v = r.skip_value(t)
        if key == "general.alignment":
            align = v
    kv1 = r.o
    infos = []  # (name, dims, type, offset)
    for _ in range(n_tensors):
        name, nd = r.string(), r.take("I")
        dims = [r.take("Q") for _ in range(nd)]
        infos.append((name, dims, r.take("I"), r.take("Q")))
    data0 = (r.o + align - 1) // align * align
    names = [i[0] for i in infos]
    if "output.weight" in names:
        sys.exit("%s: already has output.weight" % sys.argv[1])
    if "token_embd.weight" not in names:
        sys.exit("%s: has no token_embd.weight" % sys.argv[1])
    _, dims, typ, off = infos[names.index("token_embd.weight")]
    if typ not in TYPE_SIZE:
        sys.exit("token_embd.weight: GGML type %d not handled here" % typ)
    bs, bn = TYPE_SIZE[typ]
    n_bytes = dims[1] * (dims[0] // bn) * bs
    end = 0  # the end of the last tensor's bytes, from the data section's start
    for name, d, t, o in infos:
        if t not in TYPE_SIZE:  # a size not known here: the data runs to the end of the file
            end = len(buf) - data0
            break
        b, n = TYPE_SIZE[t]
        cnt = 1
        for x in d:
            cnt *= x
        end = max(end, o + cnt // n * b)
    new_off = (end + align - 1) // align * align

    def s(x):
        x = x.encode()
        return struct.pack("<Q", len(x)) + x

    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, n_tensors + 1, n_kv))
    out += buf[kv0:kv1]
    for name, d, t, o in infos + [("output.weight", dims, typ, new_off)]:
        out += s(name) + struct.pack("<I", len(d)) + b"".join(struct.pack("<Q", x) for x in d) + struct.pack("<IQ", t, o)
    out += b"\0" * (-len(out) % align)
    assert len(out) % align == 0
    out += buf[data0:data0 + end]
    out += b"\0" * (new_off - end)
    out += buf[data0 + off:data0 + off + n_bytes]
    with open(sys.argv[2], "wb") as f:
        f.write(out)
    print(hashlib.sha256(out).hexdigest())


if __name__ == "__main__":
    main()
