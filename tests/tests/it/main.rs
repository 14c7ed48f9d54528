//! Integration tests: the real broker binary, driven through the client.
//! One test binary with many modules (faster to link than one per file).
//!
//! The workspace lints apply here too (issue 8, item 22); a test's unwrap
//! is its assertion, so those two are allowed.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario read top to bottom"
)]

mod admin;
mod bad_input;
mod cli;
mod client;
mod cluster;
mod cluster_safety;
mod cold_reads;
mod crash;
mod delivery;
mod disk_driver;
mod disk_full;
mod disk_loss;
mod durability;
mod etcd_members;
mod failback;
mod format_two;
mod give_way;
mod group_faults;
mod groups;
mod idempotence;
mod kafka_differential;
mod kafka_groups;
mod kafka_listener;
mod limits;
mod loadgen;
mod mirror;
mod mirror_safety;
mod more_partitions;
mod multi_fetch;
mod nemesis;
mod orphaned;
mod partial_outage;
mod peers;
mod prefetch;
mod produce_consume;
mod python;
mod replica_operations;
mod replication;
mod retention;
mod security;
mod security_holes;
mod served;
mod stalled_consumer;
mod tls;
mod topic_config;
mod truncation;
mod util;
mod verify;
