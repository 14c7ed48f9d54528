//! loadgen: the paper's benchmarks and custom workloads against ringlog,
//! with the reporting benchmark users expect (kafka-perf-test lines,
//! hdrhistogram percentiles, JSON, SVG charts).
//!
//! - [`paper`]: the paper's experiments beside RabbitMQ and ActiveMQ ([`peers`]).
//! - [`workload`]: ringlog producers and consumers; [`e2e`]: end-to-end checks;
//!   [`group`]: a consumer group's members reading together; [`failover`]:
//!   how soon a group consumes a member's partitions again after it goes.
//! - [`stats`], [`report`], [`chart`]: counting and presenting.
//! - [`broker_process`]: a standalone broker started on demand.
#![deny(missing_docs)]

pub mod broker_process;
pub mod chart;
pub mod e2e;
pub mod failover;
pub mod group;
pub mod loopback;
pub mod paper;
pub mod peers;
pub mod report;
pub mod stats;
pub mod sweep;
pub mod workload;
