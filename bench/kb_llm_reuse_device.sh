#!/usr/bin/env bash
# kb_llm_reuse_device.sh — hx_classify's head reuse on a GPU: the correctness
# check, an optional A/B against a binary without it, then issue 21's speed
# figures against llama-server in one run. From the repo root, on the GPU
# machine, with binaries built there (.devbin/ by default):
#
#   bash bench/kb_llm_reuse_device.sh --model M.gguf (--llama-server BIN | --build-llama DIR)
#        [--entries 10000] [--summaries 1000] [--base-bench OLD_kb_llm_bench] [--skip-check]
#
#   1. test_classify_reuse --cuda (HX_TEST_CLS, default .devbin/test_classify_reuse):
#      every prompt's label log-probabilities with head reuse against the prompt
#      alone, synthetic smollm (+ ../shared's tiny models when present), 4/3/1
#      sequences, a gemma3 ring; one line per case "worst |ds|/(1+|s|) X, |dp| Y;
#      N computed, R reused", then "test_classify_reuse: C checks, F failures".
#   2. with --base-bench: kb_llm_bench (base, then new, three times alternating)
#      on 2,048 notes, classification only; one JSON line each (entries_per_s,
#      prompt_tokens_per_s counted per note, shared_head_tokens from the new one).
#   3. bench/kb_llm_peer.sh --device cuda --entries N --summaries M: pp512,
#      helix and llama-server classification and summaries; its table, the
#      ratios (goal 10x entries/s, 60% of pp512, 2x summaries) and the rows it
#      appends to bench/kb_llm_peer.jsonl.
# Binaries: HX_BIN (.devbin/helix-bg), HX_KB_LLM_BENCH (.devbin/kb_llm_bench).
set -euo pipefail
cd "$(dirname "$0")/.."
model="" llama=() entries=10000 summaries=1000 base="" check=1
die() { echo "kb_llm_reuse_device: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) model=${2:?}; shift 2 ;;
    --llama-server|--build-llama) llama=("$1" "${2:?}"); shift 2 ;;
    --entries) entries=${2:?}; shift 2 ;;
    --summaries) summaries=${2:?}; shift 2 ;;
    --base-bench) base=${2:?}; shift 2 ;;
    --skip-check) check=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
done
[[ -f $model ]] || die "give --model FILE.gguf"
[[ ${#llama[@]} -eq 2 ]] || die "give --llama-server BIN or --build-llama DIR"
export HX_BIN=${HX_BIN:-.devbin/helix-bg} HX_KB_LLM_BENCH=${HX_KB_LLM_BENCH:-.devbin/kb_llm_bench}
test_bin=${HX_TEST_CLS:-.devbin/test_classify_reuse}
[[ -x $HX_BIN && -x $HX_KB_LLM_BENCH ]] || die "no $HX_BIN or $HX_KB_LLM_BENCH (set HX_BIN / HX_KB_LLM_BENCH)"
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
rc=0
if [[ $check == 1 ]]; then
  echo "== 1. test_classify_reuse --cuda"
  if [[ -x $test_bin ]]; then "$test_bin" --cuda || rc=1
  else echo "no $test_bin (set HX_TEST_CLS): check not run"; fi
fi
if [[ -n $base ]]; then
  echo "== 2. kb_llm_bench base ($base) / new ($HX_KB_LLM_BENCH), 2048 notes, alternating"
  for r in 1 2 3; do
    for b in "$base" "$HX_KB_LLM_BENCH"; do
      "$b" "$model" --n 2048 --summaries 0 --device cuda --jsonl --label "$(basename "$b")-$r" 2>/dev/null | grep '^{' || rc=1
    done
  done
fi
echo "== 3. kb_llm_peer.sh --device cuda --entries $entries --summaries $summaries"
bash bench/kb_llm_peer.sh --device cuda --entries "$entries" --summaries "$summaries" --model "$model" "${llama[@]}" || rc=1
exit $rc
