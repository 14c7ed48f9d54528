#!/usr/bin/env bash
# protoc for etcd-client's build script (see .cargo/config.toml): the binary
# vendored in the protoc-bin-vendored-<platform> crate, found beside the crate
# being built in cargo's registry (build scripts run with CARGO_MANIFEST_DIR
# inside it), else anywhere in cargo's registry, else a protoc on PATH.
set -euo pipefail
case "$(uname -m)" in
    x86_64) platform=linux-x86_64 ;;
    aarch64) platform=linux-aarch_64 ;;
    *) platform="linux-$(uname -m)" ;;
esac
candidates=()
if [[ -n "${CARGO_MANIFEST_DIR:-}" ]]; then
    candidates+=("$(dirname "$CARGO_MANIFEST_DIR")"/protoc-bin-vendored-"$platform"-*/bin/protoc)
fi
candidates+=("${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/protoc-bin-vendored-"$platform"-*/bin/protoc)
for protoc in "${candidates[@]}"; do
    if [[ -f "$protoc" ]]; then
        [[ -x "$protoc" ]] || chmod +x "$protoc" 2>/dev/null || exec bash -c 'echo "build/protoc.sh: $0 is not executable" >&2; exit 1' "$protoc"
        exec "$protoc" "$@"
    fi
done
if command -v protoc >/dev/null 2>&1; then
    exec protoc "$@"
fi
echo "build/protoc.sh: no protoc: the protoc-bin-vendored-$platform crate is not in cargo's registry and none is on PATH (run cargo build from the workspace, which downloads it)" >&2
exit 1
