#!/usr/bin/python3
"""Writes a man page (section 1) from a tool's --help, so the pages say what the binaries
do: NAME from the tool's description, the whole --help under OPTIONS, and for a tool
with commands (fedlgc-codec) each command's --help under COMMANDS. cmake --install puts
the pages in <prefix>/share/man/man1.

    gen-man.py TOOL VERSION OUT.1
"""

import os
import re
import subprocess
import sys


def help_text(argv):
    env = dict(os.environ, COLUMNS="100")
    r = subprocess.run(argv + ["--help"], capture_output=True, text=True, env=env, timeout=60)
    if r.returncode != 0:
        sys.exit(f"gen-man: {' '.join(argv)} --help failed ({r.returncode}): {r.stderr}")
    return r.stdout


def roff(text):
    """Preformatted roff: backslashes escaped, no line read as a request."""
    out = []
    for line in text.rstrip("\n").split("\n"):
        line = line.replace("\\", "\\e")
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line)
    return ".nf\n" + "\n".join(out) + "\n.fi\n"


def description(text, name):
    """The tool's description: the first line that is not its usage (CLI11 prints the
    description first, argparse after a usage that may go on over indented lines)."""
    in_usage = False
    for line in text.split("\n"):
        s = line.strip()
        if s.lower().startswith("usage:"):
            in_usage = True
            continue
        if in_usage and line.startswith(" ") and s:
            continue
        in_usage = False
        if s:
            return re.sub(r"^" + re.escape(name) + r":\s*", "", s)
    return name


def commands(text):
    """A CLI11 tool's commands: the names under its "Subcommands:" heading."""
    if "\nSubcommands:" not in text:
        return []
    tail = text.split("\nSubcommands:", 1)[1]
    return [m.group(1) for m in re.finditer(r"^  (\w+)\s", tail, re.M)]


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    tool, version, out = sys.argv[1:]
    name = os.path.basename(tool)
    text = help_text([tool])
    page = [f'.TH {name.upper()} 1 "" "fedlgc {version}" "fedlgc"\n',
            ".SH NAME\n", f"{name} \\- {description(text, name).replace(chr(92), chr(92) + 'e')}\n",
            ".SH OPTIONS\n", roff(text)]
    cmds = commands(text)
    if cmds:
        page.append(".SH COMMANDS\n")
        for c in cmds:
            page += [f".SS {name} {c}\n", roff(help_text([tool, c]))]
    page += [".SH SEE ALSO\n",
             "The documentation in the source tree's docs/ folder; configuration.md lists "
             "every flag of every tool.\n"]
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write("".join(page))


if __name__ == "__main__":
    main()
