//! Which etcd endpoints answer. The etcd client balances its requests over
//! every endpoint it was given, and one whose member is dead fails each
//! request sent its way ("tcp connect error"): with one member of three
//! down, about half of the group and admin requests failed, and a broker
//! starting meanwhile could fail to start (issue 27, item 5). So the
//! broker connects through the endpoints that accept a connection, and a
//! task probes every endpoint each [`PROBE_EVERY`], taking those that stop
//! answering out of the client's balance and putting them back when they
//! answer again — never the last one.
//!
//! The probe is a TCP connect: it finds a dead member, a closed port and an
//! unreachable host; a member that accepts connections but does not answer
//! (stopped, partitioned from its quorum) is etcd's own business, and its
//! requests time out as before.

use etcd_client::Client;
use std::time::Duration;

/// How often every endpoint is probed.
pub const PROBE_EVERY: Duration = Duration::from_millis(500);

/// The longest a probe waits for a connection.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// `host:port` of an endpoint URL (`http://host:port`, `https://…`, or a
/// bare `host:port`).
fn address(endpoint: &str) -> &str {
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .unwrap_or(endpoint);
    rest.split('/').next().unwrap_or(rest)
}

async fn answers(endpoint: &str) -> bool {
    matches!(
        tokio::time::timeout(
            PROBE_TIMEOUT,
            tokio::net::TcpStream::connect(address(endpoint))
        )
        .await,
        Ok(Ok(_))
    )
}

/// The endpoints that accept a connection now, in the given order; all of
/// them when none does (the connect then says why).
pub async fn live(endpoints: &[String]) -> Vec<String> {
    let mut up = Vec::with_capacity(endpoints.len());
    for endpoint in endpoints {
        if answers(endpoint).await {
            up.push(endpoint.clone());
        }
    }
    if up.is_empty() {
        endpoints.to_vec()
    } else {
        up
    }
}

/// Keeps `client`'s balance to the endpoints that answer; `in_use` are the
/// ones it was connected with. Runs until the task is aborted.
pub async fn keep_live(client: Client, endpoints: Vec<String>, mut in_use: Vec<String>) {
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        for endpoint in &endpoints {
            let up = answers(endpoint).await;
            let used = in_use.contains(endpoint);
            if up && !used && client.add_endpoint(endpoint).await.is_ok() {
                tracing::info!(%endpoint, "etcd endpoint answers again: requests go to it too");
                in_use.push(endpoint.clone());
            } else if !up
                && used
                && in_use.len() > 1
                && client.remove_endpoint(endpoint).await.is_ok()
            {
                tracing::warn!(%endpoint, "etcd endpoint does not accept connections: requests go to the other endpoints until it does");
                in_use.retain(|e| e != endpoint);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_url_gives_its_address() {
        assert_eq!(address("http://127.0.0.1:2379"), "127.0.0.1:2379");
        assert_eq!(address("https://etcd-1:2379/"), "etcd-1:2379");
        assert_eq!(address("10.0.0.1:2379"), "10.0.0.1:2379");
    }
}
