#!/usr/bin/python3
"""Checks that every command-line flag the documentation names exists: each `--flag` in
inline code or a code block of a tracked Markdown file must be one that a fedlgc binary's
--help lists, or one that a script of the repository takes or passes to another tool (its
.sh and .py files: docker's --build-arg, ctest's --test-dir), or one of OTHER_TOOLS. A flag renamed or removed in
the code but not in the docs fails here, naming the file and line. `--lsgd-*` in the docs
names a family: some listed flag must begin with it.

    check-doc-flags.py SOURCE_DIR BIN_DIR
"""

import glob
import os
import re
import subprocess
import sys

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# Flags of tools the docs show beside fedlgc's that no script of the repository runs.
OTHER_TOOLS = {"--logdir": "tensorboard"}


def flags_in(text):
    return {f.rstrip("-") for f in FLAG.findall(text)}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, bin_dir = sys.argv[1], sys.argv[2]
    listed = set(OTHER_TOOLS)
    binaries = sorted(glob.glob(os.path.join(bin_dir, "fedlgc-*")))
    if not binaries:
        sys.exit(f"check-doc-flags: no fedlgc binaries in {bin_dir}")
    for b in binaries:
        out = subprocess.run([b, "--help"], capture_output=True, text=True, timeout=60)
        listed |= flags_in(out.stdout + out.stderr)
    files = subprocess.run(["git", "ls-files"], cwd=src, capture_output=True, text=True,
                           check=True).stdout.split()
    for f in files:
        if f.endswith((".sh", ".py")):
            listed |= flags_in(open(os.path.join(src, f), errors="replace").read())
    bad = []
    # The changelog names flags that were renamed or removed: history, not instructions.
    for md in (f for f in files if f.endswith(".md") and f != "CHANGELOG.md"):
        fence = False
        for n, line in enumerate(open(os.path.join(src, md), encoding="utf-8"), 1):
            if line.startswith("```"):
                fence = not fence
                continue
            for span in [line] if fence else re.findall(r"`([^`]*)`", line):
                for m in FLAG.finditer(span):
                    flag = m.group(0)
                    family = flag.endswith("-") and span[m.end():m.end() + 1] == "*"
                    flag = flag.rstrip("-")
                    if flag in listed or (family and any(k.startswith(flag + "-")
                                                         for k in listed)):
                        continue
                    bad.append(f"{md}:{n}: {flag}")
    for b in bad:
        print(b)
    if bad:
        sys.exit("check-doc-flags: the flags above are in no binary's --help and no script")
    print(f"check-doc-flags: every flag the docs name exists ({len(listed)} known)")


if __name__ == "__main__":
    main()
