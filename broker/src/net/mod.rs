//! Networking: one listener per shard, connections, and the zero-copy path.

pub mod cold;
pub mod connection;
pub mod front;
pub mod listener;
pub mod sendfile;
pub mod tls;
