#!/usr/bin/env bash
# Checks that the repository documents itself: no file refers to documents outside the tree
# (a briefing folder beside the checkout), and every relative link in the Markdown files
# points at a file or folder that exists.
#   scripts/check-docs.sh [SOURCE_DIR]
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
fail=0
files=$(git ls-files 2>/dev/null || find . -type f -not -path './.git/*' -not -path './build*')
outside='\.\./shared|ALGORITHMS\.md|DESIGN\.md|TOOLCHAIN\.md|STYLE\.md'
found=$(echo "$files" | grep -v '^scripts/check-docs.sh$' | xargs grep -nE "$outside" 2>/dev/null || true)
if [ -n "$found" ]; then
  echo "$found"
  echo "check-docs: the lines above refer to files outside the repository" >&2
  fail=1
fi
python3 - $(echo "$files" | grep '\.md$') <<'PY' || fail=1
import os, re, sys
bad = 0
for md in sys.argv[1:]:
    text = open(md, encoding="utf-8").read()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+://|^#|^mailto:", target):
            continue
        path = os.path.normpath(os.path.join(os.path.dirname(md), target.split("#")[0]))
        if not os.path.exists(path):
            print(f"check-docs: {md}: broken link {target}")
            bad += 1
sys.exit(1 if bad else 0)
PY
[ "$fail" = 0 ] && echo "check-docs: self-contained, links resolve"
exit "$fail"
