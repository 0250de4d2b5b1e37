#!/usr/bin/env python3
"""Checks that every code block of the README is a file the test suite builds or runs.

Each fenced block must follow a line `<!-- example: PATH -->` (an HTML comment: the rendered
README does not show it) naming a file of the repository, and its lines must be that file's
lines, in order and unchanged: the whole file, or a run of consecutive lines of it. The C++ files
are examples/*.cpp, which examples/CMakeLists.txt builds and ctest runs; the CMake lines come from
tests/consumer/, the project ctest builds against the installed package. In a shell block, each
command must name a program of the repository that exists and is executable.

    scripts/check_readme.py [README.md ...]      (exit 1 and say where, on the first difference)
"""
import os
import re
import sys


def blocks(path):
    """(line number, marker path or None, language, [lines]) for each fenced block of the file."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i, marker = [], 0, None
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if m and m.group(1) != "":
            j = i + 1
            while j < len(lines) and lines[j] != "```":
                j += 1
            out.append((i + 1, marker, m.group(1), lines[i + 1:j]))
            marker, i = None, j + 1
            continue
        if m:
            sys.exit(f"{path}:{i + 1}: a code block needs a language (```c++, ```cmake, ```sh)")
        c = re.match(r"^<!-- example: (\S+) -->$", lines[i])
        if c:
            marker = c.group(1)
        elif lines[i].strip():
            marker = None
        i += 1
    return out


def contains(whole, part):
    n = len(part)
    return any(whole[k:k + n] == part for k in range(len(whole) - n + 1))


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = sys.argv[1:] or [os.path.join(root, "README.md")]
    checked = 0
    for path in files:
        for line, marker, lang, body in blocks(path):
            where = f"{path}:{line}"
            if marker is None:
                sys.exit(f"{where}: a ```{lang} block with no <!-- example: PATH --> line before it")
            source = os.path.join(root, marker)
            if not os.path.isfile(source):
                sys.exit(f"{where}: {marker} does not exist")
            text = open(source, encoding="utf-8").read().rstrip("\n").split("\n")
            if not contains(text, body):
                sys.exit(f"{where}: the block differs from {marker} (copy the file's lines into the README, "
                         f"or change the file)")
            if lang == "sh":
                for cmd in body:
                    cmd = cmd.split("#")[0].strip()
                    if not cmd:
                        continue
                    program = cmd.split()[0]
                    if "/" in program and not os.access(os.path.join(root, program), os.X_OK):
                        sys.exit(f"{where}: {program} is not an executable of the repository")
            checked += 1
    if checked == 0:
        sys.exit("check_readme: no code blocks found")
    print(f"check_readme: {checked} blocks, each the same as its file")


if __name__ == "__main__":
    main()
