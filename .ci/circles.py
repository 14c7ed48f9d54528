#!/usr/bin/env python3
"""Fails when files of a crate import each other in a circle.

For each crate's `src/`, every path a file names — `use crate::a::b`,
`crate::a::b::f()` inline, `super::x`, and `pub use` re-exports — is an edge
from that file to the file of the longest module prefix it names. A
module's own files are one room: edges between a `mod.rs` and the files
below it do not count (a parent declares its children, a child uses its
parent's types). Any other strongly connected set of files is a circle:
the script prints each, with one line that closes it, and exits 1.

Usage: .ci/circles.py [crate-dir ...]   (default: every workspace crate)
"""

import os
import re
import sys

CRATES = ["protocol", "coordinator", "broker", "cli", "loadgen", "tests"]

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP = re.compile(r"\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\};", re.S)


def modules(src):
    """Module path (tuple) -> file path, for every .rs file under src."""
    found = {}
    for root, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel in (["lib"], ["main"]):
                module = ()
            elif rel[-1] == "mod":
                module = tuple(rel[:-1])
            elif rel[0] == "bin":
                continue  # binaries are crates of their own
            else:
                module = tuple(rel)
            found[module] = path
    return found


def strip_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def resolve(mods, base, segments):
    """The file of the longest module prefix of base + segments."""
    full = tuple(base) + tuple(segments)
    for n in range(len(full), -1, -1):
        if full[:n] in mods:
            return full[:n]
    return None


def anchor(module, is_mod_file, kind):
    """The module `crate`, `super` or `self` names from `module`."""
    if kind == "crate":
        return ()
    here = module if is_mod_file or module == () else module
    if kind == "self":
        return here
    return here[:-1]


def edges_of(mods, module, path):
    text = strip_comments(open(path, encoding="utf-8").read())
    is_mod_file = path.endswith("mod.rs") or path.endswith("lib.rs")
    # A file `a/b.rs` is module a::b; its `super` is `a`, as for a/b/mod.rs.
    out = {}

    def add(kind, rest, line):
        segments = [s for s in rest.split("::") if s]
        base = anchor(module, is_mod_file, kind)
        # super::super::x
        while segments and segments[0] == "super":
            base = base[:-1]
            segments = segments[1:]
        target = resolve(mods, base, segments)
        if target is not None and target != module:
            out.setdefault(target, line.strip())

    for m in USE_GROUP.finditer(text):
        kind, prefix, group = m.group(1), m.group(2), m.group(3)
        for item in re.split(r",(?![^{]*\})", group):
            item = item.strip().split(" as ")[0].strip()
            if not item or item == "self":
                add(kind, prefix, m.group(0))
                continue
            head = re.match(r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*", item)
            if head:
                add(kind, prefix + "::" + head.group(0), m.group(0))
    for m in PATH.finditer(text):
        add(m.group(1), m.group(2), text[max(0, m.start() - 40): m.end()].split("\n")[-1])
    return out


def related(a, b):
    """True when one module contains the other (a room and its files)."""
    return a[: len(b)] == b or b[: len(a)] == a


def circles(src):
    mods = modules(src)
    graph = {}
    why = {}
    for module, path in mods.items():
        for target, line in edges_of(mods, module, path).items():
            if related(module, target):
                continue
            graph.setdefault(module, set()).add(target)
            why[(module, target)] = line
    # Tarjan's strongly connected components.
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in list(mods):
        if v not in index:
            visit(v)
    return mods, graph, why, out


def name(mods, module):
    return os.path.relpath(mods[module], ".")


def main():
    crates = sys.argv[1:] or CRATES
    found = 0
    for crate in crates:
        src = os.path.join(crate, "src")
        if not os.path.isdir(src):
            continue
        mods, graph, why, comps = circles(src)
        for comp in comps:
            found += 1
            print(f"circle in {crate}: " + " <-> ".join(name(mods, m) for m in comp))
            for a in comp:
                for b in sorted(graph.get(a, ())):
                    if b in comp:
                        print(f"    {name(mods, a)} -> {name(mods, b)}: {why[(a, b)]}")
    if found:
        print(f"{found} import circle(s): move what both sides need into a lower room", file=sys.stderr)
        return 1
    print("no import circles in " + ", ".join(crates))
    return 0


if __name__ == "__main__":
    sys.exit(main())
