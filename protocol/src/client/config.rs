//! One place for the client's timeouts and retry policy, shared by the
//! [`Client`](super::Client) and every producer and consumer made from it.

use std::time::Duration;

/// Timeouts and retries of a [`Client`](super::Client) and of the
/// producers and consumers made from it. `ClientConfig::default()` gives
/// the values below.
///
/// ```
/// use protocol::client::ClientConfig;
/// use std::time::Duration;
/// let config = ClientConfig {
///     request_timeout: Duration::from_secs(5),
///     retries: 3,
///     ..ClientConfig::default()
/// };
/// assert_eq!(config.backoff(0), Duration::from_millis(100));
/// assert_eq!(config.backoff(1), Duration::from_millis(200));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// How long opening a connection may take: the TCP connect, and then
    /// the broker's answer to the handshake (each). A bootstrap address
    /// that does not answer in time is skipped for the next. Default 5 s.
    pub connect_timeout: Duration,
    /// How long a request may wait for its response beyond the wait it
    /// asks for itself (a fetch's or heartbeat's long-poll). Past it the
    /// request fails with [`ClientError::Timeout`](super::ClientError::Timeout)
    /// and the connection is dropped. Default 30 s.
    pub request_timeout: Duration,
    /// How long [`Producer::flush`](super::Producer::flush) waits for every
    /// queued message to be acknowledged (or finally refused), and how long
    /// `send` waits for room when the producer's buffer is full. Default 30 s.
    pub flush_timeout: Duration,
    /// How many times a request that failed in a way that may pass (a
    /// broken or timed-out connection, NOT_OWNER, OVERLOADED,
    /// SHUTTING_DOWN, STORAGE_UNAVAILABLE) is tried again, each after
    /// reconnecting and refreshing metadata. 0 turns retries off.
    /// Default 16 (about 13 s of backoff in all). A producer's batches
    /// have their own bound, a deadline:
    /// [`ProducerConfig::delivery_timeout`](super::ProducerConfig::delivery_timeout).
    pub retries: u32,
    /// The wait before the first retry; it doubles for each further one.
    /// Default 100 ms.
    pub retry_backoff: Duration,
    /// The longest wait between two retries. Default 1 s: at 2 s, a
    /// producer whose leader was SIGKILLed with a 3 s lease sometimes
    /// retried first at 3.1 s, just before the election, and next at
    /// 5.1 s (`loadgen replication`: one failover in five took 5.2 s
    /// instead of 3.2 s); at 1 s the retry after an election comes within
    /// 1 s of it.
    pub retry_backoff_max: Duration,
    /// TLS for every connection (trusted CA, optional client certificate);
    /// `None` (the default) connects in plain TCP.
    pub tls: Option<super::TlsConfig>,
    /// A SCRAM-SHA-256 login for every connection, for brokers that need
    /// one (`authentication = "scram"`); `None` (the default) logs in as no
    /// one: the broker's anonymous user, or the TLS certificate's.
    pub login: Option<Login>,
}

/// A user and password to log in with (SCRAM-SHA-256: the password never
/// leaves the client; the client also checks that the broker knows the
/// user's credential).
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    /// The user name.
    pub user: String,
    /// The password's bytes (UTF-8 as typed; not normalised).
    pub password: Vec<u8>,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password stays out of logs and panics.
        f.debug_struct("Login")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            flush_timeout: Duration::from_secs(30),
            retries: 16,
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            tls: None,
            login: None,
        }
    }
}

impl ClientConfig {
    /// The wait before retry number `attempt + 1` (0-based): the backoff
    /// doubled `attempt` times, at most `retry_backoff_max`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        self.retry_backoff
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.retry_backoff_max)
    }
}
