//! InitProducerId (api 26): an idempotent producer's id and epoch.

use super::{finish, verify, DecodeError};
use crate::generated::ringlog::wire;
use flatbuffers::FlatBufferBuilder;

/// An idempotent producer's identity: its batches carry both, and each
/// partition's sequence numbers count under them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerId {
    /// Unique in the cluster, never handed out twice.
    pub id: i64,
    /// Its epoch (0 when handed out).
    pub epoch: i16,
}

/// InitProducerId request header: the topic the producer writes (the
/// right it needs is write on it).
pub fn init_producer_id_request<'b>(fbb: &'b mut FlatBufferBuilder<'_>, topic: &str) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(topic);
    let root = wire::InitProducerIdRequest::create(
        fbb,
        &wire::InitProducerIdRequestArgs { topic: Some(topic) },
    );
    finish(fbb, root)
}

/// InitProducerId response header.
pub fn init_producer_id_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    producer: ProducerId,
) -> &'b [u8] {
    fbb.reset();
    let root = wire::InitProducerIdResponse::create(
        fbb,
        &wire::InitProducerIdResponseArgs {
            producer_id: producer.id,
            producer_epoch: producer.epoch,
        },
    );
    finish(fbb, root)
}

/// Reads an InitProducerId response header; an id or epoch below 0 is
/// not one.
pub fn decode_init_producer_id(header: &[u8]) -> Result<ProducerId, DecodeError> {
    let response = verify::<wire::InitProducerIdResponse>(header)?;
    let producer = ProducerId {
        id: response.producer_id(),
        epoch: response.producer_epoch(),
    };
    if producer.id < 0 || producer.epoch < 0 {
        return Err(DecodeError::ProducerId {
            id: producer.id,
            epoch: producer.epoch,
        });
    }
    Ok(producer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_round_trips_and_a_negative_one_is_refused() {
        let mut fbb = FlatBufferBuilder::new();
        let producer = ProducerId {
            id: 1 << 40,
            epoch: 3,
        };
        let bytes = init_producer_id_response(&mut fbb, producer).to_vec();
        assert_eq!(decode_init_producer_id(&bytes), Ok(producer));
        let bytes = init_producer_id_response(&mut fbb, ProducerId { id: -1, epoch: 0 }).to_vec();
        assert!(decode_init_producer_id(&bytes).is_err());
    }
}
