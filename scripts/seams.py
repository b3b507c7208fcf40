#!/usr/bin/env python3
"""The seams' ratchet: counts in the source what docs/architecture.md says should shrink
and fails when one grows past its baseline (scripts/seams_baseline.json).

    scripts/seams.py [--root DIR] [--update] [--list NAME]

  mode_rules       `Mode::k...` written outside modes/ and core/protocol.h (the wire names):
                   a rule about one mode decided by code that is not the mode's
  long_functions   function definitions over 80 lines, signature included (product .cc)
  test_sleeps      sleeps in tests without a `// sleep: <why>` on their line or the one before
                   (a test that waits out a deadline moves a fake clock instead)
  stderr_prints    fprintf(stderr, ...), std::cerr, fputs(..., stderr) and perror in product
                   code: messages are the logger's job (base/log.h). A print that is not a
                   log line (a usage text) says so: `// not a log line: <why>` on its line
                   or the one before
  lgc_stage_ints   LGC stages compared with or set to bare integers
  example_mode     the smooth mode (modes/smooth/, docs/adding-a-mode.md's worked example)
                   named in source outside its folder and the mode tables (core/protocol.h,
                   modes/drivers.cc, modes/clients.cc): adding a mode touches nothing else
  example_protocol shared-scale TernGrad's classes (docs/adding-a-protocol.md's worked example)
                   named in product code outside its files and the protocol tables
                   (round_protocols.cc, client_protocols.cc): adding a protocol touches
                   nothing else
  big_classes      member functions past 30 in the classes and structs of coordinator/ and
                   modes/ (their headers; declared or defined in the class, constructors
                   included, deleted ones not), summed over the classes: a class that does
                   everything is a hub
  codecs_helpers   files that include codecs/{str,crc32c,spec}.h: helpers every folder uses,
                   which live in base/ (a file including them from codecs/ again counts)
  spec_predicates  calls outside codecs/ of a function that reads a codec spec's text for
                   what kind of codec it is (codecs::IsX/NamesX/NestsX, GradiveqBasisOf,
                   SumCode::LevelsOf/KeptOf): a codec's round needs are its registry
                   entry's, read through codecs::RoundKindOf

--update writes the current counts as the baseline (after a change that lowers them);
--list NAME prints where one count comes from.
"""

import argparse
import json
import os
import re
import sys

PRODUCT_SKIP = ("build", "tests", "bench", "examples", ".git", "docs", "python/fedlgc")


def is_test(rel):
    return rel.startswith("tests/") or rel.endswith("_test.cc") or "/testing/" in rel


def sources(root, exts=(".cc", ".h")):
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        top = rel_dir.split(os.sep)[0]
        if top.startswith("build") or top in (".git", "node_modules"):
            dirnames[:] = []
            continue
        for f in sorted(filenames):
            if f.endswith(exts):
                rel = os.path.normpath(os.path.join(rel_dir, f))
                yield rel, os.path.join(dirpath, f)


def product(rel):
    return not is_test(rel) and not rel.startswith(PRODUCT_SKIP)


def blank_comments_and_strings(src):
    """The source with comments, string and character literals blanked (newlines kept)."""
    out, i, n = [], 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif src.startswith('R"', i) and re.match(r'R"([^(\s]*)\(', src[i:]):
            delim = ")" + re.match(r'R"([^(\s]*)\(', src[i:]).group(1) + '"'
            j = src.find(delim, i)
            j = n if j < 0 else j + len(delim)
        elif src[i] == '"' or (src[i] == "'" and not (i > 0 and src[i - 1].isalnum())):
            j = i + 1
            while j < n and src[j] != src[i] and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j += 1
        else:
            out.append(src[i])
            i += 1
            continue
        out.append("".join(c if c == "\n" else " " for c in src[i:j]))
        i = j
    return "".join(out)


def long_functions(root, limit=80):
    """(lines, file:line, name) of function definitions longer than `limit` lines, counted
    from the signature's first line to the closing brace."""
    found = []
    for rel, path in sources(root, (".cc",)):
        if not product(rel):
            continue
        src = blank_comments_and_strings(open(path, errors="replace").read())
        src = "\n".join("" if l.lstrip().startswith("#") else l for l in src.split("\n"))
        stack = []
        for i, c in enumerate(src):
            if c == "{":
                k = i - 1
                while k >= 0 and src[k] not in ";{}":
                    k -= 1
                head = " ".join(src[k + 1:i].split())
                scopes_only = all(s == "scope" for s in stack)
                if re.search(r"\bnamespace\b", head) and "(" not in head:
                    stack.append("scope")
                elif re.search(r"\b(class|struct|union)\b[^()]*$", head):
                    stack.append("scope")
                elif scopes_only and ")" in head and not re.search(r"=\s*$", head) \
                        and not head.endswith("]"):
                    start = k + 1
                    while start < i and src[start].isspace():
                        start += 1
                    m = re.search(r"([~\w:]+)\s*\(", head)
                    stack.append(("fn", m.group(1) if m else head[:50],
                                  src.count("\n", 0, start) + 1))
                else:
                    stack.append("block")
            elif c == "}" and stack:
                top = stack.pop()
                if isinstance(top, tuple):
                    lines = src.count("\n", 0, i) + 1 - top[2] + 1
                    if lines > limit:
                        found.append((lines, f"{rel}:{top[2]}", top[1]))
    return sorted(found, reverse=True)


def strip_templates(s):
    out, depth = [], 0
    for c in s:
        if c == "<":
            depth += 1
        elif c == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(c)
    return "".join(out)


def declares_function(stmt):
    """Whether one statement of a class body (up to its `;` or its body) declares a member
    function: a name before a parenthesis that is not a macro (ABSL_GUARDED_BY(mu_))."""
    s = " ".join(stmt.split())
    s = re.sub(r"^((public|private|protected)\s*:\s*)+", "", s)
    if not s or re.match(r"(using|friend|typedef|static_assert|enum|class|struct)\b", s):
        return False
    if re.search(r"=\s*delete\s*$", s):
        return False
    m = re.search(r"(~?\w+)\s*\(", strip_templates(s))
    return bool(m) and not re.fullmatch(r"[A-Z_0-9]+", m.group(1)) \
        and m.group(1) not in ("void", "int", "bool", "decltype")


def class_sizes(root, folders=("coordinator/", "modes/")):
    """(member functions, file, class) of each class or struct in the folders' headers."""
    found = []
    for rel, path in sources(root, (".h",)):
        if not product(rel) or not rel.startswith(folders):
            continue
        src = blank_comments_and_strings(open(path, errors="replace").read())
        src = "\n".join("" if l.lstrip().startswith("#") else l for l in src.split("\n"))
        for m in re.finditer(r"\b(class|struct)\s+(\w+)[^;{()]*\{", src):
            i, depth, stmt, count = m.end(), 1, "", 0
            while i < len(src) and depth > 0:
                c = src[i]
                if c == "{":
                    depth += 1
                elif c == "}":
                    depth -= 1
                    if depth == 1:  # the end of an inline body or a nested class
                        count += declares_function(stmt)
                        stmt = ""
                elif c == ";" and depth == 1:
                    count += declares_function(stmt)
                    stmt = ""
                elif depth == 1:
                    stmt += c
                i += 1
            found.append((count, rel, m.group(2)))
    return sorted(found, reverse=True)


def grep(root, pattern, keep, flags=0):
    rx = re.compile(pattern, flags)
    hits = []
    for rel, path in sources(root):
        if not keep(rel):
            continue
        for n, line in enumerate(open(path, errors="replace"), 1):
            if rx.search(line):
                hits.append(f"{rel}:{n}: {line.strip()}")
    return hits


def marked_out(root, hits, mark):
    """The hits whose line, or the line before, does not carry `mark`."""
    kept = []
    for hit in hits:
        rel, n = hit.split(":")[:2]
        lines = open(os.path.join(root, rel), errors="replace").read().split("\n")
        n = int(n)
        if mark not in lines[n - 1] and not (n >= 2 and mark in lines[n - 2]):
            kept.append(hit)
    return kept


def stderr_prints(root):
    hits = []
    for rel, path in sources(root, (".cc",)):
        if not product(rel):
            continue
        src = open(path, errors="replace").read()
        lines = src.split("\n")
        for m in re.finditer(r"fprintf\s*\(\s*stderr|std::cerr|fputs\s*\([^;]*stderr|\bperror\s*\(",
                             src):
            line = src.count(chr(10), 0, m.start())
            if any("// not a log line:" in l for l in lines[max(0, line - 1):line + 1]):
                continue
            hits.append(f"{rel}:{line + 1}")
    return hits


def measure(root):
    mode_rules = grep(root, r"\bMode::k[A-Z]",
                      lambda r: product(r) and not r.startswith("modes/")
                      and r != os.path.normpath("core/protocol.h"))
    sleeps = marked_out(root, grep(root, r"sleep_for|SleepFor\(|\busleep\(|\bsleep\(",
                                   lambda r: is_test(r)), "// sleep:")
    stage_ints = grep(root,
                      r"stage\(\)\s*(==|!=|<=|>=|<|>)\s*\d|\bstage\s*(==|!=|<=|>=|<|>)\s*\d"
                      r"|set_stage\(\d|lgc_stage\s*(==|!=|<|>|=)\s*\d",
                      lambda r: product(r))
    helpers = sorted({h.split(":")[0] for h in grep(
        root, r'#include "codecs/(str|crc32c|spec)\.h"',
        lambda r: True)})
    tables = {os.path.normpath(t) for t in ("core/protocol.h", "modes/drivers.cc",
                                             "modes/clients.cc")}
    example_mode = grep(root, r"\bkSmooth\b|\bSmooth(Driver|Client)\b|modes/smooth/|\"smooth\"",
                        lambda r: not r.startswith("modes/smooth/") and r not in tables)
    spec_predicates = grep(
        root, r"codecs::(Is|Names|Nests)[A-Z]\w*\(|GradiveqBasisOf\(|SumCode::(LevelsOf|KeptOf)\(",
        lambda r: not r.startswith(("codecs/", os.path.normpath("tests/codecs"))))
    protocol_files = {os.path.normpath("modes/fedavg/" + f) for f in (
        "terngrad_rounds.h", "terngrad_rounds.cc", "shared_scale_protocol.cc",
        "shared_scale_client.h", "shared_scale_client.cc", "round_protocols.cc",
        "client_protocols.cc")}
    example_protocol = grep(root, r"\bTernGradRounds\b|\bSharedScaleClient\b|\bSharedScaleProtocol\b",
                            lambda r: product(r) and r not in protocol_files)
    return {
        "spec_predicates": spec_predicates,
        "example_protocol": example_protocol,
        "mode_rules": mode_rules,
        "example_mode": example_mode,
        "long_functions": [f"{n} lines {where} {name}" for n, where, name in long_functions(root)],
        "big_classes": [(f"{n} member functions {rel} {name}", n - 30)
                        for n, rel, name in class_sizes(root) if n > 30],
        "test_sleeps": sleeps,
        "stderr_prints": stderr_prints(root),
        "lgc_stage_ints": stage_ints,
        "codecs_helpers": helpers,
    }


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(here))
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--list")
    args = ap.parse_args()
    found = measure(args.root)
    # An entry counts 1, or its weight when it is (text, weight).
    text = {k: [e[0] if isinstance(e, tuple) else e for e in v] for k, v in found.items()}
    if args.list:
        print("\n".join(text[args.list]))
        return 0
    baseline_path = os.path.join(args.root, "scripts", "seams_baseline.json")
    counts = {k: sum(e[1] if isinstance(e, tuple) else 1 for e in v) for k, v in found.items()}
    if args.update:
        with open(baseline_path, "w") as f:
            json.dump(counts, f, indent=2, sort_keys=True)
            f.write("\n")
        print(f"seams: baseline written: {counts}")
        return 0
    with open(baseline_path) as f:
        baseline = json.load(f)
    failed = False
    for name, n in counts.items():
        limit = baseline.get(name)
        mark = "ok"
        if limit is None:
            mark, failed = "no baseline", True
        elif n > limit:
            mark, failed = f"GREW past {limit}", True
        elif n < limit:
            mark = f"below {limit}: lower the baseline (--update)"
        print(f"seams: {name:16s} {n:4d}  {mark}")
        if limit is not None and n > limit:
            for where in text[name]:
                print(f"    {where}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
