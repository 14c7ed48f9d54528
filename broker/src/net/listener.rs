//! The accept loop of one shard. Each shard has its own port, so a
//! shard-aware client's connection lands on the core that owns its data.

use super::front::Front;
use crate::notify::Notify;
use crate::shard::Shard;
use glommio::net::TcpListener;
use std::rc::Rc;

/// Accepts connections until the shard stops.
pub async fn accept_loop<F: Front>(shard: Rc<Shard>, listener: TcpListener, stop: Notify) {
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            stop.wait_until(|| shard.stopping.get()).await;
            None
        })
        .await;
        let Some(accepted) = accepted else {
            return;
        };
        match accepted {
            Ok(stream) if shard.connections.get() >= shard.config.max_connections_per_shard() => {
                // Refused politely: one error frame, then close, so the
                // descriptors stay for storage (issue 8, item 3).
                crate::metrics::bump(&shard.metrics.counters.connections_refused_total, 1);
                if let Some(left_out) = shard.accept_problems.allow() {
                    tracing::warn!(
                        shard = shard.id,
                        max = shard.config.max_connections_per_shard(),
                        left_out,
                        "refusing a connection: max_connections reached (one line a second)"
                    );
                }
                glommio::spawn_local(crate::net::connection::refuse::<F>(stream)).detach();
            }
            Ok(stream) => {
                crate::metrics::bump(&shard.metrics.counters.connections_accepted_total, 1);
                let served = shard.clone();
                shard.connections.set(shard.connections.get() + 1);
                glommio::spawn_local(async move {
                    crate::net::connection::serve::<F>(served.clone(), stream).await;
                    served.connections.set(served.connections.get() - 1);
                })
                .detach();
            }
            Err(error) => {
                // EMFILE and friends: log (once a second), back off
                // briefly, keep serving.
                if let Some(left_out) = shard.accept_problems.allow() {
                    tracing::warn!(%error, shard = shard.id, left_out, "accept failed (one line a second)");
                }
                glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}
