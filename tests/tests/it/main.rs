//! Integration tests: the real broker binary, driven through the client.
//! One test binary with many modules (faster to link than one per file).

mod admin;
mod bad_input;
mod cluster;
mod durability;
mod groups;
mod limits;
mod loadgen;
mod peers;
mod produce_consume;
mod retention;
mod stalled_consumer;
mod util;
