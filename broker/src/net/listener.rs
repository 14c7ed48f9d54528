//! The accept loop of one shard. Each shard has its own port, so a
//! shard-aware client's connection lands on the core that owns its data.

use crate::notify::Notify;
use crate::shard::Shard;
use glommio::net::TcpListener;
use std::rc::Rc;

/// Accepts connections until the shard stops.
pub async fn accept_loop(shard: Rc<Shard>, listener: TcpListener, stop: Notify) {
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
            Ok(stream) => {
                crate::metrics::bump(&shard.metrics.counters.connections_accepted_total, 1);
                glommio::spawn_local(crate::net::connection::serve(shard.clone(), stream)).detach();
            }
            Err(error) => {
                // EMFILE and friends: log, back off briefly, keep serving.
                tracing::warn!(%error, shard = shard.id, "accept failed");
                glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}
