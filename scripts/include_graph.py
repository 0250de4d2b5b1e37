#!/usr/bin/env python3
"""Checks the folder structure of stile's headers: which folder of include/stile/ includes which.

Scans include/stile/**/*.hpp and *.h for `#include "stile/<folder>/..."` (or <stile/...>),
aggregates the file-level edges to top-level folders (files directly in include/stile/, such as
engine.hpp and stile.hpp, belong to the folder "(root)"; a nested folder such as kernels/gemm/
counts as kernels), and prints, per folder, the folders it includes with the number of include
lines behind each edge.

It fails (exit status 1) and says why when:
  - the folder graph has a cycle (a folder including itself is fine): each cycle is printed with
    the include lines that make it up, so the file to move or split is named;
  - a --forbid A:B pair is violated (folder A includes folder B), e.g. --forbid '*:calibrate'
    to assert that no runtime folder includes calibrate/ (`*` on the left: every other folder);
  - --order is given and an edge goes from a folder to one listed after it (an upward include);
  - a file uses a namespace `<name>_detail` (as `<name>_detail::`, `using namespace
    <name>_detail;` or `namespace x = <name>_detail;`) that is defined (`namespace <name>_detail`)
    only in files of other folders: a module reaching into another module's internals.
Comments and string literals are ignored when looking for namespaces.

    scripts/include_graph.py                          # table, cycle and detail checks
    scripts/include_graph.py --dot folders.dot        # also a Graphviz picture of the graph
    scripts/include_graph.py --forbid '*:calibrate' \\
        --order core,quant,kernels,io,text,store,ops,model,pipeline,plan,hetero,dist,calibrate,'(root)'

Python 3 standard library only; reads files, writes only the --dot file.
"""
import argparse
import os
import re
import sys
from collections import defaultdict

ROOT_FOLDER = "(root)"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*["<](stile/[^">]+)[">]')
DEFINE_RE = re.compile(r"\bnamespace\s+(?:[A-Za-z_]\w*\s*::\s*)*([A-Za-z_]\w*_detail)\s*\{")
USE_RES = (
    re.compile(r"\b([A-Za-z_]\w*_detail)\s*::"),
    re.compile(r"\busing\s+namespace\s+(?:[A-Za-z_]\w*\s*::\s*)*([A-Za-z_]\w*_detail)\s*;"),
    re.compile(r"\bnamespace\s+[A-Za-z_]\w*\s*=\s*(?:[A-Za-z_]\w*\s*::\s*)*([A-Za-z_]\w*_detail)\s*;"),
)


def strip_comments_and_strings(text):
    """Returns text with comments and the contents of string and character literals replaced by
    spaces (newlines kept), so line numbers still match and only code is left to search."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":  # line comment (a trailing backslash continues it)
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
        elif c == "/" and nxt == "*":
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c == "R" and nxt == '"' and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^()\\\s]{0,16})\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            close = ")" + m.group(1) + '"'
            end = text.find(close, i + m.end())
            end = n if end < 0 else end + len(close)
            out.append('R"' + re.sub(r"[^\n]", " ", text[i + 2:end - 1]) + '"')
            i = end
        elif c == '"' or (c == "'" and not (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"))):
            # a string or character literal ('  after a digit or letter is a digit separator)
            quote = c
            out.append(quote)
            i += 1
            while i < n and text[i] != quote and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n:
                    out.append("  " if text[i + 1] != "\n" else " \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            if i < n and text[i] == quote:
                out.append(quote)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def folder_of(rel):
    """Top-level folder of a path relative to include/stile/ ('kernels/gemm.hpp' -> 'kernels')."""
    parts = rel.split("/")
    return parts[0] if len(parts) > 1 else ROOT_FOLDER


class Header:
    def __init__(self, rel, text):
        self.rel = rel  # path relative to include/stile/
        self.folder = folder_of(rel)
        self.code = strip_comments_and_strings(text)
        raw_lines = text.split("\n")
        code_lines = self.code.split("\n")
        self.includes = []  # (line number, path relative to include/stile/)
        for number, (raw, code) in enumerate(zip(raw_lines, code_lines), start=1):
            if not re.match(r"^\s*#\s*include\b", code):
                continue  # not a directive, or inside a block comment
            m = INCLUDE_RE.match(raw)
            if m:
                self.includes.append((number, m.group(1)[len("stile/"):]))
        self.defines = set(DEFINE_RE.findall(self.code))
        self.uses = defaultdict(list)  # name -> line numbers
        for regex in USE_RES:
            for m in regex.finditer(self.code):
                self.uses[m.group(1)].append(self.code.count("\n", 0, m.start()) + 1)


def scan(include_root):
    headers = []
    for dirpath, dirnames, filenames in os.walk(include_root):
        dirnames.sort()
        for name in sorted(filenames):
            if not (name.endswith(".hpp") or name.endswith(".h")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, include_root).replace(os.sep, "/")
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    headers.append(Header(rel, f.read()))
            except OSError as e:
                sys.exit(f"include_graph: cannot read {path}: {e.strerror}")
    return headers


def find_cycles(nodes, edges):
    """The strongly connected components of more than one folder (Tarjan's algorithm): each is a
    set of folders that all reach each other, i.e. contains at least one cycle."""
    index, low, on_stack, stack, sccs = {}, {}, set(), [], []
    counter = [0]

    def strongconnect(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w == v:
                continue
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                sccs.append(sorted(scc))

    for v in sorted(nodes):
        if v not in index:
            strongconnect(v)
    return sccs


def shortest_cycle(start, members, edges):
    """A shortest cycle [start, ..., start] inside the component `members` (breadth first)."""
    members = set(members)
    parent = {start: None}
    queue = [start]
    for v in queue:
        for w in sorted(edges.get(v, ())):
            if w == v or w not in members:
                continue
            if w == start:
                path = [v]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                return list(reversed(path)) + [start]
            if w not in parent:
                parent[w] = v
                queue.append(w)
    raise AssertionError("a strongly connected component without a cycle")


def main():
    ap = argparse.ArgumentParser(
        prog="include_graph.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")),
                    help="the repository root (default: the parent of this script's folder)")
    ap.add_argument("--dot", metavar="FILE", help="write the folder graph as Graphviz DOT to FILE")
    ap.add_argument("--forbid", metavar="A:B", action="append", default=[],
                    help="fail if folder A includes folder B (repeatable; A may be '*': any folder but B)")
    ap.add_argument("--order", metavar="F1,F2,...",
                    help="the folders bottom to top: fail on an include of a folder listed later than "
                         "the includer (folders not listed are not checked)")
    ap.add_argument("--files", action="store_true", help="also list every include line between different folders")
    args = ap.parse_args()

    include_root = os.path.join(args.root, "include", "stile")
    if not os.path.isdir(include_root):
        ap.error(f"{include_root}: no such folder (give the repository root with --root)")
    headers = scan(include_root)
    if not headers:
        sys.exit(f"include_graph: {include_root}: no .hpp or .h files")
    known = {h.rel for h in headers}

    forbid = []
    for spec in args.forbid:
        a, sep, b = spec.partition(":")
        if not sep or not a or not b:
            ap.error(f"--forbid {spec!r}: expected A:B (two folder names, or '*:B')")
        forbid.append((a, b))
    order = None
    if args.order:
        order = [f.strip() for f in args.order.split(",") if f.strip()]
        if len(set(order)) != len(order):
            ap.error("--order names a folder twice")

    # Folder-level edges, each with the include lines behind it.
    lines_of = defaultdict(list)  # (from folder, to folder) -> [(file, line, included file)]
    files_in = defaultdict(int)
    dangling = []
    for h in headers:
        files_in[h.folder] += 1
        for number, target in h.includes:
            lines_of[(h.folder, folder_of(target))].append((h.rel, number, target))
            if target not in known:
                dangling.append((h.rel, number, target))
    edges = defaultdict(set)
    for (a, b) in lines_of:
        edges[a].add(b)
    folders = sorted(set(files_in) | {b for (_, b) in lines_of})

    print(f"include/stile: {len(headers)} headers in {len(files_in)} folders\n")
    print("folder -> folders it includes (include lines)")
    width = max(len(f) for f in folders)
    for f in folders:
        targets = sorted(b for (a, b) in lines_of if a == f)
        parts = [f"{b} ({len(lines_of[(f, b)])})" for b in targets]
        note = f"[{files_in[f]} files]" if files_in[f] else "[no files: only included]"
        print(f"  {f:<{width}} {note:>10} -> {', '.join(parts) if parts else '-'}")
    if args.files:
        print("\ninclude lines between folders")
        for (a, b) in sorted(lines_of):
            if a == b:
                continue
            for rel, number, target in lines_of[(a, b)]:
                print(f"  {a} -> {b}: {rel}:{number} includes {target}")
    for rel, number, target in dangling:
        print(f"include_graph: note: {rel}:{number} includes stile/{target}, which is not in include/stile/",
              file=sys.stderr)

    if args.dot:
        try:
            with open(args.dot, "w", encoding="utf-8") as out:
                out.write("digraph stile_folders {\n  rankdir=BT;\n  node [shape=box, fontname=\"monospace\"];\n")
                for f in folders:
                    out.write(f'  "{f}";\n')
                for (a, b) in sorted(lines_of):
                    if a != b:
                        out.write(f'  "{a}" -> "{b}" [label="{len(lines_of[(a, b)])}"];\n')
                out.write("}\n")
        except OSError as e:
            sys.exit(f"include_graph: cannot write {args.dot}: {e.strerror}")
        print(f"\nwrote {args.dot}")

    problems = 0

    # 1. Cycles between folders.
    sccs = find_cycles(folders, edges)
    for scc in sccs:
        # A shortest cycle through each folder of the component, each cycle printed once.
        seen = set()
        for member in scc:
            cycle = shortest_cycle(member, scc, edges)
            key = frozenset(zip(cycle, cycle[1:]))
            if key in seen:
                continue
            seen.add(key)
            problems += 1
            print(f"\nFAIL: folder cycle: {' -> '.join(cycle)}")
            for a, b in zip(cycle, cycle[1:]):
                for rel, number, target in lines_of[(a, b)]:
                    print(f"  {a} -> {b}: {rel}:{number} includes {target}")

    # 2. Forbidden pairs.
    for a, b in forbid:
        pairs = [(x, b) for x in folders if x != b] if a == "*" else [(a, b)]
        for x, y in pairs:
            if (x, y) in lines_of:
                problems += 1
                print(f"\nFAIL: forbidden: {x} includes {y}")
                for rel, number, target in lines_of[(x, y)]:
                    print(f"  {rel}:{number} includes {target}")

    # 3. The declared order.
    if order:
        rank = {f: i for i, f in enumerate(order)}
        for (a, b) in sorted(lines_of):
            if a != b and a in rank and b in rank and rank[b] > rank[a]:
                problems += 1
                print(f"\nFAIL: against the order: {a} includes {b}, which is above it")
                for rel, number, target in lines_of[(a, b)]:
                    print(f"  {rel}:{number} includes {target}")
        unlisted = [f for f in folders if f not in rank]
        if unlisted:
            print(f"\nnote: not in --order, so not checked against it: {', '.join(unlisted)}")
        absent = [f for f in order if f not in folders]
        if absent:
            print(f"note: in --order but without headers (yet): {', '.join(absent)}")

    # 4. *_detail namespaces used outside the folders that define them.
    defined_in = defaultdict(set)
    for h in headers:
        for name in h.defines:
            defined_in[name].add(h.folder)
    reach = []
    for h in headers:
        for name, numbers in sorted(h.uses.items()):
            owners = defined_in.get(name)
            if owners and h.folder not in owners:
                reach.append((h.rel, name, numbers, owners))
    if reach:
        problems += 1
        print(f"\nFAIL: {len(reach)} use(s) of another folder's *_detail namespace")
        for rel, name, numbers, owners in reach:
            where = ", ".join(sorted(f + "/" for f in owners))
            shown = ", ".join(str(n) for n in numbers[:5]) + (", ..." if len(numbers) > 5 else "")
            print(f"  {rel}: {name} ({len(numbers)}x, line{'s' if len(numbers) > 1 else ''} {shown});"
                  f" defined only in {where}")

    if problems:
        print(f"\ninclude_graph: {problems} problem(s)")
        return 1
    print("\ninclude_graph: ok (no folder cycle" + (", no forbidden include" if forbid else "")
          + (", order respected" if order else "") + ", no *_detail reach-in)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
