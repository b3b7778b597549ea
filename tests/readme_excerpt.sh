#!/usr/bin/env bash
# README.md's excerpt of `bash scripts/run.sh` must be what one-shot prints on
# examples/kb today: the summary between the pass's and the think stage's
# timing lines, indented by four spaces, between the README's markers.
#   bash tests/readme_excerpt.sh            check (fails on any difference)
#   bash tests/readme_excerpt.sh --update   rewrite the README block
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp examples/kb/data.log "$tmp/"
"$BIN" one-shot "$tmp" > "$tmp/out.txt" 2> /dev/null
python3 - "$tmp/out.txt" README.md "${1:-}" <<'PY'
import re, sys
out = open(sys.argv[1], encoding="utf-8").read().split("\n")
start = next(i for i, l in enumerate(out) if re.fullmatch(r"\d+ entries in \d+ topics", l))
end = next(i for i, l in enumerate(out) if i > start and re.match(r"\d+ entries classified", l))
body = out[start:end]
while body and not body[-1].strip():
    body.pop()
block = "\n".join(("    " + l) if l else "" for l in body) + "\n"
readme = open(sys.argv[2], encoding="utf-8").read()
b, e = "<!-- run.sh excerpt: begin (tests/readme_excerpt.sh) -->\n", "<!-- run.sh excerpt: end -->"
if b not in readme or e not in readme:
    sys.exit("FAIL: README.md lacks the run.sh excerpt markers")
i, j = readme.index(b) + len(b), readme.index(e)
have = readme[i:j].strip("\n") + "\n"
want = "\n" + block + "\n"
if sys.argv[3] == "--update":
    open(sys.argv[2], "w", encoding="utf-8").write(readme[:i] + want + readme[j:])
    print("README.md excerpt updated (%d lines)" % len(body))
elif have != block:
    import difflib
    sys.stdout.writelines(difflib.unified_diff(have.splitlines(True), block.splitlines(True), "README.md", "one-shot"))
    sys.exit("FAIL: README.md's run.sh excerpt differs from the output; run bash tests/readme_excerpt.sh --update")
else:
    print("README excerpt matches the output (%d lines)" % len(body))
PY
