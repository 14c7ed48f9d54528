//! Every decoder that sees bytes from the network or the disk is fed random
//! and mutated inputs; none may panic. A deterministic stand-in for the
//! fuzz targets, cheap enough to run on every test run.
#![allow(clippy::unwrap_used)]
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario read top to bottom"
)]

use protocol::codec::groups::{self as group_codec, OffsetCommit};
use protocol::codec::security;
use protocol::codec::{self, verify, AckMode, FetchArgs, OffsetSpec, TopicSettings};
use protocol::frame::{FramePrefix, FRAME_BYTES_MAX, FRAME_PREFIX_BYTES};
use protocol::message::{encode_message, validate_message_set, MessageSetIter};
use protocol::scram::{self, Credential};
use protocol::wire;

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

fn decode_everything(bytes: &[u8]) {
    if let Some(prefix) = bytes.get(..FRAME_PREFIX_BYTES) {
        let prefix: [u8; FRAME_PREFIX_BYTES] = prefix.try_into().unwrap();
        let _ = FramePrefix::parse(&prefix, FRAME_BYTES_MAX);
    }
    let _ = validate_message_set(bytes);
    let mut iter = MessageSetIter::new(bytes, 0);
    for _ in iter.by_ref() {}
    let _ = iter.incomplete();
    let _ = verify::<wire::HandshakeRequest>(bytes).map(|r| r.client_name());
    let _ = verify::<wire::MetadataRequest>(bytes).map(|r| r.topics().map(|t| t.iter().count()));
    let _ = verify::<wire::CreateTopicRequest>(bytes)
        .map(|r| (r.name(), TopicSettings::decode(r.config())));
    let _ = verify::<wire::DeleteTopicRequest>(bytes).map(|r| r.name());
    let _ = verify::<wire::ProduceRequest>(bytes).map(|r| (r.topic(), r.acks()));
    let _ = verify::<wire::FetchRequest>(bytes).map(|r| (r.topic(), r.offset()));
    let _ = verify::<wire::ListOffsetsRequest>(bytes).map(|r| (r.topic(), r.spec()));
    let _ = verify::<wire::MetadataResponse>(bytes).map(codec::decode_metadata);
    let _ = verify::<wire::ErrorResponse>(bytes).map(|r| (r.message(), r.owner_broker_id()));
    // Consumer groups: the broker's reads of each request, the client's of
    // each response.
    let _ = verify::<wire::JoinGroupRequest>(bytes).map(|r| {
        (
            r.group(),
            r.member_name(),
            r.topics().map(|t| t.iter().count()),
        )
    });
    let _ = verify::<wire::HeartbeatRequest>(bytes).map(|r| (r.group(), r.member_id()));
    let _ = verify::<wire::ClaimPartitionsRequest>(bytes)
        .map(|r| (r.topic(), r.partitions().map(|p| p.iter().max())));
    let _ = verify::<wire::ReleasePartitionsRequest>(bytes)
        .map(|r| (r.topic(), r.partitions().map(|p| p.iter().count())));
    let _ = verify::<wire::CommitOffsetsRequest>(bytes).map(|r| {
        r.offsets().map(|os| {
            os.iter()
                .filter(|o| o.topic().is_some() && o.offset() > 0)
                .count()
        })
    });
    let _ = verify::<wire::LeaveGroupRequest>(bytes).map(|r| r.member_id());
    let _ = verify::<wire::DescribeGroupRequest>(bytes).map(|r| r.group());
    let _ = verify::<wire::ListGroupsRequest>(bytes);
    let _ = group_codec::decode_joined(bytes);
    let _ = group_codec::decode_heartbeat(bytes);
    let _ = group_codec::decode_description(bytes);
    let _ = group_codec::decode_groups(bytes);
    // Security (issue 22): logins, rules, users, and SCRAM's messages.
    let _ = verify::<wire::HandshakeRequest>(bytes)
        .map(|r| (r.sasl_mechanism(), r.sasl_bytes().map(|b| b.bytes().len())));
    let _ = verify::<wire::AuthenticateRequest>(bytes).map(|r| r.sasl_bytes().map(|b| b.len()));
    let _ = verify::<wire::CreateAclsRequest>(bytes).map(|r| security::decode_rules(r.rules()));
    let _ = verify::<wire::DescribeAclsRequest>(bytes).map(security::decode_acl_filter);
    let _ = security::decode_describe_acls(bytes);
    let _ = verify::<wire::AlterUsersRequest>(bytes).map(|r| {
        r.upserts()
            .iter()
            .flatten()
            .filter(|u| Credential::from_text(u.credential().unwrap_or_default()).is_ok())
            .count()
    });
    // Derived once: PBKDF2 per input would be most of the test's time.
    static STORED: std::sync::OnceLock<Credential> = std::sync::OnceLock::new();
    let stored = STORED.get_or_init(|| Credential::derive(b"pw", b"salt-of-16-bytes", 4096));
    if let Ok((exchange, _)) = scram::server_first(bytes, |_| Some(stored.clone()), b"k") {
        let _ = exchange.finish(bytes);
    }
    if let Ok((client, _)) = scram::client_first("alice") {
        let _ = client.finish(b"pw", bytes);
    }
    let _ = Credential::from_text(&String::from_utf8_lossy(bytes));
    let _ = protocol::acl::AclRule::parse(&String::from_utf8_lossy(bytes));
}

#[test]
fn random_bytes_never_panic_a_decoder() {
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    for round in 0..20_000 {
        let len = (rng.next() % 256) as usize + round % 3;
        decode_everything(&rng.bytes(len));
    }
}

#[test]
fn mutated_valid_inputs_never_panic_a_decoder() {
    let mut fbb = protocol::flatbuffers::FlatBufferBuilder::new();
    let mut seeds: Vec<Vec<u8>> = vec![
        codec::handshake_request(&mut fbb, "client").to_vec(),
        codec::metadata_request(&mut fbb, &["a", "b"]).to_vec(),
        codec::create_topic_request(&mut fbb, "t", 3, &TopicSettings::default()).to_vec(),
        codec::produce_request(&mut fbb, "t", 1, AckMode::Flushed).to_vec(),
        codec::fetch_request(
            &mut fbb,
            "t",
            0,
            FetchArgs {
                offset: 10,
                max_bytes: 100,
                max_wait_ms: 5,
            },
        )
        .to_vec(),
        codec::list_offsets_request(&mut fbb, "t", 0, OffsetSpec::BeforeTime, 5).to_vec(),
        group_codec::join_group_request(&mut fbb, "g", "host", &["t", "u"], 6000).to_vec(),
        group_codec::heartbeat_request(&mut fbb, "g", "host-1", 7, 99, 500).to_vec(),
        group_codec::claim_partitions_request(&mut fbb, "g", "host-1", 7, 12, "t", &[0, 3])
            .to_vec(),
        group_codec::release_partitions_request(&mut fbb, "g", "host-1", 7, "t", &[1]).to_vec(),
        group_codec::commit_offsets_request(
            &mut fbb,
            "g",
            "host-1",
            7,
            &[OffsetCommit {
                topic: "t".into(),
                partition: 2,
                offset: 418,
                leader_epoch: 2,
            }],
        )
        .to_vec(),
        group_codec::leave_group_request(&mut fbb, "g", "host-1", 7).to_vec(),
        group_codec::describe_group_request(&mut fbb, "g").to_vec(),
        group_codec::list_groups_response(&mut fbb, &["g1".to_string(), "g2".to_string()]).to_vec(),
        security::handshake_login_request(&mut fbb, "c", scram::MECHANISM, b"n,,n=alice,r=abc")
            .to_vec(),
        security::authenticate_request(&mut fbb, b"c=biws,r=abcdef,p=AAAA").to_vec(),
        security::create_acls_request(
            &mut fbb,
            &[protocol::acl::AclRule::parse("deny User:* write topic-prefix:a.").unwrap()],
        )
        .to_vec(),
        security::alter_users_request(
            &mut fbb,
            &[(
                "alice".into(),
                Credential::derive(b"pw", b"0123456789abcdef", 4096).to_text(),
            )],
            &["bob".into()],
        )
        .to_vec(),
        b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL".to_vec(),
        b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096".to_vec(),
    ];
    let mut set = Vec::new();
    encode_message(&mut set, None, b"one");
    encode_message(&mut set, Some(b"key"), b"two");
    seeds.push(set);
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for seed in &seeds {
        for _ in 0..5_000 {
            let mut bytes = seed.clone();
            for _ in 0..(rng.next() % 4 + 1) {
                let i = (rng.next() as usize) % bytes.len();
                bytes[i] ^= 1 << (rng.next() % 8);
            }
            if rng.next().is_multiple_of(4) {
                bytes.truncate((rng.next() as usize) % bytes.len());
            }
            decode_everything(&bytes);
        }
    }
}
