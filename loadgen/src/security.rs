//! `loadgen security`: what access control costs (issue 22, item 7).
//!
//! Two standalone brokers this starts itself, holding the same users: one
//! with security off (`authentication = "none"`, `authorization = false`),
//! one with `authentication = "scram"`, `authorization = true` and a rule
//! set of `--rules` rules, among them the one that lets the benchmark's
//! user (not a super user, so every request is checked) write and read its
//! topic. Both are logged in to the same way, so the difference is the
//! check alone: one cached lookup per request, not per message. Rounds are
//! interleaved (off, on, off, on, ...): each produces `--messages` into a
//! new topic in batches of `--batch`, then consumes them; the medians
//! count, with the CPU of the broker and of loadgen per message.

use crate::broker_process::LocalBroker;
use crate::cluster_process::process_cpu;
use crate::stats::Stats;
use crate::workload::{self, ConsumeSpec, Length, ProduceSpec};
use anyhow::Context;
use coordinator::security::{SecurityChange, SecurityRecords};
use protocol::acl::AclRule;
use protocol::client::{AckMode, Login};
use protocol::scram::{Credential, ITERATIONS_MIN};
use serde::Serialize;

/// What to run.
#[derive(Debug, Clone)]
pub struct SecuritySpec {
    /// Messages per round.
    pub messages: u64,
    /// Payload bytes.
    pub size: usize,
    /// Messages per produce request.
    pub batch: usize,
    /// Partitions of each round's topic.
    pub partitions: u32,
    /// Rounds per broker.
    pub rounds: usize,
    /// Rules in the secured broker's set.
    pub rules: usize,
}

/// One broker's medians.
#[derive(Debug, Clone, Serialize)]
pub struct SecurityRow {
    /// Which broker.
    pub label: String,
    /// Produce, messages per second (median).
    pub produce_msgs_per_sec: f64,
    /// Every round's produce rate.
    pub produce_rounds: Vec<f64>,
    /// Broker + loadgen CPU µs per produced message (the median round's).
    pub produce_cpu_us_per_msg: f64,
    /// Consume, messages per second (median).
    pub consume_msgs_per_sec: f64,
    /// Every round's consume rate.
    pub consume_rounds: Vec<f64>,
    /// Broker + loadgen CPU µs per consumed message (the median round's).
    pub consume_cpu_us_per_msg: f64,
}

/// Everything `loadgen security` measured.
#[derive(Debug, Clone, Serialize)]
pub struct SecurityOutcome {
    /// The spec's numbers.
    pub messages: u64,
    /// Payload bytes.
    pub size: usize,
    /// Messages per produce request.
    pub batch: usize,
    /// Rules in the secured broker.
    pub rules: usize,
    /// Off, then on.
    pub rows: Vec<SecurityRow>,
    /// On's produce rate below off's, percent (negative: faster).
    pub produce_cost_pct: f64,
    /// On's consume rate below off's, percent.
    pub consume_cost_pct: f64,
    /// One check of a produce's need against the rule set, as the broker
    /// makes it per request: ns, timed here over a million checks.
    pub check_ns: f64,
}

const USER: &str = "bench";
const PASSWORD: &[u8] = b"bench-password";

/// The users both brokers hold, and the rules of the secured one: the
/// benchmark user's two, and `rules - 2` others for other users and
/// topics (literal and prefixed), so the lookup is in a set of that size.
fn records(rules: usize, with_rules: bool) -> SecurityRecords {
    let mut records = SecurityRecords::default();
    records
        .users
        .insert(USER.to_string(), Credential::new(PASSWORD, ITERATIONS_MIN));
    if with_rules {
        let mut all = vec![
            format!("allow User:{USER} all topic-prefix:bench-"),
            format!("allow User:{USER} create cluster:cluster"),
        ];
        for i in 0..rules.saturating_sub(2) {
            all.push(match i % 3 {
                0 => format!("allow User:u{i} read topic:t{i}"),
                1 => format!("allow User:u{i} write topic-prefix:p{i}."),
                _ => format!("deny User:u{i} all group:g{i}"),
            });
        }
        let parsed = all.iter().filter_map(|r| AclRule::parse(r).ok()).collect();
        records.apply(&SecurityChange::AddAcls(parsed));
    }
    records
}

fn start(label: &str, secured: bool, rules: usize) -> anyhow::Result<LocalBroker> {
    let toml = if secured {
        "authentication = \"scram\"\nauthorization = true\n"
    } else {
        ""
    };
    LocalBroker::start_with(1, label, toml, |dir| {
        coordinator::security::write_file(dir, &records(rules, secured))
            .context("writing the brokers' users and rules")
    })
}

/// One round on `broker`: produce into a new topic, then consume it;
/// (produce msg/s, its CPU µs/msg, consume msg/s, its CPU µs/msg).
fn round(spec: &SecuritySpec, broker: &LocalBroker, topic: &str) -> anyhow::Result<[f64; 4]> {
    let cpu = || (process_cpu(broker.pid()) + process_cpu(std::process::id())).as_secs_f64();
    let stats = Stats::new();
    let before = cpu();
    workload::produce(
        &ProduceSpec {
            partitions: spec.partitions,
            ..ProduceSpec::new(
                &broker.brokers,
                topic,
                Length::Messages(spec.messages),
                spec.size,
                spec.batch,
                AckMode::Written,
            )
        },
        &stats,
    )?;
    let produced = stats.summary();
    let produce_cpu = (cpu() - before) * 1e6 / spec.messages as f64;
    let stats = Stats::new();
    let before = cpu();
    workload::consume(
        &ConsumeSpec {
            brokers: broker.brokers.clone(),
            topic: topic.to_string(),
            length: Length::Messages(spec.messages),
            fetch_bytes: 1 << 20,
            consumers: 1,
            prefetch: 0,
        },
        &stats,
    )?;
    let consumed = stats.summary();
    let consume_cpu = (cpu() - before) * 1e6 / spec.messages as f64;
    crate::connect(&broker.brokers)?.delete_topic(topic)?;
    Ok([
        produced.msgs_per_sec,
        produce_cpu,
        consumed.msgs_per_sec,
        consume_cpu,
    ])
}

/// Runs the interleaved rounds. Every connection logs in as the
/// benchmark's user ([`crate::set_login`]).
pub fn run(spec: &SecuritySpec) -> anyhow::Result<SecurityOutcome> {
    crate::set_login(Some(Login {
        user: USER.into(),
        password: PASSWORD.to_vec(),
    }));
    let off = start("security-off", false, spec.rules)?;
    let on = start("security-on", true, spec.rules)?;
    let mut results: [Vec<[f64; 4]>; 2] = [Vec::new(), Vec::new()];
    for r in 0..spec.rounds.max(1) {
        for (i, broker) in [&off, &on].into_iter().enumerate() {
            let figures = round(spec, broker, &format!("bench-{r}"))?;
            println!(
                "{} round {r}: produce {:.0} msg/s ({:.3} CPU µs/msg), consume {:.0} msg/s ({:.3} CPU µs/msg)",
                ["off", "on"][i],
                figures[0],
                figures[1],
                figures[2],
                figures[3]
            );
            results[i].push(figures);
        }
    }
    let row = |label: &str, runs: &[[f64; 4]]| {
        let median_of = |column: usize| {
            let mut sorted: Vec<[f64; 4]> = runs.to_vec();
            sorted.sort_by(|a, b| a[column].total_cmp(&b[column]));
            sorted[sorted.len() / 2]
        };
        let produce = median_of(0);
        let consume = median_of(2);
        SecurityRow {
            label: label.into(),
            produce_msgs_per_sec: produce[0],
            produce_rounds: runs.iter().map(|f| f[0]).collect(),
            produce_cpu_us_per_msg: produce[1],
            consume_msgs_per_sec: consume[2],
            consume_rounds: runs.iter().map(|f| f[2]).collect(),
            consume_cpu_us_per_msg: consume[3],
        }
    };
    let off_row = row(
        "security off (no login needed, no authorization)",
        &results[0],
    );
    let on_row = row(
        &format!(
            "scram + authorization, {} rules, user not a super user",
            spec.rules
        ),
        &results[1],
    );
    let cost = |off: f64, on: f64| (off - on) * 100.0 / off.max(1e-9);
    let check_ns = time_check(spec.rules);
    Ok(SecurityOutcome {
        messages: spec.messages,
        size: spec.size,
        batch: spec.batch,
        rules: spec.rules,
        produce_cost_pct: cost(off_row.produce_msgs_per_sec, on_row.produce_msgs_per_sec),
        consume_cost_pct: cost(off_row.consume_msgs_per_sec, on_row.consume_msgs_per_sec),
        rows: vec![off_row, on_row],
        check_ns,
    })
}

/// The broker's check of a produce (write on `bench-0` for the benchmark's
/// user) against the secured broker's rule set, timed over a million.
fn time_check(rules: usize) -> f64 {
    use protocol::acl::{Acls, Operation, ResourceType};
    let acls = Acls::new(records(rules, true).acls, &[]);
    let principal = format!("User:{USER}");
    let checks = 1_000_000u32;
    let started = std::time::Instant::now();
    let mut allowed = 0u32;
    for i in 0..checks {
        let topic = if i % 2 == 0 { "bench-0" } else { "bench-1" };
        allowed += u32::from(
            acls.authorize(
                std::hint::black_box(&principal),
                ResourceType::Topic,
                std::hint::black_box(topic),
                Operation::Write,
            )
            .allowed(),
        );
    }
    let elapsed = started.elapsed();
    assert_eq!(allowed, checks, "the benchmark's user must be allowed");
    elapsed.as_nanos() as f64 / f64::from(checks)
}

/// The figures as a Markdown table.
pub fn table(outcome: &SecurityOutcome) -> String {
    let mut out = String::from(
        "| broker | produce msg/s (median) | every round | CPU µs/msg | consume msg/s (median) | every round | CPU µs/msg |\n|---|---|---|---|---|---|---|\n",
    );
    let rounds = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for row in &outcome.rows {
        out.push_str(&format!(
            "| {} | {:.0} | {} | {:.3} | {:.0} | {} | {:.3} |\n",
            row.label,
            row.produce_msgs_per_sec,
            rounds(&row.produce_rounds),
            row.produce_cpu_us_per_msg,
            row.consume_msgs_per_sec,
            rounds(&row.consume_rounds),
            row.consume_cpu_us_per_msg
        ));
    }
    out.push_str(&format!(
        "\nWith access control on, produce runs {:.1}% and consume {:.1}% below security off ({} messages of {} bytes, {} per produce request; negative: faster). One check against the {} rules takes {:.0} ns, once per request: {:.2} ns per produced message.\n",
        outcome.produce_cost_pct,
        outcome.consume_cost_pct,
        outcome.messages,
        outcome.size,
        outcome.batch,
        outcome.rules,
        outcome.check_ns,
        outcome.check_ns / outcome.batch.max(1) as f64
    ));
    out
}
