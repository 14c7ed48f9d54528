//! Issue 8, item 16: the crash-consistency harness, 20 rounds (see
//! `tests/src/crash.rs`; `crash-harness --rounds N` for long runs).

use harness::crash::{run, seed_from_clock, Options};

#[test]
fn r8_16_twenty_kill_9_rounds_with_damage_keep_every_acknowledged_message() {
    let seed = std::env::var("RINGLOG_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(seed_from_clock);
    eprintln!("crash harness seed {seed} (RINGLOG_CRASH_SEED={seed} reruns it)");
    let report = run(&Options {
        rounds: 20,
        seed,
        partitions: 4,
    });
    eprintln!("{report:#?}");
    assert_eq!(report.rounds, 20);
    assert!(report.acknowledged > 0, "nothing was acknowledged");
    assert!(report.verified >= report.acknowledged);
    assert_eq!(report.damage.len(), 6, "every kind of damage was played");
}
