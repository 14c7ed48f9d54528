//! Digest: the CRC-32 of each chunk of this broker's copy of a partition,
//! for `ringlog verify` to compare copies (a leader's and its followers',
//! a mirror's and its source's) without moving their bytes. Any copy
//! answers, leader or not, over what it holds flushed.

use super::forward::forward;
use super::{invalid_header, Dispatched, Failure, Payload, Response};
use crate::shard::{Owner, Shard};
use crate::storage::partition_log;
use protocol::codec::digest::{
    digest_response, Digests, CHUNK_BYTES_DEFAULT, CHUNK_BYTES_MAX, DIGESTS_MAX, DIGEST_BYTES_MAX,
};
use protocol::codec::verify;
use protocol::frame::Api;
use protocol::{wire, ErrorCode};
use std::rc::Rc;

/// Handles a Digest request.
pub fn handle(shard: &Rc<Shard>, request_id: u32, header: &[u8]) -> Result<Dispatched, Failure> {
    let api = Api::Digest;
    let request = verify::<wire::DigestRequest>(header).map_err(|e| invalid_header(api, e))?;
    let topic = request.topic().unwrap_or_default().to_string();
    let partition = request.partition();
    let chunk = match request.chunk_bytes() {
        0 => CHUNK_BYTES_DEFAULT,
        n if n <= CHUNK_BYTES_MAX => n,
        n => {
            return Err(Failure::new(
                ErrorCode::InvalidRequest,
                format!("chunk_bytes {n} is past {CHUNK_BYTES_MAX}"),
            ))
        }
    };
    let log = match super::locate(shard, &topic, partition)? {
        Owner::Here(log) => log,
        Owner::Shard(owner) => return forward(shard, owner, api as u16, request_id, header, &[]),
        Owner::Broker(broker) => return Err(Failure::not_owner(&topic, partition, broker)),
    };
    let (start, visible, flushed) = {
        let l = log.borrow();
        (l.start_offset(), l.visible_offset(), l.flushed_offset())
    };
    let from = request.from().max(start).min(flushed);
    let most = DIGEST_BYTES_MAX.min(u64::from(chunk) * DIGESTS_MAX);
    let to = request.to().min(flushed).min(from + most).max(from);
    let shard = shard.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        let digests = match partition_log::digests(&log, from, to, u64::from(chunk)).await {
            Ok(digests) => digests,
            Err(error) => {
                return Some(
                    Failure::new(
                        ErrorCode::StorageUnavailable,
                        format!("{topic}-{partition}: digests of {from}..{to}: {error}"),
                    )
                    .response(api as u16),
                )
            }
        };
        // Short only if the copy changed under the read (retention, a
        // truncation): the caller asks again.
        if digests.len() as u64 != (to - from).div_ceil(u64::from(chunk)) {
            return Some(
                Failure::new(
                    ErrorCode::StorageUnavailable,
                    format!(
                        "{topic}-{partition}: {from}..{to} changed while it was read; ask again"
                    ),
                )
                .response(api as u16),
            );
        }
        let digests = Digests {
            from,
            to,
            chunk_bytes: chunk,
            start_offset: start,
            visible_offset: visible,
            flushed_offset: flushed,
            digests,
        };
        let header = super::with_builder(&shard, |fbb| {
            digest_response(fbb, &topic, partition, &digests).to_vec()
        });
        Some(Response {
            api: api as u16,
            error: 0,
            header,
            payload: Payload::None,
        })
    })))
}
