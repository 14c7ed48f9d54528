//! loadgen: the paper's benchmarks and custom workloads.
