"""helix-bg serve with per-request LoRA adapters on the CPU.

Two random PEFT folders (written here, pure Python: adapter_config.json +
adapter_model.safetensors, rank 4 on every projection of the synthetic
2-layer smollm-135m) loaded with --lora alpha=DIR --lora beta=DIR. Greedy
completions without an adapter, with "lora": "alpha" and with "adapter":
"beta" differ from each other, and each is the same when asked again after
the server switched to another adapter (the switch leaves nothing behind);
requests of both adapters and the base sent at once, on 2 slots, each get
their sequential answer (turns, never a batch that mixes adapters); an
unknown name or a non-string is a 400 naming the problem."""
import json
import os
import random
import shutil
import struct
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import Checks, Server, log, synth_model  # noqa: E402

# smollm-135m's shapes (helix-bg synth --preset smollm-135m), 2 layers
D, NQ, NKV, FF, NL, R = 576, 576, 192, 1536, 2, 4
SHAPES = {"self_attn.q_proj": (D, NQ), "self_attn.k_proj": (D, NKV), "self_attn.v_proj": (D, NKV),
          "self_attn.o_proj": (NQ, D), "mlp.gate_proj": (D, FF), "mlp.up_proj": (D, FF), "mlp.down_proj": (FF, D)}


def write_peft(path, seed):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": R, "lora_alpha": 2 * R, "bias": "none",
                   "target_modules": [k.split(".")[1] for k in SHAPES]}, f)
    rng = random.Random(seed)
    header, blobs, off = {}, [], 0
    for l in range(NL):
        for name, (n_in, n_out) in SHAPES.items():
            for ab, (rows, cols, amp) in (("A", (R, n_in, 1.0 / n_in ** 0.5)), ("B", (n_out, R, 4.0))):
                data = struct.pack("<%df" % (rows * cols), *[rng.uniform(-amp, amp) for _ in range(rows * cols)])
                key = "base_model.model.model.layers.%d.%s.lora_%s.weight" % (l, name, ab)
                header[key] = {"dtype": "F32", "shape": [rows, cols], "data_offsets": [off, off + len(data)]}
                blobs.append(data)
                off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(path, "adapter_model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


check = Checks()
tmp = tempfile.mkdtemp(prefix="hx-serve-lora-")
try:
    a_dir, b_dir = os.path.join(tmp, "alpha"), os.path.join(tmp, "beta")
    write_peft(a_dir, 1)
    write_peft(b_dir, 2)
    model = synth_model()
    srv = Server(["-m", model, "-np", "2", "-c", "1024", "-t", "2", "--lora", "alpha=" + a_dir,
                  "--lora", "beta=" + b_dir])

    def complete(extra, prompt="1 2 3 4"):
        body = {"prompt": prompt, "max_tokens": 12, "temperature": 0, "ignore_eos": True}
        body.update(extra)
        st, out = srv.json("POST", "/v1/completions", body)
        return st, (out["choices"][0]["text"] if st == 200 else out)

    st0, base = complete({})
    sta, alpha = complete({"lora": "alpha"})
    stb, beta = complete({"adapter": "beta"})
    check(st0 == 200 and sta == 200 and stb == 200, "completions answered: %s %s %s" % (st0, sta, stb))
    log("base %r\nalpha %r\nbeta %r" % (base, alpha, beta))
    check(alpha != base, "the alpha adapter changes the greedy text")
    check(beta != alpha and beta != base, "beta differs from alpha and from the base")
    check(complete({"lora": None})[1] == base, "\"lora\": null is the base, the same text after the switch back")
    check(complete({"lora": ""})[1] == base, "\"lora\": \"\" is the base")
    check(complete({"lora": "alpha"})[1] == alpha, "alpha again: the same text")

    # all at once on 2 slots: each answer equals its sequential one
    want = {"": base, "alpha": alpha, "beta": beta}
    order = ["alpha", "", "beta", "alpha", "", "beta", "alpha", ""]
    got = [None] * len(order)

    def run(i):
        got[i] = complete({"lora": order[i]} if order[i] else {})

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(order))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    for i, name in enumerate(order):
        check(got[i] is not None and got[i][0] == 200 and got[i][1] == want[name],
              "concurrent request %d (%s) got its adapter's text: %r" % (i, name or "base", got[i]))

    st, err = complete({"lora": "gamma"})
    check(st == 400 and "gamma" in err["error"]["message"], "an unknown adapter is a 400 naming it: %s %s" % (st, err))
    st, err = complete({"lora": 3})
    check(st == 400 and "lora" in err["error"]["message"], "a non-string adapter is a 400: %s %s" % (st, err))
    st, err = complete({"lora": "alpha", "adapter": "beta"})
    check(st == 400, "'lora' and 'adapter' naming different adapters is a 400: %s" % st)
    check(srv.close() == 0, "server exits cleanly")

    # bad flags fail before serving, naming the problem
    for args, what in ((["--lora", "noequals"], "NAME=FILE"), (["--lora", "x=" + tmp + "/missing"], "missing"),
                       (["--lora", "a=" + a_dir, "--lora", "a=" + b_dir], "twice")):
        try:
            s2 = Server(["-m", model, "-t", "2"] + args)
            s2.close()
            check(False, "serve %s should fail" % args)
        except RuntimeError as e:
            check(what in str(e), "serve %s fails naming '%s'" % (args, what))
finally:
    shutil.rmtree(tmp, ignore_errors=True)
check.finish()
