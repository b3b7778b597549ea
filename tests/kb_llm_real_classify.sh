#!/usr/bin/env bash
# A real decoder classifies the labelled examples/kb (bench/kb_labels.json,
# through bench/kb_classify_eval.py): alone (its calibrated answer) better than
# chance (the largest topic's share), and combined with the centroid (think.c:
# the product of both, weighted by a fit on the KB's own filed topics) better
# than the centroid baseline of the same pass, with a lower negative
# log-likelihood of the filed topics than either alone. SmolLM2-135M-Instruct
# Q4_1 from bench/real_models_fetch.sh (HX_REAL_CLASSIFY_MODEL picks another);
# skipped where it is absent. It runs the whole LLM stage on the CPU: minutes
# on a small machine.
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
M=${HX_REAL_CLASSIFY_MODEL:-${HELIX_REAL_DIR:-$HOME/.cache/helix/real}/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$M" ] || { echo "skip: $M absent (bash bench/real_models_fetch.sh fetches it)"; exit 77; }
# the whole LLM stage of 273 notes: minutes in a release build, far longer under the sanitizers
[ -z "${HX_TEST_SANITIZE:-}" ] || { echo "skip: under the sanitizers (the release run checks it)"; exit 77; }
command -v python3 >/dev/null || { echo "skip: python3 not found"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
run() { python3 bench/kb_classify_eval.py --bin "$BIN" --json "$@"; }
base=$(run)
flags=(--llm-model "$M" -- --llm-device cpu --summarize-min-words 100000)
both=$(run --keep "$tmp/kb" "${flags[@]}")
# the same answers from llm.bin (no prompt runs again), not combined
alone=$(run --keep "$tmp/kb" --llm-alone "${flags[@]}")
python3 - "$base" "$both" "$alone" <<'PY'
import json, sys
base, both, alone = (json.loads(a) for a in sys.argv[1:])
print("centroid (%s): accuracy %.3f; llm alone %.3f; llm+centroid %.3f (%d/%d; weights llm %.3f, centroid %.3f); "
      "chance %.3f" % (base["space"], base["accuracy"], alone["accuracy"], both["accuracy"], both["correct"],
                       both["classified"], both["weights"][0], both["weights"][1], both["chance"]))
print("NLL of the filed topics:", both["nll"])
assert alone["classifier"] == "llm" and alone["weights"] == [1, 0] and alone["classified"] == 273, alone
assert alone["accuracy"] >= 1.5 * alone["chance"], ("llm topic accuracy near chance", alone["accuracy"], alone["chance"])
assert both["classified"] == 273, both
nll = both["nll"]
assert nll["combined"] < min(nll["llm"], nll["centroid"]), ("the fit did not improve on either classifier", nll)
assert both["classifier"] == "llm" and both["weights"][1] > 0, ("not combined with the centroid", both)
assert both["weights"][0] > 0, ("the LLM got no weight", both)
assert both["accuracy"] > base["accuracy"], ("no better than the centroid", both["accuracy"], base["accuracy"])
PY
echo "1 passed, 0 failed"
