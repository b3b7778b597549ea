#!/usr/bin/env bash
# A real decoder classifies the labelled examples/kb (bench/kb_labels.json,
# through bench/kb_classify_eval.py) better than chance (the largest topic's
# share), beside the centroid baseline of the same pass, printed for
# comparison. SmolLM2-135M-Instruct Q4_1 from bench/real_models_fetch.sh
# (HX_REAL_CLASSIFY_MODEL picks another); skipped where it is absent. It runs
# the whole LLM stage on the CPU: minutes on a small machine.
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
M=${HX_REAL_CLASSIFY_MODEL:-${HELIX_REAL_DIR:-$HOME/.cache/helix/real}/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$M" ] || { echo "skip: $M absent (bash bench/real_models_fetch.sh fetches it)"; exit 77; }
# the whole LLM stage of 273 notes: minutes in a release build, far longer under the sanitizers
[ -z "${HX_TEST_SANITIZE:-}" ] || { echo "skip: under the sanitizers (the release run checks it)"; exit 77; }
command -v python3 >/dev/null || { echo "skip: python3 not found"; exit 77; }
base=$(python3 bench/kb_classify_eval.py --bin "$BIN" --json)
llm=$(python3 bench/kb_classify_eval.py --bin "$BIN" --json --llm-model "$M" -- --llm-device cpu --summarize-min-words 100000)
python3 - "$base" "$llm" <<'PY'
import json, sys
base, llm = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print("centroid (%s): accuracy %.3f; llm: accuracy %.3f (%d/%d); chance %.3f"
      % (base["space"], base["accuracy"], llm["accuracy"], llm["correct"], llm["classified"], llm["chance"]))
assert llm["classifier"] == "llm" and llm["classified"] == 273, llm
assert llm["accuracy"] >= 1.5 * llm["chance"], ("llm topic accuracy near chance", llm["accuracy"], llm["chance"])
PY
echo "1 passed, 0 failed"
