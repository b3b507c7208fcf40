#!/usr/bin/env bash
# Clang's thread-safety analysis over fedlgc's own C++ files that hold locks: every
# ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED and absl::Mutex use is checked, and a
# violation fails. A file is analysed when it or its header uses absl::Mutex or a
# thread-safety annotation (locks are private to their class, so their every use is in
# those files). The files compile with the flags of an existing build's
# compile_commands.json (default build/), syntax only (no code generation); files that
# include libtorch hold no locks and are left out.
#   scripts/thread_safety.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
command -v clang++ >/dev/null || { echo "thread_safety: clang++ not found" >&2; exit 1; }
[ -f "$build/compile_commands.json" ] || { echo "thread_safety: no $build/compile_commands.json" >&2; exit 1; }
list=$(mktemp)
trap 'rm -f "$list"' EXIT
python3 - "$build/compile_commands.json" "$PWD" >"$list" <<'PY'
import json, shlex, sys
db, root = sys.argv[1], sys.argv[2]
seen = set()
for entry in json.load(open(db)):
    src = entry["file"]
    if not src.startswith(root + "/") or "/build" in src[len(root):].split("/")[1][:5]:
        continue
    if not src.endswith(".cc") or src in seen:
        continue
    text = open(src, errors="replace").read()
    if "<torch/" in text or "/tests/" in src or src.endswith("_test.cc"):
        continue
    header = src[:-3] + ".h"
    try:
        text += open(header, errors="replace").read()
    except OSError:
        pass
    if "absl::Mutex" not in text and "ABSL_GUARDED_BY" not in text:
        continue
    seen.add(src)
    args = shlex.split(entry["command"])[1:]
    keep, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c", "-MF", "-MT"):
            skip = True
            continue
        if a in ("-MD", "-Werror") or a.startswith("-fsanitize") or a == src:
            continue
        keep.append(a)
    print(" ".join(shlex.quote(a) for a in keep + ["-fsyntax-only", "-Wthread-safety",
                                                  "-Werror=thread-safety", src]))
PY
n=$(wc -l <"$list")
echo "thread_safety: $n files"
# One clang per file, two at a time; any failure fails the run.
xargs -P "${JOBS:-2}" -d '\n' -I{} bash -c 'clang++ {} 2>&1 | grep -v "^[0-9]* warnings\? generated" ; exit ${PIPESTATUS[0]}' <"$list"
echo "thread_safety: no violations"
