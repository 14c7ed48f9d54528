//! ListOffsets: the earliest retained offset, the latest visible (flushed)
//! offset, or the offset to start from to see everything of a time or
//! later (format 1: a segment's granularity, as in the paper; format 2:
//! the exact record, `storage::partition_log::offset_for_time`).

use super::forward::forward;
use super::{invalid_header, Dispatched, Failure};
use crate::reply::Response;
use crate::shard::{Owner, Shard};
use crate::storage::partition_log;
use protocol::codec::{verify, OffsetSpec};
use protocol::frame::Api;
use protocol::{wire, ErrorCode};
use std::rc::Rc;

/// Handles a ListOffsets request.
pub fn handle(shard: &Rc<Shard>, request_id: u32, header: &[u8]) -> Result<Dispatched, Failure> {
    let request = verify::<wire::ListOffsetsRequest>(header)
        .map_err(|e| invalid_header(Api::ListOffsets, e))?;
    let topic_name = request.topic().unwrap_or_default();
    let partition = request.partition();
    let log = match super::locate(shard, topic_name, partition)? {
        Owner::Here(log) => log,
        Owner::Shard(owner) => {
            return forward(
                shard,
                owner,
                Api::ListOffsets as u16,
                request_id,
                header,
                &[],
            );
        }
        Owner::Broker(broker) => return Err(Failure::not_owner(topic_name, partition, broker)),
    };
    if let Some(replica) = shard.replica(topic_name, partition) {
        super::replicated::check_leader(&replica, -1)?;
    }
    let offsets = log.borrow().offsets();
    let answer = move |shard: &Shard, offset: u64, offsets| {
        let header = super::with_builder(shard, |fbb| {
            protocol::codec::list_offsets_response(fbb, offset, offsets).to_vec()
        });
        Response {
            api: Api::ListOffsets as u16,
            error: 0,
            header,
            payload: super::Payload::None,
        }
    };
    let offset = match OffsetSpec::from_wire(request.spec()) {
        Some(OffsetSpec::Earliest) => offsets.start_offset,
        Some(OffsetSpec::Latest) => offsets.flushed_offset,
        Some(OffsetSpec::BeforeTime) => {
            // Format 2 may read the files (a hop over batch headers, one
            // batch's records): later.
            let time = request.timestamp_ms();
            let shard = shard.clone();
            return Ok(Dispatched::Later(Box::pin(async move {
                Some(match partition_log::offset_for_time(&log, time).await {
                    Ok(offset) => {
                        let offsets = log.borrow().offsets();
                        answer(&shard, offset, offsets)
                    }
                    Err(error) => Failure::from(error).response(Api::ListOffsets as u16),
                })
            })));
        }
        None => {
            return Err(Failure::new(
                ErrorCode::InvalidRequest,
                format!("unknown offset spec {}", request.spec().0),
            ));
        }
    };
    Ok(Dispatched::Ready(answer(shard, offset, offsets)))
}
