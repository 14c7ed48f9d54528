//! Request handlers, one file per request, and ringlog's protocol as a
//! connection's front end: `native.rs` (its frames), `opening.rs` (the
//! Handshake and SCRAM login), `admission.rs` (quotas and the produce
//! budget), `client.rs` (what is known of the client).
//!
//! Each handler turns a verified wire header into a domain call at its top
//! and maps the outcome (including `StorageError`) to a wire `ErrorCode` at
//! its bottom. A handler either answers at once, answers later (a produce
//! waiting for its acknowledgement, a fetch long-poll, a forwarded request),
//! or not at all (a successful `acks = none` produce, as in the paper).

pub mod admission;
pub mod client;
pub mod digest;
pub mod failback;
pub mod fetch;
pub mod forward;
pub mod give_way;
pub mod groups;
pub mod list_offsets;
pub mod metadata;
pub mod mirror;
pub mod multi_fetch;
pub mod native;
pub mod opening;
pub mod operations;
pub mod orphaned;
pub mod produce;
pub mod producer_id;
pub mod replicated;
pub mod security;
pub mod topic_config;
pub mod topics;

pub use crate::reply::{error_response, Dispatched, Failure, Later, Payload, Response};
use crate::shard::{LocateError, Owner, Shard};
use give_way::GiveWay;
use protocol::frame::{Api, API_VERSION};
use protocol::types::PartitionId;
use protocol::ErrorCode;
use std::rc::Rc;

/// Refuses a request that names its topic by an id the topic no longer has
/// (deleted and created again under the name): its offsets or batches
/// belong to the old topic. An empty or absent id checks nothing.
pub fn check_topic_id(shard: &Shard, topic: &str, topic_id: Option<&str>) -> Result<(), Failure> {
    let Some(wanted) = topic_id.filter(|id| !id.is_empty()) else {
        return Ok(());
    };
    let Some(found) = shard.topic(topic) else {
        return Ok(()); // locate says UNKNOWN_TOPIC
    };
    let found = found.borrow();
    if found.id.is_empty() || found.id == wanted {
        return Ok(());
    }
    Err(Failure::new(
        ErrorCode::UnknownTopicId,
        format!(
            "topic {topic:?} is now the topic with id {}, not {wanted}: it was deleted and created again, and offsets of the old one mean nothing here",
            found.id
        ),
    ))
}

/// Where a request's partition lives; an unknown topic or partition is the
/// client's error.
pub fn locate(shard: &Shard, topic: &str, partition: PartitionId) -> Result<Owner, Failure> {
    let owner = shard
        .locate(topic, partition)
        .map_err(|error| match error {
            LocateError::UnknownTopic => {
                Failure::new(ErrorCode::UnknownTopic, format!("unknown topic {topic:?}"))
            }
            LocateError::UnknownPartition { partitions } => Failure::new(
                ErrorCode::UnknownPartition,
                format!("topic {topic:?} has partitions 0..{partitions}, not {partition}"),
            ),
        })?;
    if let Owner::Here(log) = &owner {
        if log.borrow().lost() {
            return Err(data_lost(shard, topic, partition));
        }
    }
    Ok(owner)
}

/// DATA_LOST, saying where the marker is and what the operator may do.
fn data_lost(shard: &Shard, topic: &str, partition: PartitionId) -> Failure {
    let dir = shard
        .config
        .data_dir
        .join(crate::storage::partition_dir_name(topic, partition));
    Failure::new(
        ErrorCode::DataLost,
        format!(
            "{topic}-{partition}: its only copy was lost from broker {}'s data directory (wiped or replaced); it is not served, so that no offset is reused, until an operator restores {} or accepts the loss by removing {}/{} and restarting the broker",
            shard.config.broker_id,
            dir.display(),
            dir.display(),
            crate::storage::lost::MARKER
        ),
    )
}

/// Runs `build` with the shard's reusable builder and copies the header out.
pub fn with_builder(
    shard: &Shard,
    build: impl FnOnce(&mut protocol::flatbuffers::FlatBufferBuilder<'static>) -> Vec<u8>,
) -> Vec<u8> {
    let mut fbb = shard.fbb.borrow_mut();
    build(&mut fbb)
}

/// One request as the handlers see it: its frame, split into header and
/// payload.
#[derive(Clone, Copy)]
pub struct Request<'a> {
    /// The frame's api number (not yet checked).
    pub api: u16,
    /// The frame's api version (not yet checked).
    pub version: u16,
    /// The client's id for it, echoed in the response.
    pub request_id: u32,
    /// The flatbuffers header.
    pub header: &'a [u8],
    /// The bytes after the header (a produce's message set).
    pub payload: &'a [u8],
    /// Who sent it (the connection's principal); `None` for a request
    /// forwarded from another shard, checked where it arrived.
    pub principal: Option<&'a str>,
}

/// Dispatches one request. `give_way` is its connection's (see
/// `give_way.rs`).
pub fn dispatch(shard: &Rc<Shard>, give_way: &Rc<GiveWay>, request: Request<'_>) -> Dispatched {
    dispatch_once(shard, give_way, request, true)
}

/// A cluster member learns other brokers' topics from a watch, a moment
/// after they are created: a client that creates a topic through one broker
/// and at once produces through another would get UNKNOWN_TOPIC. So before
/// answering UNKNOWN_TOPIC, a cluster member has the control thread read the
/// registry (one etcd read) and open what it finds, then runs the request
/// again, once.
fn refresh_then_retry(
    shard: &Rc<Shard>,
    give_way: &Rc<GiveWay>,
    request: Request<'_>,
    failure: Failure,
) -> Dispatched {
    let (api, version, request_id) = (request.api, request.version, request.request_id);
    let (header, payload) = (request.header.to_vec(), request.payload.to_vec());
    let principal = request.principal.map(str::to_string);
    let (shard, give_way) = (shard.clone(), give_way.clone());
    Dispatched::Later(Box::pin(async move {
        let (reply, refreshed) = flume::bounded(1);
        let asked = shard
            .control
            .send_async(crate::mailbox::ControlMsg::Refresh {
                asked_at: std::time::Instant::now(),
                reply,
            })
            .await
            .is_ok();
        if !asked || refreshed.recv_async().await.is_err() {
            return Some(failure.response(api));
        }
        let again = Request {
            api,
            version,
            request_id,
            header: &header,
            payload: &payload,
            principal: principal.as_deref(),
        };
        match dispatch_once(&shard, &give_way, again, false) {
            Dispatched::Silent => None,
            Dispatched::Ready(response) => Some(response),
            Dispatched::Later(later) => later.await,
            Dispatched::Throttle(until) => {
                until.await;
                None
            }
        }
    }))
}

// Every api is matched by name: a new one must be placed here.
#[expect(
    clippy::too_many_lines,
    reason = "the checks every request passes, in order, then one exhaustive match over the apis"
)]
#[deny(clippy::wildcard_enum_match_arm)]
fn dispatch_once(
    shard: &Rc<Shard>,
    give_way: &Rc<GiveWay>,
    request: Request<'_>,
    may_refresh: bool,
) -> Dispatched {
    let Request {
        api,
        version,
        request_id,
        header,
        payload,
        principal,
    } = request;
    crate::metrics::bump(&shard.metrics.counters.requests_total, 1);
    let Some(known) = Api::from_u16(api) else {
        return fail(
            shard,
            api,
            Failure::new(ErrorCode::UnknownApi, format!("unknown api {api}")),
        );
    };
    if version != API_VERSION {
        return fail(
            shard,
            api,
            Failure::new(
                ErrorCode::UnsupportedVersion,
                format!("{known:?} version {version} is not supported (this broker speaks {API_VERSION})"),
            ),
        );
    }
    if shard.stopping.get() {
        return fail(
            shard,
            api,
            Failure::new(ErrorCode::ShuttingDown, "the broker is stopping"),
        );
    }
    // Only a Produce carries a payload (PROTOCOL.md §1): bytes anywhere
    // else are a client bug, said at once rather than ignored.
    if known != Api::Produce && !payload.is_empty() {
        return fail(
            shard,
            api,
            Failure::new(
                ErrorCode::InvalidRequest,
                format!(
                    "a {known:?} request carries no payload, got {} bytes after its header",
                    payload.len()
                ),
            ),
        );
    }
    if shard.config.authorization && may_refresh {
        if let Some(principal) = principal {
            if let Err(failure) = crate::auth::authorize::check(shard, principal, known, header) {
                return fail(shard, api, failure);
            }
        }
    }
    let principal = principal.unwrap_or(protocol::acl::ANONYMOUS);
    let result = match known {
        Api::Produce => produce::handle(shard, request_id, header, payload),
        Api::Fetch => fetch::handle(shard, give_way, request_id, header),
        Api::MultiFetch => multi_fetch::handle(shard, give_way, request_id, header),
        Api::CreatePartitions => topics::handle_create_partitions(shard, header),
        Api::PromoteMirror => mirror::handle_promote(shard, header),
        Api::MakeMirror => failback::handle_make(shard, header),
        Api::TruncateMirror => failback::handle_truncate(shard, request_id, header),
        Api::Orphaned => orphaned::handle(shard, header),
        Api::AlterTopicConfig => topic_config::handle(shard, header),
        Api::InitProducerId => producer_id::handle(shard, header),
        Api::Digest => digest::handle(shard, request_id, header),
        Api::ListOffsets => list_offsets::handle(shard, request_id, header),
        Api::Metadata => metadata::handle(shard, header, principal),
        Api::CreateTopic => topics::handle_create(shard, header),
        Api::DeleteTopic => topics::handle_delete(shard, header),
        Api::ElectLeaders => operations::handle_elect(shard, header),
        Api::ReassignPartition => operations::handle_reassign(shard, header),
        Api::JoinGroup
        | Api::Heartbeat
        | Api::ClaimPartitions
        | Api::ReleasePartitions
        | Api::CommitOffsets
        | Api::LeaveGroup
        | Api::DescribeGroup
        | Api::ListGroups => groups::handle(shard, known, header, principal),
        Api::Handshake | Api::Authenticate => Err(Failure::new(
            ErrorCode::InvalidRequest,
            "the handshake and its login were already done",
        )),
        Api::CreateAcls
        | Api::DeleteAcls
        | Api::DescribeAcls
        | Api::AlterUsers
        | Api::AlterQuotas
        | Api::DescribeQuotas
        | Api::ListUsers => security::handle(shard, known, header),
        // No `_` arm: a new api does not compile until it is served here
        // (or refused on purpose).
    };
    match result {
        Ok(dispatched) => dispatched,
        Err(failure)
            if may_refresh
                && failure.code == ErrorCode::UnknownTopic
                && shard.config.clustered()
                && matches!(
                    known,
                    Api::Produce | Api::Fetch | Api::ListOffsets | Api::Metadata
                ) =>
        {
            refresh_then_retry(shard, give_way, request, failure)
        }
        Err(failure) => fail(shard, api, failure),
    }
}

fn fail(shard: &Shard, api: u16, failure: Failure) -> Dispatched {
    crate::metrics::bump(&shard.metrics.counters.request_errors_total, 1);
    Dispatched::Ready(failure.response(api))
}

/// A header that failed flatbuffers verification.
pub fn invalid_header(api: Api, error: impl std::fmt::Display) -> Failure {
    // The verifier's words come with a trace over several lines: one
    // sentence of them is what §5 promises.
    let error = error.to_string();
    let first = error
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("malformed")
        .trim_end_matches('.');
    Failure::new(
        ErrorCode::InvalidRequest,
        format!("the {api:?} request's header is not a valid {api:?}Request flatbuffer: {first}"),
    )
}
