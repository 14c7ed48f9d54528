//! Orphaned (api 30): what this broker keeps in `.orphaned/`, and a purge
//! of what is older than an age, on an operator's request only
//! (`storage/orphans.rs`). The file-system walk runs on a blocking thread,
//! not on the shard.

use super::{invalid_header, Dispatched, Failure, Payload, Response};
use crate::shard::Shard;
use protocol::codec::orphans::Orphaned;
use protocol::codec::verify;
use protocol::frame::Api;
use protocol::{wire, ErrorCode};
use std::rc::Rc;

/// Handles an Orphaned request.
pub fn handle(shard: &Rc<Shard>, header: &[u8]) -> Result<Dispatched, Failure> {
    let api = Api::Orphaned;
    let request = verify::<wire::OrphanedRequest>(header).map_err(|e| invalid_header(api, e))?;
    let purge = request.purge().then_some(request.older_than_ms());
    let data_dir = shard.config.data_dir.clone();
    let broker_id = shard.config.broker_id;
    let shard = shard.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        let walked = glommio::executor()
            .spawn_blocking(move || -> std::io::Result<Orphaned> {
                let purged = match purge {
                    Some(older_than_ms) => {
                        crate::storage::orphans::purge(&data_dir, older_than_ms, now_ms())?
                    }
                    None => Vec::new(),
                };
                Ok(Orphaned {
                    broker_id,
                    orphans: crate::storage::orphans::list(&data_dir)?,
                    purged,
                })
            })
            .await;
        Some(match walked {
            Ok(answer) => {
                let header = super::with_builder(&shard, |fbb| {
                    protocol::codec::orphans::orphaned_response(fbb, &answer).to_vec()
                });
                Response {
                    api: api as u16,
                    error: 0,
                    header,
                    payload: Payload::None,
                }
            }
            Err(error) => Failure::new(
                ErrorCode::StorageFailed,
                format!("reading the data directory's .orphaned/: {error}"),
            )
            .response(api as u16),
        })
    })))
}

/// The wall clock in ms since the Unix epoch (the stamps' clock).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
