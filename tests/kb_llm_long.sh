#!/usr/bin/env bash
# A note longer than one of the LLM's sequences (here ~2,000 tokens against
# 1,024 positions) is still classified: its prompt keeps fewer words until it
# fits (src/kb/llm.c), instead of failing the whole classification stage.
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/kb"
python3 - "$tmp/kb/data.log" <<'PY'
import json, sys
long_text = " ".join(["replication", "lag", "grew", "while", "the", "orders", "index", "was", "rebuilt"] * 45)
E = [("databases", "Replica lag during reindex", long_text),
     ("databases", "Connection pool exhausted", "The connection pool ran dry at peak; pgbouncer fixed it."),
     ("cooking", "Pasta water", "Use a litre of water per hundred grams of pasta and salt it well."),
     ("cooking", "Crispy potatoes", "Parboil the potatoes, rough them up, roast them in hot fat.")]
with open(sys.argv[1], "w") as f:
    for t, ti, tx in E:
        f.write(json.dumps({"topic": t, "title": ti, "text": tx}) + "\n")
PY
"$BIN" synth --preset smollm-135m --type q8_0 --layers 1 --vocab 512 -o "$tmp/m.gguf" -t 2 > /dev/null
"$BIN" one-shot "$tmp/kb" --llm-model "$tmp/m.gguf" --llm-device cpu --summarize-min-words 100000 -t 2 > "$tmp/out.txt" 2>&1 ||
  { echo "FAIL: one-shot with a note longer than a sequence"; cat "$tmp/out.txt"; exit 1; }
if grep -q "do not fit" "$tmp/out.txt"; then echo "FAIL: classification refused the long note"; cat "$tmp/out.txt"; exit 1; fi
python3 - "$tmp/kb/insights.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["classifier"] != "centroid", d["classifier"]
assert len(d["classifications"]) == 4, d["classifications"]
assert all(0 < c["probability"] <= 1 for c in d["classifications"])
PY
echo "kb_llm_long: ok"
