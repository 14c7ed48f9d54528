#!/usr/bin/env bash
# Builds the fuzz targets with libFuzzer's coverage instrumentation (on the
# stable toolchain, no sanitizer: the code under test is safe Rust) and runs
# each one: the checked-in corpus first, then new inputs for SECONDS.
#
#   bash tests/fuzz/run.sh [SECONDS] [TARGET...]      (default 45, all)
#
# A crash leaves its input in tests/fuzz/artifacts/<target>/ and fails the
# script. New interesting inputs go to target/fuzz-corpus/, not into the
# repository's seed corpus.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-45}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(frame message_set batch batch_read recovery)
fi
triple="$(rustc -vV | sed -n 's/^host: //p')"
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions"
cargo build --release --locked --manifest-path tests/fuzz/Cargo.toml --target "$triple" \
    --target-dir target/fuzz --bins
for target in "${targets[@]}"; do
    seeds="tests/fuzz/corpus/$target"
    found="target/fuzz-corpus/$target"
    artifacts="tests/fuzz/artifacts/$target"
    mkdir -p "$found" "$artifacts"
    echo "fuzz: $target — $(ls "$seeds" | wc -l) seeds, then ${seconds}s of new inputs"
    "target/fuzz/$triple/release/$target" "$found" "$seeds" \
        -max_total_time="$seconds" -artifact_prefix="$artifacts/" \
        -print_final_stats=1 -max_len=70000 2>&1 |
        grep -E "^(#[0-9]+ *DONE|stat::number_of_executed_units|stat::average_exec_per_sec|==|SUMMARY|INFO: seed corpus|.*panicked)" || true
    if [ -n "$(ls -A "$artifacts")" ]; then
        echo "fuzz: $target found a failing input: $(ls "$artifacts")" >&2
        exit 1
    fi
done
