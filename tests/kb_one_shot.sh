#!/usr/bin/env bash
# one-shot on examples/kb (hand-written notes, labelled in bench/kb_labels.json):
# finds the labelled near-duplicates and groups them into clusters, its
# cross-links are mostly labelled ones, the summary leads with misfiled entries
# then clusters and prints whole titles; skips the malformed line, honours the
# deletion, reuses its cache, survives a damaged cache, and fails clearly on a
# missing KB.
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 examples/kb/make_kb.py --check || { echo "FAIL: examples/kb/data.log or bench/kb_labels.json is stale"; exit 1; }
cp examples/kb/data.log "$tmp/"
"$BIN" one-shot "$tmp" > "$tmp/out.txt" 2> "$tmp/err.txt"
grep -q "not a JSON object" "$tmp/err.txt" || { echo "FAIL: malformed line not reported"; exit 1; }
python3 - "$tmp/insights.json" "$tmp/data.log" bench/kb_labels.json "$tmp/out.txt" <<'PY'
import json, sys
ins = json.load(open(sys.argv[1]))
log = open(sys.argv[2], 'rb').read()
lab = json.load(open(sys.argv[3]))
out = open(sys.argv[4], encoding='utf-8').read()
titles, off = {}, 0
for line in log.split(b'\n'):
    try:
        o = json.loads(line)
        if 'title' in o: titles[off] = o['title']
    except ValueError:
        pass
    off += len(line) + 1
assert ins['entries'] == lab['entries'] == 273, ins['entries']
assert ins['embedder'] == 'lexical-384'
key = lambda a, b: frozenset((titles[a], titles[b]))
dup_lab = {frozenset((x, y)) for g in lab['near_duplicates'] for i, x in enumerate(g) for y in g[i + 1:]}
link_lab = {frozenset((x, y)) for g in lab['links'] for i, x in enumerate(g) for y in g[i + 1:]}
dups = [key(d['a'], d['b']) for d in ins['near_duplicates']]
found = [d for d in dups if d in dup_lab]
# the best 20 pairs (--max-dups) above the calibrated threshold: half are
# labelled near-duplicates, and most others the same fact filed under two
# topics (labelled links); bench/RESULTS.md has the numbers
assert len(dups) == 20 and len(found) >= 9, ('labelled near-duplicates found', len(found), len(dup_lab))
assert sum(d in dup_lab or d in link_lab for d in dups) >= 16, dups
links = [key(l['a'], l['b']) for l in ins['cross_links']]
assert links and sum(l in link_lab for l in links) >= 0.5 * len(links), links
assert all(l['topic_a'] != l['topic_b'] for l in ins['cross_links'])
# dup_clusters: exactly the connected components of near_duplicates
par = {}
def root(x):
    while par.setdefault(x, x) != x: x = par[x]
    return x
for d in ins['near_duplicates']: par[root(d['a'])] = root(d['b'])
comps = {}
for x in list(par): comps.setdefault(root(x), set()).add(x)
got = [c['members'] for c in ins['dup_clusters']]
assert sorted(map(sorted, comps.values())) == sorted(got), (comps, got)
assert all(m == sorted(m) for m in got)
sims = [c['similarity'] for c in ins['dup_clusters']]
assert sims == sorted(sims, reverse=True)
report = {'Monthly report slow: missing index on orders.created_at', 'Index on created_at for the monthly report',
          'Revenue report query needs the created_at index'}
assert report in [{titles[o] for o in m} for m in got], 'the index/report trio is not one cluster'
assert 'Draft: salary negotiation numbers' not in set(titles[o] for d in ins['near_duplicates'] + ins['cross_links'] for o in (d['a'], d['b']))
# the summary: misfiled first, then clusters, then links; whole titles, each
# cluster once, not one line per pair
i_mis, i_dup, i_link = out.index('likely misfiled'), out.index('near-duplicates to merge'), out.index('cross-links (')
assert i_mis < i_dup < i_link, 'summary order'
assert 'near-duplicates to merge (%d clusters, %d pairs)' % (len(got), len(dups)) in out
shown = [titles[o] for m in got for o in m] + [titles[o] for l in ins['cross_links'][:12] for o in (l['a'], l['b'])]
for t in shown:
    assert t in out, ('title not printed whole', t)
assert out.count('Revenue report query needs the created_at index') == 1
print("labelled near-duplicates %d/%d, %d clusters; cross-links %d/%d labelled" %
      (len(found), len(dup_lab), len(got), sum(l in link_lab for l in links), len(links)))
PY
grep -q "273 embedded now" "$tmp/out.txt" || { echo "FAIL: first pass should embed all"; exit 1; }
"$BIN" one-shot "$tmp" > "$tmp/out2.txt"
grep -q ", 0 embedded now" "$tmp/out2.txt" || { echo "FAIL: second pass did not reuse the cache"; cat "$tmp/out2.txt"; exit 1; }
cmp <(python3 -m json.tool "$tmp/insights.json") <(python3 -m json.tool "$tmp/insights.json") >/dev/null
# damage the cache: warned, discarded, rebuilt
printf 'garbage' | dd of="$tmp/embeddings.bin" bs=1 seek=40 conv=notrunc 2>/dev/null
"$BIN" one-shot "$tmp" > "$tmp/out3.txt" 2> "$tmp/err3.txt"
grep -q "checksum mismatch" "$tmp/err3.txt" || { echo "FAIL: damaged cache not reported"; cat "$tmp/err3.txt"; exit 1; }
grep -q "273 embedded now" "$tmp/out3.txt" || { echo "FAIL: damaged cache not rebuilt"; exit 1; }
# missing KB: clear error, exit 1
if "$BIN" one-shot "$tmp/nope" 2> "$tmp/err4.txt"; then echo "FAIL: missing KB accepted"; exit 1; fi
grep -q "nope" "$tmp/err4.txt" || { echo "FAIL: error does not name the KB"; exit 1; }
echo "1 passed, 0 failed"
