#!/usr/bin/env python3
"""Fails when a library crate returns `Result<_, String>`.

An error as a string can only be printed: a caller cannot tell a full disk
from a bad record, a test can only search its words, and the words drift.
The broker, the protocol (with its clients) and the coordinator name their
errors with enums instead (`thiserror`; a variant per cause, its words in
`#[error]`). This script finds every `Result<T, String>` (over several
lines, nested generics too) outside tests — files ending `_test.rs` and
a file's `#[cfg(test)] mod tests` — and exits 1 listing them.

The CLI is exempt: its value parsers follow clap's convention (an error
that becomes the usage message).

Usage: .ci/string_errors.py [dir ...]   (default: the library crates' src)
"""

import os
import re
import sys

DIRS = ["broker/src", "protocol/src", "coordinator/src"]


def generic_args(text, start):
    """The top-level arguments of the `<...>` opening at `start`, and where
    it closes; None when it never closes."""
    depth, args, current = 0, [], []
    for i in range(start, len(text)):
        c = text[i]
        if c == "<":
            depth += 1
            if depth == 1:
                continue
        elif c == ">":
            depth -= 1
            if depth == 0:
                args.append("".join(current))
                return args, i
        elif c == "," and depth == 1:
            args.append("".join(current))
            current = []
            continue
        # `->` inside a Fn bound is not a closing bracket.
        if c == ">" and i > 0 and text[i - 1] == "-":
            depth += 1
        current.append(c)
    return None


def findings(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    tests = re.search(r"#\[cfg\(test\)\]\s*(?:#\[[^\n]*\n\s*)*mod tests\b", text)
    if tests:
        text = text[: tests.start()]
    for m in re.finditer(r"\bResult<", text):
        parsed = generic_args(text, m.end() - 1)
        if parsed is None:
            continue
        args = [a for a in parsed[0] if a.strip()]  # a trailing comma
        if len(args) == 2 and " ".join(args[1].split()) == "String":
            line = text.count("\n", 0, m.start()) + 1
            yield line, " ".join(text[m.start():m.start() + 80].split())


def main():
    dirs = sys.argv[1:] or DIRS
    found = []
    for d in dirs:
        for root, _, files in os.walk(d):
            for name in sorted(files):
                if name.endswith(".rs") and not name.endswith("_test.rs"):
                    path = os.path.join(root, name)
                    if "/generated/" in path:
                        continue
                    found += [(path, line, what) for line, what in findings(path)]
    for path, line, what in sorted(found):
        print(f"{path}:{line}: {what}")
    if found:
        print(f"{len(found)} Result<_, String> outside tests: give each an error enum", file=sys.stderr)
        return 1
    print("no Result<_, String> in " + ", ".join(dirs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
