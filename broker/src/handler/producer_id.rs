//! InitProducerId: an idempotent producer's id, from the control thread's
//! block of ids (which it takes from the registry: etcd, or a standalone
//! broker's data directory), with epoch 0.

use super::{Dispatched, Failure, Payload, Response};
use crate::shard::Shard;
use protocol::codec::producer_id::{init_producer_id_response, ProducerId};
use protocol::codec::verify;
use protocol::frame::Api;
use protocol::wire;
use std::rc::Rc;

/// Handles an InitProducerId request (its right, write on the topic it
/// names, was checked before).
pub fn handle(shard: &Rc<Shard>, header: &[u8]) -> Result<Dispatched, Failure> {
    let api = Api::InitProducerId;
    verify::<wire::InitProducerIdRequest>(header).map_err(|e| super::invalid_header(api, e))?;
    let (reply, answer) = flume::bounded(1);
    let msg = crate::mailbox::ControlMsg::ProducerId { reply };
    let shard = shard.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        let id = match super::topics::ask_control(&shard, msg, answer).await {
            Ok(id) => id,
            Err(error) => {
                return Some(Failure::new(error.code, error.message).response(api as u16))
            }
        };
        let header = super::with_builder(&shard, |fbb| {
            init_producer_id_response(fbb, ProducerId { id, epoch: 0 }).to_vec()
        });
        Some(Response {
            api: api as u16,
            error: 0,
            header,
            payload: Payload::None,
        })
    })))
}
