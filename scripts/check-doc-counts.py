#!/usr/bin/python3
"""The counts the docs give of the repository itself, checked against the build.

    check-doc-counts.py BUILD_DIR SOURCE_DIR

CONTRIBUTING.md's table of the test tiers says how many unit tests there are and in how
many binaries, how many tests `ctest -LE unit` runs and how many the loaded run repeats;
docs/codec-guide.md how many registry specs the codec property and unbiasedness suites
run over. Each is counted here from ctest's and codecs_test's own lists; a count the docs
round ("2,100") must be right to that rounding. (The dashboard's rows and the alert rules are checked by
check-docs.sh; timings are measurements and carry their date or commit.)
"""
import json
import re
import subprocess
import sys

BUILD, SRC = sys.argv[1], sys.argv[2]


def tests(*selector):
    out = subprocess.run(["ctest", "--test-dir", BUILD, *selector, "--show-only=json-v1"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["tests"]


def number(text):
    return int(text.replace(",", ""))


def within(stated, actual):
    """Stated to its own precision: 2,100 covers 2,050-2,149; 131 only 131."""
    digits = stated.replace(",", "")
    zeros = len(digits) - len(digits.rstrip("0")) if number(stated) else 0
    step = 10 ** min(zeros, 2)
    return abs(number(stated) - actual) < step / 2 if step > 1 else number(stated) == actual


unit = tests("-L", "unit")
counts = {
    "unit tests": len(unit),
    "unit binaries": len({t["command"][0] for t in unit}),
    "-LE unit": len(tests("-LE", "unit")),
    "integration|python": len(tests("-L", "integration|python")),
}
listing = subprocess.run([f"{BUILD}/bin/codecs_test", "--gtest_list_tests"], capture_output=True,
                         text=True, check=True).stdout
suite, params = None, {}
for line in listing.splitlines():
    if not line.startswith(" "):
        suite = line.strip()
        continue
    m = re.search(r'GetParam\(\) = \("([^"]*)"', line) or re.search(r'GetParam\(\) = "([^"]*)"', line)
    if m:
        params.setdefault(suite, set()).add(m.group(1))
counts["property specs"] = len(params.get("AllCodecs/CodecProperty.", ()))
counts["unbiased specs"] = len(params.get("Codecs/Unbiased.", ()))
doc = open(f"{SRC}/CONTRIBUTING.md", encoding="utf-8").read()
checks = [
    (r"([\d,]+) unit tests in \d+ binaries", "unit tests"),
    (r"[\d,]+ unit tests in (\d+) binaries", "unit binaries"),
    (r"`ctest --test-dir build -LE unit` \|[^\n]*?\((\d+) tests", "-LE unit"),
    (r"`-L 'integration\|python'`, (\d+) tests\)", "integration|python"),
]
guide = open(f"{SRC}/docs/codec-guide.md", encoding="utf-8").read()
checks = [(doc, "CONTRIBUTING.md", p, k) for p, k in checks] + [
    (guide, "docs/codec-guide.md", r"needs no layout \((\d+) specs of", "property specs"),
    (guide, "docs/codec-guide.md", r"whose codec claims it \((\d+) specs", "unbiased specs"),
]
bad = 0
for text, name, pattern, key in checks:
    m = re.search(pattern, text)
    if not m:
        print(f"check-doc-counts: {name} no longer says /{pattern}/: update this script")
        bad += 1
    elif not within(m.group(1), counts[key]):
        print(f"check-doc-counts: {name} says {m.group(1)} for {key}; there are "
              f"{counts[key]}: update it")
        bad += 1
if bad:
    sys.exit(1)
print("check-doc-counts: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
