//! Why a connection is refused, or its login put off, before it is served:
//! the bounds on what a client may hold open (auth/pending.rs,
//! auth/quota.rs), each a variant with the numbers the refusal names.

use std::net::IpAddr;

/// A bound a new connection, or a new login, would pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The address holds its `max_connections_per_address`.
    #[error("{address} holds {count} connections already, the broker's max_connections_per_address; close some or retry later")]
    Address {
        /// The client's address.
        address: IpAddr,
        /// Its open connections.
        count: u32,
    },
    /// The principal holds its quota's connections.
    #[error("{principal} holds {count} connections already, its quota; close some or retry later")]
    Principal {
        /// Who logged in.
        principal: String,
        /// Its open connections.
        count: u32,
    },
    /// Too many connections of the address have not logged in.
    #[error("{address} holds {count} connections that have not logged in, the broker's max_unauthenticated_connections_per_address; log in on them or close them")]
    Unauthenticated {
        /// The client's address.
        address: IpAddr,
        /// Its connections not logged in.
        count: u32,
    },
    /// Too many SCRAM exchanges of the address are under way.
    #[error("{address} has {count} logins under way, the broker's login_exchanges_per_address_max: retry once one has finished")]
    Exchanges {
        /// The client's address.
        address: IpAddr,
        /// Its exchanges under way.
        count: u32,
    },
}
