#!/usr/bin/env bash
# tests/data/wpm_specials/golden.jsonl is what transformers' BertTokenizerFast
# gives today (test_wpm_specials checks helix against that file). Skips without
# transformers or without ../shared's bert-base-uncased vocabulary.
set -euo pipefail
vocab=../shared/tokenizers/bert-base-uncased.vocab.txt
[ -f "$vocab" ] || { echo "skip: $vocab absent"; exit 77; }
py=""
for p in "${HX_HF_PYTHON:-}" /tmp/hf-venv/bin/python python3; do
  [ -n "$p" ] && "$p" -c "import transformers" 2> /dev/null && { py=$p; break; }
done
[ -n "$py" ] || { echo "skip: no python with transformers (set HX_HF_PYTHON)"; exit 77; }
"$py" tests/data/wpm_specials/make_golden.py "$vocab" --check
