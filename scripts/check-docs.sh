#!/usr/bin/env bash
# Checks that the repository documents itself: no file refers to documents outside the tree
# (a briefing folder beside the checkout), and every relative link in the Markdown files
# points at a file or folder that exists, and at a heading of it that exists; the README's
# Documentation list names every page of docs/ (and the README stays within 250 lines), and
# docs/deployment.md names every row of the Grafana dashboard and describes every alert rule.
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

def anchors(md):
    """The heading anchors GitHub makes for a Markdown file (code fences skipped)."""
    seen, out, fence = {}, set(), False
    for line in open(md, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out

bad = 0
for md in sys.argv[1:]:
    text = open(md, encoding="utf-8").read()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+://|^mailto:", target):
            continue
        file, _, anchor = target.partition("#")
        path = os.path.normpath(os.path.join(os.path.dirname(md), file)) if file else md
        if not os.path.exists(path):
            print(f"check-docs: {md}: broken link {target}")
            bad += 1
        elif anchor and path.endswith(".md") and anchor not in anchors(path):
            print(f"check-docs: {md}: no heading for #{anchor} in {path}")
            bad += 1
sys.exit(1 if bad else 0)
PY
# docs/deployment.md describes what the monitoring ships: every row of the Grafana
# dashboard is named in its Dashboard item and every alert rule is one ';'-separated part
# of its Alerts item.
python3 - <<'PY' || fail=1
import json, re, sys
doc = open("docs/deployment.md", encoding="utf-8").read()
def item(name):
    m = re.search(r"^- \*\*" + name + r"\.?\*\*(.*?)(?=^- |^$)", doc, re.S | re.M)
    return " ".join(m.group(1).split()).lower() if m else ""
dash = json.load(open("docker/grafana/dashboards/fedlgc.json"))
rows = [p["title"] for p in dash["panels"] if p.get("type") == "row"]
missing = [r for r in rows if r.split(" (")[0].lower() not in item("Dashboard")]
alerts = open("docker/prometheus/alerts.yml").read().count("- alert:")
described = len(item("Alerts").split(";"))
bad = False
if missing:
    print(f"check-docs: docs/deployment.md's Dashboard item does not name the rows {missing}")
    bad = True
if described != alerts:
    print(f"check-docs: docs/deployment.md's Alerts item describes {described} rules; "
          f"docker/prometheus/alerts.yml has {alerts}")
    bad = True
if bad:
    sys.exit(1)
# The README's Documentation list names every page of docs/.
import glob
readme = open("README.md", encoding="utf-8").read()
index = readme.split("## Documentation", 1)[-1]
unlisted = [p for p in sorted(glob.glob("docs/*.md")) if f"]({p})" not in index]
if unlisted:
    print(f"check-docs: the README's Documentation list does not name {unlisted}")
    sys.exit(1)
# A newcomer's page: what it is, the two commands, a tour, the index; the rest in docs/.
if readme.count("\n") > 250:
    print(f"check-docs: README.md has {readme.count(chr(10))} lines; keep it to 250 and move "
          "detail into docs/")
    sys.exit(1)
PY
[ "$fail" = 0 ] && echo "check-docs: self-contained, links resolve, the monitoring described"
exit "$fail"
