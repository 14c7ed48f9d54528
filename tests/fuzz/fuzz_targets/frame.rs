//! Frames as the broker's reader and the client's reader see them: parse
//! the prefix, split header and payload, verify and read every field of the
//! api's request (broker side) and response (client side), and check a
//! Produce payload like the handler does. Nothing may panic, and a header
//! that verifies must be readable in full.
#![no_main]

use libfuzzer_sys::fuzz_target;
use protocol::codec::{self, verify};
use protocol::frame::{FramePrefix, FRAME_PREFIX_BYTES};
use protocol::wire;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    // A SCRAM login across frames: a Handshake's first message opens an
    // exchange that a later Authenticate finishes, as on a connection.
    // Derived once: PBKDF2 per input would be most of the fuzzer's time.
    static STORED: std::sync::OnceLock<protocol::scram::Credential> = std::sync::OnceLock::new();
    let stored = STORED
        .get_or_init(|| protocol::scram::Credential::derive(b"pw", b"seed-salt-16byte", 4096));
    let mut login: Option<protocol::scram::ServerFirst> = None;
    while rest.len() >= FRAME_PREFIX_BYTES {
        let mut prefix = [0u8; FRAME_PREFIX_BYTES];
        prefix.copy_from_slice(&rest[..FRAME_PREFIX_BYTES]);
        let Ok(prefix) = FramePrefix::parse(&prefix, 16 << 20) else {
            return;
        };
        if rest.len() < prefix.frame_bytes {
            return;
        }
        let header_start = FRAME_PREFIX_BYTES;
        let payload_start = header_start + prefix.header_len;
        assert!(payload_start <= prefix.frame_bytes, "header past the frame");
        let header = &rest[header_start..payload_start];
        let payload = &rest[payload_start..prefix.frame_bytes];
        request(prefix.api, header, payload);
        response(prefix.api, header, payload);
        scram(prefix.api, header, stored, &mut login);
        rest = &rest[prefix.frame_bytes..];
    }
});

/// What the broker reads of each request.
fn request(api: u16, header: &[u8], payload: &[u8]) {
    match api {
        0 => {
            if let Ok(r) = verify::<wire::HandshakeRequest>(header) {
                let _ = (r.protocol_version(), r.client_name(), r.sasl_mechanism());
                let _ = r.sasl_bytes().map(|b| b.bytes().len());
            }
        }
        1 => {
            if let Ok(r) = verify::<wire::MetadataRequest>(header) {
                let names: Vec<&str> = r.topics().map(|t| t.iter().collect()).unwrap_or_default();
                let _ = names.len();
            }
        }
        2 => {
            if let Ok(r) = verify::<wire::CreateTopicRequest>(header) {
                let _ = (
                    r.name(),
                    r.partitions(),
                    codec::TopicSettings::decode(r.config()),
                );
            }
        }
        3 => {
            if let Ok(r) = verify::<wire::DeleteTopicRequest>(header) {
                let _ = r.name();
            }
        }
        4 => {
            if let Ok(r) = verify::<wire::ProduceRequest>(header) {
                let _ = (
                    r.topic(),
                    r.partition(),
                    r.acks(),
                    r.topic_id(),
                    r.leader_epoch(),
                );
                if let Ok(summary) = protocol::message::validate_message_set(payload) {
                    assert!(summary.count > 0 || payload.is_empty());
                }
            }
        }
        5 => {
            if let Ok(r) = verify::<wire::FetchRequest>(header) {
                let _ = (
                    r.topic(),
                    r.partition(),
                    r.offset(),
                    r.max_bytes(),
                    r.max_wait_ms(),
                );
                // The replica fields a follower's fetch carries.
                let _ = (
                    r.topic_id(),
                    r.leader_epoch(),
                    r.replica_id(),
                    r.replica_incarnation(),
                    r.last_fetched_epoch(),
                    r.replica_flushed_offset(),
                );
            }
        }
        6 => {
            if let Ok(r) = verify::<wire::ListOffsetsRequest>(header) {
                let _ = (r.topic(), r.partition(), r.spec(), r.timestamp_ms());
            }
        }
        15 => {
            if let Ok(r) = verify::<wire::ElectLeadersRequest>(header) {
                let partitions: Vec<u32> = r
                    .partitions()
                    .map(|p| p.iter().collect())
                    .unwrap_or_default();
                let _ = (r.topic(), partitions, r.unclean(), r.dry_run());
            }
        }
        16 => {
            if let Ok(r) = verify::<wire::ReassignPartitionRequest>(header) {
                let replicas: Vec<u32> =
                    r.replicas().map(|p| p.iter().collect()).unwrap_or_default();
                let _ = (r.topic(), r.partition(), replicas);
            }
        }
        17 => {
            if let Ok(r) = verify::<wire::MultiFetchRequest>(header) {
                let _ = (
                    r.max_bytes(),
                    r.max_wait_ms(),
                    r.replica_id(),
                    r.replica_incarnation(),
                );
                for p in r.partitions().iter().flatten() {
                    let _ = (
                        p.topic(),
                        p.topic_id(),
                        p.partition(),
                        p.offset(),
                        p.max_bytes(),
                        p.leader_epoch(),
                        p.last_fetched_epoch(),
                        p.replica_flushed_offset(),
                    );
                }
            }
        }
        20..=25 => security_request(api, header),
        _ => group_request(api, header),
    }
}

/// What the broker reads of the security apis.
fn security_request(api: u16, header: &[u8]) {
    use protocol::codec::security;
    match api {
        20 => {
            let _ = verify::<wire::AuthenticateRequest>(header)
                .map(|r| r.sasl_bytes().map(|b| b.bytes().len()));
        }
        21 => {
            if let Ok(r) = verify::<wire::CreateAclsRequest>(header) {
                if let Ok(rules) = security::decode_rules(r.rules()) {
                    // A rule that decodes is one the text form carries.
                    for rule in rules {
                        let again = protocol::acl::AclRule::parse(&rule.to_string());
                        assert_eq!(again.as_ref().ok(), Some(&rule), "{rule}");
                    }
                }
            }
        }
        22 => {
            let _ = verify::<wire::DeleteAclsRequest>(header)
                .map(|r| security::decode_rules(r.rules()));
        }
        23 => {
            let _ = verify::<wire::DescribeAclsRequest>(header).map(security::decode_acl_filter);
        }
        24 => {
            if let Ok(r) = verify::<wire::AlterUsersRequest>(header) {
                for user in r.upserts().iter().flatten() {
                    let _ = protocol::scram::check_user(user.name().unwrap_or_default());
                    let _ = protocol::scram::Credential::from_text(
                        user.credential().unwrap_or_default(),
                    );
                }
                let _ = r.deletions().map(|d| d.iter().count());
            }
        }
        _ => {
            let _ = verify::<wire::ListUsersRequest>(header);
        }
    }
}

/// The broker's side of a SCRAM login, fed the frames' bytes.
fn scram(
    api: u16,
    header: &[u8],
    stored: &protocol::scram::Credential,
    login: &mut Option<protocol::scram::ServerFirst>,
) {
    match api {
        0 => {
            let Ok(r) = verify::<wire::HandshakeRequest>(header) else {
                return;
            };
            let first = r.sasl_bytes().map(|b| b.bytes()).unwrap_or_default();
            *login = protocol::scram::server_first(first, |_| Some(stored.clone()), b"secret")
                .ok()
                .map(|(exchange, _)| exchange);
        }
        20 => {
            let (Some(exchange), Ok(r)) =
                (login.take(), verify::<wire::AuthenticateRequest>(header))
            else {
                return;
            };
            let last = r.sasl_bytes().map(|b| b.bytes()).unwrap_or_default();
            let _ = exchange.finish(last);
        }
        _ => {}
    }
}

fn group_request(api: u16, header: &[u8]) {
    match api {
        7 => {
            if let Ok(r) = verify::<wire::JoinGroupRequest>(header) {
                let topics: Vec<&str> = r.topics().map(|t| t.iter().collect()).unwrap_or_default();
                let _ = (r.group(), r.session_timeout_ms(), topics);
            }
        }
        8 => {
            if let Ok(r) = verify::<wire::HeartbeatRequest>(header) {
                let _ = (
                    r.group(),
                    r.member_id(),
                    r.session_id(),
                    r.generation(),
                    r.max_wait_ms(),
                );
            }
        }
        9 => {
            if let Ok(r) = verify::<wire::ClaimPartitionsRequest>(header) {
                let partitions: Vec<u32> = r
                    .partitions()
                    .map(|p| p.iter().collect())
                    .unwrap_or_default();
                let _ = (
                    r.group(),
                    r.member_id(),
                    r.session_id(),
                    r.revision(),
                    r.topic(),
                    partitions,
                );
            }
        }
        10 => {
            if let Ok(r) = verify::<wire::ReleasePartitionsRequest>(header) {
                let partitions: Vec<u32> = r
                    .partitions()
                    .map(|p| p.iter().collect())
                    .unwrap_or_default();
                let _ = (r.group(), r.member_id(), r.topic(), partitions);
            }
        }
        11 => {
            if let Ok(r) = verify::<wire::CommitOffsetsRequest>(header) {
                let offsets: Vec<(Option<&str>, u32, u64)> = r
                    .offsets()
                    .map(|o| {
                        o.iter()
                            .map(|c| (c.topic(), c.partition(), c.offset()))
                            .collect()
                    })
                    .unwrap_or_default();
                let _ = (r.group(), r.member_id(), offsets);
            }
        }
        12 => {
            if let Ok(r) = verify::<wire::LeaveGroupRequest>(header) {
                let _ = (r.group(), r.member_id());
            }
        }
        13 => {
            if let Ok(r) = verify::<wire::DescribeGroupRequest>(header) {
                let _ = r.group();
            }
        }
        _ => {
            let _ = verify::<wire::ListGroupsRequest>(header);
        }
    }
}

/// What the Rust client reads of each response (and of an error frame).
fn response(api: u16, header: &[u8], payload: &[u8]) {
    if let Ok(e) = verify::<wire::ErrorResponse>(header) {
        let _ = (
            e.message(),
            e.start_offset(),
            e.end_offset(),
            e.owner_broker_id(),
        );
    }
    match api {
        0 => {
            if let Ok(r) = verify::<wire::HandshakeResponse>(header) {
                let _ = (
                    r.broker_id(),
                    r.shard_count(),
                    r.broker_version(),
                    r.principal(),
                );
                // The client's side of a login reads the broker's answer.
                if let (Ok((client, _)), Some(bytes)) =
                    (protocol::scram::client_first("alice"), r.sasl_bytes())
                {
                    if let Ok((client, _)) = client.finish(b"pw", bytes.bytes()) {
                        let _ = client.verify(bytes.bytes());
                    }
                }
            }
        }
        20 => {
            let _ = verify::<wire::AuthenticateResponse>(header).map(|r| {
                (
                    r.principal(),
                    r.sasl_bytes(),
                    r.broker_id(),
                    r.shard_count(),
                    r.broker_version(),
                )
            });
        }
        23 => {
            let _ = protocol::codec::security::decode_describe_acls(header);
        }
        25 => {
            let _ = verify::<wire::ListUsersResponse>(header).map(|r| r.users().map(|u| u.len()));
        }
        1 => {
            if let Ok(r) = verify::<wire::MetadataResponse>(header) {
                let metadata = codec::decode_metadata(r);
                for topic in &metadata.topics {
                    for p in 0..topic.partitions.len() as u32 {
                        let _ = metadata.owner_address(&topic.name, p);
                    }
                }
            }
        }
        5 => {
            if let Ok(r) = verify::<wire::FetchResponse>(header) {
                let _ = (
                    r.offset(),
                    r.length(),
                    r.start_offset(),
                    r.flushed_offset(),
                    r.leader_epoch(),
                    r.chunk_epoch(),
                    r.segment_base(),
                    r.diverging_epoch(),
                    r.diverging_end_offset(),
                );
            }
        }
        8 => {
            let _ = codec::groups::decode_heartbeat(header);
        }
        15 => {
            let _ = codec::operations::decode_elect_leaders(header);
        }
        16 => {
            let _ = codec::operations::decode_reassign(header);
        }
        7 => {
            let _ = codec::groups::decode_joined(header);
        }
        17 => {
            // The chunks' places must lie inside the payload, in order.
            if let Ok(parts) =
                codec::multi_fetch::decode_multi_fetch_response(header, payload.len())
            {
                let mut at = 0;
                for (_, range) in parts {
                    assert_eq!(range.start, at, "chunks in order, no gap");
                    assert!(range.end <= payload.len(), "a chunk past the payload");
                    at = range.end;
                }
                assert_eq!(at, payload.len(), "the chunks are the payload");
            }
        }
        _ => {}
    }
}
