//! Writes the fuzz targets' seed corpus (valid inputs the fuzzer mutates):
//! `cargo run -p ringlog-tests --example fuzz_seeds -- tests/fuzz/corpus`.
//! The corpus is checked in; rerun this after a schema or format change.
#![allow(
    clippy::too_many_lines,
    reason = "the seed corpus is written in one pass, a list"
)]

use protocol::codec::{self, groups, multi_fetch, FetchArgs, OffsetSpec, TopicSettings};
use protocol::flatbuffers::FlatBufferBuilder;
use protocol::frame::{write_frame, Api, API_VERSION};
use protocol::message::encode_message;
use std::path::Path;

fn main() {
    let root = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "tests/fuzz/corpus".into());
    let root = Path::new(&root);
    let mut fbb = FlatBufferBuilder::new();
    let mut set = Vec::new();
    encode_message(&mut set, None, b"hello");
    encode_message(&mut set, Some(b"user-1"), b"clicked");
    let headers: Vec<(Api, Vec<u8>, Vec<u8>)> = vec![
        (
            Api::Handshake,
            codec::handshake_request(&mut fbb, "seed").to_vec(),
            vec![],
        ),
        (
            Api::Metadata,
            codec::metadata_request(&mut fbb, &["a", "b"]).to_vec(),
            vec![],
        ),
        (
            Api::CreateTopic,
            codec::create_topic_request(&mut fbb, "a", 3, &TopicSettings::default()).to_vec(),
            vec![],
        ),
        (
            Api::DeleteTopic,
            codec::delete_topic_request(&mut fbb, "a").to_vec(),
            vec![],
        ),
        (
            Api::Produce,
            codec::produce_request(&mut fbb, "a", 1, codec::AckMode::Written).to_vec(),
            set.clone(),
        ),
        (
            Api::Fetch,
            codec::fetch_request(
                &mut fbb,
                "a",
                1,
                FetchArgs {
                    offset: 14,
                    max_bytes: 1 << 20,
                    max_wait_ms: 100,
                },
            )
            .to_vec(),
            vec![],
        ),
        (
            Api::ListOffsets,
            codec::list_offsets_request(&mut fbb, "a", 0, OffsetSpec::Latest, 0).to_vec(),
            vec![],
        ),
        (
            Api::JoinGroup,
            groups::join_group_request(&mut fbb, "g", "m", &["a"], 10_000).to_vec(),
            vec![],
        ),
        (
            Api::Heartbeat,
            groups::heartbeat_request(&mut fbb, "g", "m-1", 7, 3, 1_000).to_vec(),
            vec![],
        ),
        (
            Api::ClaimPartitions,
            groups::claim_partitions_request(&mut fbb, "g", "m-1", 7, 42, "a", &[0, 2]).to_vec(),
            vec![],
        ),
        (
            Api::ReleasePartitions,
            groups::release_partitions_request(&mut fbb, "g", "m-1", 7, "a", &[1]).to_vec(),
            vec![],
        ),
        (
            Api::CommitOffsets,
            groups::commit_offsets_request(
                &mut fbb,
                "g",
                "m-1",
                7,
                &[groups::OffsetCommit {
                    topic: "a".into(),
                    partition: 0,
                    offset: 28,
                    leader_epoch: 1,
                }],
            )
            .to_vec(),
            vec![],
        ),
        (
            Api::LeaveGroup,
            groups::leave_group_request(&mut fbb, "g", "m-1", 7).to_vec(),
            vec![],
        ),
        (
            Api::DescribeGroup,
            groups::describe_group_request(&mut fbb, "g").to_vec(),
            vec![],
        ),
        (
            Api::ListGroups,
            groups::list_groups_request(&mut fbb).to_vec(),
            vec![],
        ),
        (
            Api::ElectLeaders,
            protocol::codec::operations::elect_leaders_request(
                &mut fbb,
                &protocol::codec::operations::ElectLeaders {
                    topic: "a".into(),
                    partitions: vec![0, 2],
                    unclean: true,
                    dry_run: true,
                },
            )
            .to_vec(),
            vec![],
        ),
        (
            Api::ReassignPartition,
            protocol::codec::operations::reassign_request(&mut fbb, "a", 1, &[2, 3, 1]).to_vec(),
            vec![],
        ),
        (
            Api::CreatePartitions,
            protocol::codec::operations::create_partitions_request(&mut fbb, "a", 6).to_vec(),
            vec![],
        ),
        (
            Api::PromoteMirror,
            protocol::codec::operations::promote_mirror_request(&mut fbb, "a", &[40, 0]).to_vec(),
            vec![],
        ),
        (
            Api::MakeMirror,
            protocol::codec::failback::make_mirror_request(
                &mut fbb,
                "a",
                "b/a (cluster 1, topic id 2)",
                "3",
            )
            .to_vec(),
            vec![],
        ),
        (
            Api::AlterQuotas,
            protocol::codec::quotas::alter_quotas_request(
                &mut fbb,
                &[protocol::codec::quotas::QuotaEntry {
                    principal: "User:alice".into(),
                    produce_bytes_per_second: 1_000_000,
                    ..Default::default()
                }],
                &[],
            )
            .to_vec(),
            vec![],
        ),
        (
            Api::DescribeQuotas,
            protocol::codec::quotas::describe_quotas_request(&mut fbb).to_vec(),
            vec![],
        ),
        (
            Api::AlterTopicConfig,
            protocol::codec::topic_config::alter_topic_config_request(
                &mut fbb,
                "clicks",
                &[("retention.ms", "3600000"), ("retention.bytes", "-1")],
                &["flush.ms"],
            )
            .to_vec(),
            vec![],
        ),
        (
            Api::Orphaned,
            protocol::codec::orphans::orphaned_request(&mut fbb, true, 86_400_000).to_vec(),
            vec![],
        ),
        (
            Api::TruncateMirror,
            protocol::codec::failback::truncate_mirror_request(
                &mut fbb,
                &protocol::codec::failback::Cut {
                    topic: "a".into(),
                    partition: 0,
                    offset: 40,
                    mirror_source: "b/a (cluster 1, topic id 2)".into(),
                    expected_end: 80,
                },
            )
            .to_vec(),
            vec![],
        ),
        (
            Api::MultiFetch,
            multi_fetch::multi_fetch_request(
                &mut fbb,
                &[
                    multi_fetch::FetchPart::consumer("a", 0, 14, 1 << 20),
                    multi_fetch::FetchPart::consumer("b", 3, 0, 4096),
                ],
                &multi_fetch::MultiFetch {
                    max_bytes: 1 << 20,
                    max_wait_ms: 100,
                    replica_id: 2,
                    incarnation: "seed".into(),
                },
            )
            .to_vec(),
            vec![],
        ),
    ];
    // Security (issue 22): a SCRAM login (the Handshake's first message,
    // then Authenticate's proof, made for a real exchange so the fuzzer
    // starts from inputs that get far), rules and users.
    let (client, first) = protocol::scram::client_first("alice").unwrap_or_else(|e| panic!("{e}"));
    let stored = protocol::scram::Credential::derive(b"pw", b"seed-salt-16byte", 4096);
    let (_, server_first) = protocol::scram::server_first(&first, |_| Some(stored.clone()), b"k")
        .unwrap_or_else(|e| panic!("{e}"));
    let (_, proof) = client
        .finish(b"pw", &server_first)
        .unwrap_or_else(|e| panic!("{e}"));
    let rules: Vec<protocol::acl::AclRule> = [
        "allow User:alice read topic:a",
        "deny User:* write topic-prefix:b.",
        "allow User:ops alter cluster:cluster",
    ]
    .iter()
    .map(|r| protocol::acl::AclRule::parse(r).unwrap_or_else(|e| panic!("{e}")))
    .collect();
    let mut headers = headers;
    headers.extend([
        (
            Api::Handshake,
            codec::security::handshake_login_request(
                &mut fbb,
                "seed",
                protocol::scram::MECHANISM,
                &first,
            )
            .to_vec(),
            vec![],
        ),
        (
            Api::Authenticate,
            codec::security::authenticate_request(&mut fbb, &proof).to_vec(),
            vec![],
        ),
        (
            Api::CreateAcls,
            codec::security::create_acls_request(&mut fbb, &rules).to_vec(),
            vec![],
        ),
        (
            Api::DeleteAcls,
            codec::security::delete_acls_request(&mut fbb, &rules[..1]).to_vec(),
            vec![],
        ),
        (
            Api::DescribeAcls,
            codec::security::describe_acls_request(
                &mut fbb,
                &codec::security::AclFilter {
                    principal: Some("User:alice".into()),
                    resource: Some(protocol::acl::ResourceType::Topic),
                    name: None,
                },
            )
            .to_vec(),
            vec![],
        ),
        (
            Api::AlterUsers,
            codec::security::alter_users_request(
                &mut fbb,
                &[("alice".into(), stored.to_text())],
                &["bob".into()],
            )
            .to_vec(),
            vec![],
        ),
        (
            Api::ListUsers,
            codec::security::list_users_request(&mut fbb).to_vec(),
            vec![],
        ),
        (
            Api::InitProducerId,
            codec::producer_id::init_producer_id_request(&mut fbb, "a").to_vec(),
            vec![],
        ),
    ]);
    let frames = root.join("frame");
    std::fs::create_dir_all(&frames).unwrap_or_else(|e| panic!("{}: {e}", frames.display()));
    let mut all = Vec::new();
    let mut login = Vec::new();
    for (i, (api, header, payload)) in headers.iter().enumerate() {
        let mut frame = Vec::new();
        write_frame(&mut frame, *api as u16, API_VERSION, 1, header, payload);
        let name = match (api, header.len() > 40 && *api == Api::Handshake) {
            (Api::Handshake, true) => "HandshakeLogin".to_string(),
            _ => format!("{api:?}"),
        };
        if matches!(api, Api::Handshake | Api::Authenticate) && i > 0 {
            login.extend_from_slice(&frame);
        }
        write(&frames.join(name), &frame);
        all.extend_from_slice(&frame);
    }
    write(&frames.join("pipelined"), &all);
    // A whole SCRAM login: the Handshake, then Authenticate.
    write(&frames.join("login"), &login);
    // A MultiFetch answer: the header, then each part's chunk in order.
    let mut answer = multi_fetch::FetchedPart::empty("a", 0, 0);
    answer.length = set.len() as u32;
    let header = multi_fetch::multi_fetch_response(
        &mut fbb,
        &[answer, multi_fetch::FetchedPart::empty("b", 3, 0)],
    )
    .to_vec();
    let mut frame = Vec::new();
    write_frame(
        &mut frame,
        Api::MultiFetch as u16,
        API_VERSION,
        1,
        &header,
        &set,
    );
    write(&frames.join("MultiFetchAnswer"), &frame);

    let sets = root.join("message_set");
    std::fs::create_dir_all(&sets).unwrap_or_else(|e| panic!("{}: {e}", sets.display()));
    write(&sets.join("two"), &set);
    let mut many = Vec::new();
    for i in 0..20u32 {
        encode_message(
            &mut many,
            (i % 3 == 0).then_some(&b"k"[..]),
            &i.to_le_bytes(),
        );
    }
    write(&sets.join("twenty"), &many);
    write(&sets.join("torn"), &many[..many.len() - 3]);

    let recovery = root.join("recovery");
    std::fs::create_dir_all(&recovery).unwrap_or_else(|e| panic!("{}: {e}", recovery.display()));
    // Control byte (pieces, recovery point), then segment bytes.
    for (name, control) in [("one", 0u8), ("three", 2), ("with-point", 4 | (2 << 3))] {
        let mut input = vec![control];
        input.extend_from_slice(&many);
        write(&recovery.join(name), &input);
    }
    let mut torn = vec![1u8];
    torn.extend_from_slice(&many[..many.len() - 5]);
    write(&recovery.join("torn"), &torn);
    batch_read_seeds(root);
}

/// Format 2's read path: a codec byte, then a stored batch of that codec
/// (and one of its blocks alone).
fn batch_read_seeds(root: &Path) {
    use protocol::batch::compression::compress;
    use protocol::batch::produce::{stamp, Stamp};
    use protocol::batch::write::{BatchWriter, Producer};
    use protocol::batch::Compression;
    let dir = root.join("batch_read");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut writer = BatchWriter::new();
    for n in 0..40i64 {
        let value = format!("{{\"n\":{n},\"msg\":\"served from cache\"}}");
        writer.push(
            1_700_000_000_000 + n,
            Some(b"k"),
            Some(value.as_bytes()),
            &[("h", Some(b"v"))],
        );
    }
    for codec in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let mut batch = writer
            .finish_compressed(Producer::NONE, codec)
            .unwrap_or_else(|e| panic!("{codec:?}: {e}"));
        stamp(
            &mut batch,
            Stamp {
                position: 0,
                leader_epoch: 0,
                log_append_time: None,
            },
        );
        let name = format!("{codec:?}").to_lowercase();
        let mut input = vec![codec as u8];
        input.extend_from_slice(&batch);
        write(&dir.join(format!("batch-{name}")), &input);
        let mut block = vec![codec as u8];
        compress(codec, writer.records(), &mut block).unwrap_or_else(|e| panic!("{codec:?}: {e}"));
        write(&dir.join(format!("block-{name}")), &block);
    }
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}
