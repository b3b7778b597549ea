#!/usr/bin/env bash
# kb_llm_peer.sh — the KB's LLM stages (issue 21's speed figures) on helix and on
# llama.cpp's llama-server in one run, on the same notes and the same prompts:
#
#   classification: N synthetic notes of 20-200 words (note i drawn mostly from
#     topic i % 12's words) against 12 topics. helix: bench/kb_llm_bench, the
#     daemon's own calls (kb_llm_classify in chunks of 64: prefill only, every
#     topic's probability). llama-server: one /completion per note whose answer
#     is a json_schema enum of the topics, --np requests in flight (the way
#     people do it today). Both: entries/s, prompt tokens/s, accuracy.
#   summaries: greedy answers of at most --max-tokens to the first M notes'
#     summary prompts (helix: kb_llm_generate; llama-server: plain /completion,
#     temperature 0, --np in flight). Aggregate generated tokens/s.
#   pp512: helix-bg bench -p 512 -n 0 on the same model, so the classification's
#     prompt tokens/s can be read as a share of helix's own prefill speed.
#
#   bash bench/kb_llm_peer.sh --model FILE.gguf [--device cpu|cuda] [--entries 10000]
#        [--summaries 1000] [--max-tokens 40] [--np 32] [--ctx-slot 1024] [-t THREADS]
#        [--n-seq 16] [--engines helix,llama.cpp] [--jsonl FILE] [--label NAME]
#        [--letter-labels] [--llama-server BIN] [--build-llama DIR] [--logs DIR]
#
# The prompts are helix's (kb_llm_bench --dump: chat template applied), sent to
# llama-server as text, so both engines read the same tokens. llama-server runs
# with --np slots of --ctx-slot positions each (--no-kv-unified), -b 512 -ub 512,
# continuous batching, -fa on, all layers on the GPU with --device cuda (-ngl 99)
# and none on cpu, its host-RAM prompt cache off (--cache-ram 0; each slot still
# reuses the prefix its last prompt shared with the next, as by default: the
# system text and topic list). helix classifies on a context of --n-seq
# sequences (the daemon's default, 16) of 1,024 positions.
#
# helix's programs: $HX_BIN (default build/helix-bg) and $HX_KB_LLM_BENCH
# (default build/kb_llm_bench), e.g. HX_BIN=.devbin/helix-bg
# HX_KB_LLM_BENCH=.devbin/kb_llm_bench for binaries built elsewhere.
# llama-server: --llama-server BIN, else $LLAMA_SERVER, else --build-llama DIR
# (built from .peer/llama.cpp by bench/serve_peer.sh --build-llama, CUDA for
# sm_90 with --device cuda, unless DIR/bin/llama-server exists). Its folder is put
# first on LD_LIBRARY_PATH, so a copied build finds its own libraries.
# Rows (date, commit, device, engine, model, mix, test, tokens_per_s,
# entries_per_s, concurrency, load: the 1-minute load average at the start and
# end, ...) are appended to --jsonl (default bench/kb_llm_peer.jsonl); a table
# and the ratios go to stdout. If llama-server's requests fail, helix's rows are
# still written and the exit status is 1.
set -euo pipefail
cd "$(dirname "$0")/.."
model="" device="" entries=10000 summaries="" max_tokens=40 np=32 ctx_slot=1024 threads="" n_seq=16
engines=helix,llama.cpp jsonl=bench/kb_llm_peer.jsonl label="" letters=0 logs=""
llama=${LLAMA_SERVER:-} build_llama="" helix=${HX_BIN:-build/helix-bg} bench_bin=${HX_KB_LLM_BENCH:-build/kb_llm_bench}
die() { echo "kb_llm_peer: $*" >&2; exit 1; }
need() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value (--help)"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    -m|--model) need "$@"; model=$2; shift 2 ;;
    --device) need "$@"; device=$2; shift 2 ;;
    --entries) need "$@"; entries=$2; shift 2 ;;
    --summaries) need "$@"; summaries=$2; shift 2 ;;
    --max-tokens) need "$@"; max_tokens=$2; shift 2 ;;
    --np) need "$@"; np=$2; shift 2 ;;
    --ctx-slot) need "$@"; ctx_slot=$2; shift 2 ;;
    -t|--threads) need "$@"; threads=$2; shift 2 ;;
    --n-seq) need "$@"; n_seq=$2; shift 2 ;;
    --engines) need "$@"; engines=$2; shift 2 ;;
    --jsonl) need "$@"; jsonl=$2; shift 2 ;;
    --label) need "$@"; label=$2; shift 2 ;;
    --letter-labels) letters=1; shift ;;
    --llama-server) need "$@"; llama=$2; shift 2 ;;
    --build-llama) need "$@"; build_llama=$2; shift 2 ;;
    --logs) need "$@"; logs=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
done
[[ -n "$model" ]] || die "give the model: --model FILE.gguf"
[[ -f "$model" ]] || die "--model: no file '$model'"
if [[ -z "$device" ]]; then device=cpu; nvidia-smi -L >/dev/null 2>&1 && device=cuda; fi
[[ $device == cpu || $device == cuda ]] || die "--device cpu or cuda (got '$device')"
int() { [[ $2 =~ ^[0-9]+$ && $2 -ge $3 ]] || die "$1 wants a whole number >= $3 (got '$2')"; }
int --entries "$entries" 1
[[ -n "$summaries" ]] || summaries=$((entries < 1000 ? entries : 1000))
int --summaries "$summaries" 0
((summaries <= entries)) || die "--summaries $summaries is more than --entries $entries"
int --max-tokens "$max_tokens" 1; int --np "$np" 1; int --ctx-slot "$ctx_slot" 64; int --n-seq "$n_seq" 1
[[ -n "$threads" ]] || threads=$(nproc)
int --threads "$threads" 1
run_helix=0 run_llama=0
IFS=, read -ra which <<< "$engines"
for eng in "${which[@]}"; do
  case $eng in helix) run_helix=1 ;; llama.cpp) run_llama=1 ;; *) die "--engines: unknown engine '$eng' (helix, llama.cpp)" ;; esac
done
[[ -x "$bench_bin" ]] || die "no kb_llm_bench at '$bench_bin' (build helix first, or set HX_KB_LLM_BENCH)"
[[ $run_helix == 0 || -x "$helix" ]] || die "no helix-bg at '$helix' (build helix first, or set HX_BIN)"
if [[ $run_llama == 1 && -z "$llama" ]]; then
  [[ -n "$build_llama" ]] || die "llama.cpp: give --llama-server BIN, LLAMA_SERVER=BIN or --build-llama DIR"
  bash bench/serve_peer.sh --build-llama "$build_llama" --device "$device"
  llama=$build_llama/bin/llama-server
fi
[[ $run_llama == 0 || -x "$llama" ]] || die "--llama-server: no executable '$llama'"
keep_logs=0
if [[ -z "$logs" ]]; then logs=$(mktemp -d /tmp/kb_llm_peer.XXXXXX); else mkdir -p "$logs"; keep_logs=1; fi
label=${label:-$(basename "$model" .gguf)}
if [[ $device == cuda ]]; then devname=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
else devname="cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $threads threads"; fi
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
load0=$(cut -d' ' -f1 /proc/loadavg)
echo "# $(date -u +%FT%TZ) $devname; load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
lflag=(); [[ $letters == 1 ]] && lflag=(--letter-labels)
prompts=$logs/prompts.jsonl

# helix: pp512 first (the reference for the classification's prompt tokens/s),
# then both stages; kb_llm_bench writes the prompts for the peer before timing
if [[ $run_helix == 1 ]]; then
  echo "# helix: pp512" >&2
  "$helix" bench -m "$model" -p 512 -n 0 -r 3 -t "$threads" --device "$device" --jsonl > "$logs/pp512.jsonl" \
    2> "$logs/pp512.log" || { tail -5 "$logs/pp512.log" >&2; die "helix-bg bench failed (log: $logs/pp512.log)"; }
  echo "# helix: $entries classifications, $summaries summaries" >&2
  "$bench_bin" "$model" --n "$entries" --summaries "$summaries" --max-tokens "$max_tokens" --device "$device" \
    -t "$threads" --n-seq "$n_seq" --label "$label" "${lflag[@]}" --jsonl --dump "$prompts" \
    > "$logs/helix.out" 2> "$logs/helix.log" ||
    { tail -5 "$logs/helix.log" >&2; die "kb_llm_bench failed (log: $logs/helix.log)"; }
  grep -v '^{' "$logs/helix.out" >&2 || true
else
  "$bench_bin" "$model" --n "$entries" --summaries "$summaries" --max-tokens "$max_tokens" --device cpu -t "$threads" \
    --label "$label" "${lflag[@]}" --dump "$prompts" --dump-only 2> "$logs/helix.log" ||
    { tail -5 "$logs/helix.log" >&2; die "kb_llm_bench --dump-only failed (log: $logs/helix.log)"; }
fi

source bench/server_util.bash
llama_args=() fail=0
if [[ $run_llama == 1 ]]; then
  port=$(free_port)
  ngl=0; [[ $device == cuda ]] && ngl=99
  llama_args=(-np "$np" -c $((np * ctx_slot)) --no-kv-unified -b 512 -ub 512 -cb -fa on -ngl "$ngl" -t "$threads"
              --cache-ram 0 --no-webui)
  echo "# llama.cpp: $llama -m $model ${llama_args[*]}" >&2
  LD_LIBRARY_PATH="$(dirname "$llama")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$llama" -m "$model" --host 127.0.0.1 --port "$port" "${llama_args[@]}" > "$logs/llama-server.log" 2>&1 &
  pid=$!
  wait_ready "$port" "$logs/llama-server.log"
  stages=classify; [[ $summaries -gt 0 ]] && stages=classify,summaries
  echo "# llama.cpp: $entries classifications, $summaries summaries, $np in flight" >&2
  # a failure here still leaves helix's rows to write below
  python3 bench/kb_llm_peer.py --port "$port" --prompts "$prompts" --concurrency "$np" --stages "$stages" \
    > "$logs/llama.out" || { fail=1; keep_logs=1; echo "kb_llm_peer: kb_llm_peer.py failed (server log: $logs/llama-server.log)" >&2; }
  stop_server
fi

# rows for results.jsonl and the table
# load: the 1-minute load average at the start and at the end of the run
python3 - "$logs" "$jsonl" "$commit" "$devname" "$label" "$threads" "$n_seq" "$np" "$run_helix" "$run_llama" \
  "$(basename "$llama") ${llama_args[*]}" "$letters" "$load0-$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import datetime, json, os, sys
logs, out, commit, dev, label, threads, n_seq, np, rh, rl, largs, letters, load = sys.argv[1:]
def rows(path):
    if not os.path.exists(path): return []
    return [json.loads(l) for l in open(path) if l.startswith("{")]
pp = rows(f"{logs}/pp512.jsonl")
mix = pp[0]["mix"] if pp else ""
model = pp[0]["model"] if pp else label
base = {"date": datetime.date.today().isoformat(), "commit": commit, "device": dev, "load": load}
suffix = "-letters" if letters == "1" else ""
res, ppv = [], None
for r in pp:
    ppv = r["tokens_per_s"]
    res.append(dict(base, engine="helix", model=model, mix=mix, test="pp512", tokens_per_s=round(ppv, 1),
                    threads=int(threads)))
for r in rows(f"{logs}/helix.out"):
    test = r["bench"] + suffix
    row = dict(base, engine="helix", model=model, mix=mix, test=test)
    if r["bench"] == "kb-classify":
        row.update(tokens_per_s=r["prompt_tokens_per_s"], entries_per_s=r["entries_per_s"],
                   concurrency=r["n_seq"], entries=r["entries"], seconds=r["seconds"],
                   prompt_tokens=r["prompt_tokens"], accuracy=r["accuracy"])
        if "shared_head_tokens" in r: row["shared_head_tokens"] = r["shared_head_tokens"]
        if ppv: row["of_pp512"] = round(r["prompt_tokens_per_s"] / ppv, 3)
    else:
        row.update(tokens_per_s=r["generated_tokens_per_s"], entries_per_s=r["entries_per_s"],
                   concurrency=r["n_seq"], entries=r["entries"], seconds=r["seconds"],
                   generated_tokens=r["generated_tokens"], max_tokens=r["max_tokens"])
    row["threads"] = int(threads)
    res.append(row)
for r in rows(f"{logs}/llama.out"):
    row = dict(base, engine="llama.cpp", model=model, mix=mix, test=r["test"] + suffix, commit="d32676d")
    tps = r["prompt_tokens_per_s"] if r["test"] == "kb-classify" else r["generated_tokens_per_s"]
    row.update(tokens_per_s=tps, entries_per_s=r["entries_per_s"], concurrency=r["concurrency"],
               entries=r["entries"], seconds=r["seconds"])
    for k in ("prompt_tokens", "prompt_tokens_processed", "accuracy", "invalid", "generated_tokens", "max_tokens"):
        if k in r: row[k] = r[k]
    row.update(threads=int(threads), settings=largs)
    res.append(row)
with open(out, "a") as f:
    for row in res: f.write(json.dumps(row) + "\n")
print(f"{'engine':10} {'test':18} {'entries':>8} {'seconds':>9} {'entries/s':>10} {'tok/s':>10} {'acc':>6}  in flight")
for r in res:
    print(f"{r['engine']:10} {r['test']:18} {r.get('entries', ''):>8} {r.get('seconds', ''):>9} "
          f"{r.get('entries_per_s', ''):>10} {r['tokens_per_s']:>10} {r.get('accuracy', ''):>6}  {r.get('concurrency', '')}")
get = lambda e, t: next((r for r in res if r["engine"] == e and r["test"] == t + suffix), None)
hc, lc = get("helix", "kb-classify"), get("llama.cpp", "kb-classify")
hs, ls = get("helix", "kb-summaries"), get("llama.cpp", "kb-summaries")
if hc and lc: print(f"classification: helix / llama-server = {hc['entries_per_s'] / lc['entries_per_s']:.2f}x entries/s (goal 10x)")
if hc and ppv: print(f"classification prompt tok/s = {100 * hc['tokens_per_s'] / ppv:.0f}% of helix pp512 {ppv:.0f} (goal 60%)")
if hs and ls and ls["tokens_per_s"]: print(f"summaries: helix / llama-server = {hs['tokens_per_s'] / ls['tokens_per_s']:.2f}x generated tok/s (goal 2x)")
print(f"# {len(res)} rows appended to {out}")
PY
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg); logs: $logs" >&2
[[ $keep_logs == 1 ]] || rm -rf "$logs"
exit $fail
