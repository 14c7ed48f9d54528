//! loadgen: producer and consumer workloads against a ringlog broker, with
//! throughput reported the way `kafka-producer-perf-test` does.
#![deny(missing_docs)]

pub mod workload;
