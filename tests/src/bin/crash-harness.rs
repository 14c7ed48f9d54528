//! The crash-consistency harness, for long runs:
//! `cargo build --bins && target/debug/crash-harness --rounds 200 [--seed N] [--partitions 4]`.
//! The integration test `crash::…` runs 20 rounds of the same code.
#![allow(
    clippy::too_many_lines,
    reason = "a crash round is one scenario read top to bottom"
)]

use harness::crash::{run, Options};

fn main() {
    let mut options = Options {
        rounds: 20,
        seed: harness::crash::seed_from_clock(),
        partitions: 4,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        let number: u64 = value.parse().unwrap_or_else(|_| {
            eprintln!("crash-harness: {flag} needs a number, got {value:?}");
            eprintln!("usage: crash-harness [--rounds N] [--seed N] [--partitions N]");
            std::process::exit(2)
        });
        match flag.as_str() {
            "--rounds" => options.rounds = number as usize,
            "--seed" => options.seed = number,
            "--partitions" => options.partitions = number.clamp(1, 64) as u32,
            other => {
                eprintln!("crash-harness: unknown flag {other}");
                eprintln!("usage: crash-harness [--rounds N] [--seed N] [--partitions N]");
                std::process::exit(2)
            }
        }
    }
    println!(
        "crash harness: {} rounds, {} partitions, seed {}",
        options.rounds, options.partitions, options.seed
    );
    let report = run(&options);
    println!("{report:#?}");
}
