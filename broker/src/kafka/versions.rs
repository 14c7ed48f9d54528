//! The APIs this listener speaks and their versions, as ApiVersions tells a
//! client. A client uses, per API, the highest version both sides know;
//! every range here stops before the API's first *flexible* version
//! (compact strings, tagged fields), which `wire.rs` does not read, and
//! starts where Kafka 4.0 starts (KIP-896), or at the first version with
//! record batch v2 (Produce 3, Fetch 4).

use super::errors::code;
use super::wire::Writer;

/// Kafka's API keys that this listener serves.
#[allow(missing_docs)]
pub mod key {
    pub const PRODUCE: i16 = 0;
    pub const FETCH: i16 = 1;
    pub const LIST_OFFSETS: i16 = 2;
    pub const METADATA: i16 = 3;
    pub const OFFSET_COMMIT: i16 = 8;
    pub const OFFSET_FETCH: i16 = 9;
    pub const FIND_COORDINATOR: i16 = 10;
    pub const JOIN_GROUP: i16 = 11;
    pub const HEARTBEAT: i16 = 12;
    pub const LEAVE_GROUP: i16 = 13;
    pub const SYNC_GROUP: i16 = 14;
    pub const DESCRIBE_GROUPS: i16 = 15;
    pub const LIST_GROUPS: i16 = 16;
    pub const SASL_HANDSHAKE: i16 = 17;
    pub const API_VERSIONS: i16 = 18;
    pub const CREATE_TOPICS: i16 = 19;
    pub const DELETE_TOPICS: i16 = 20;
    pub const INIT_PRODUCER_ID: i16 = 22;
    pub const OFFSET_FOR_LEADER_EPOCH: i16 = 23;
    pub const DESCRIBE_CONFIGS: i16 = 32;
    pub const SASL_AUTHENTICATE: i16 = 36;
    pub const CREATE_PARTITIONS: i16 = 37;
}

/// `(api key, lowest version, highest version)`, by key.
pub const SUPPORTED: &[(i16, i16, i16)] = &[
    // v7 allows zstd batches; v9 is flexible.
    (key::PRODUCE, 3, 8),
    // v10 allows zstd batches; v11 adds the rack (read, ignored); v12 is
    // flexible.
    (key::FETCH, 4, 11),
    // v4 adds the leader epoch; v6 is flexible.
    (key::LIST_OFFSETS, 1, 5),
    // v7 adds the leader epoch; v9 is flexible; v10 adds topic ids; v12
    // lets a request name a topic by id alone. (v13, Kafka 4.0's, adds a
    // top-level error code.)
    (key::METADATA, 1, 12),
    // Kafka 4.0 starts at v2; v6 adds the leader epoch; v8 is flexible.
    (key::OFFSET_COMMIT, 2, 7),
    // Kafka 4.0 starts at v1; v5 adds the leader epoch; v6 is flexible.
    (key::OFFSET_FETCH, 1, 5),
    // v3 is flexible.
    (key::FIND_COORDINATOR, 0, 2),
    // Kafka 4.0 starts at v2; v4 asks a new member to join again with the
    // id it is given; v6 is flexible.
    (key::JOIN_GROUP, 2, 5),
    // v4 is flexible.
    (key::HEARTBEAT, 0, 3),
    // v3 leaves several members at once; v4 is flexible.
    (key::LEAVE_GROUP, 0, 3),
    // v4 is flexible.
    (key::SYNC_GROUP, 0, 3),
    // v5 is flexible.
    (key::DESCRIBE_GROUPS, 0, 4),
    // v3 is flexible.
    (key::LIST_GROUPS, 0, 2),
    // v3 is flexible, v4 its same layout (only a feature rule changed):
    // both answered, so librdkafka (v3) and the Java client (v4) need no
    // second try. A newer version is told this list in v0's layout.
    (key::API_VERSIONS, 0, 4),
    // Kafka 4.0 starts at v2; v5 is flexible.
    (key::CREATE_TOPICS, 2, 4),
    // Kafka 4.0 starts at v1; v4 is flexible.
    (key::DELETE_TOPICS, 1, 3),
    // v2 is flexible.
    (key::INIT_PRODUCER_ID, 0, 1),
    // Kafka 4.0 starts at v2; v4 is flexible.
    (key::OFFSET_FOR_LEADER_EPOCH, 2, 3),
    // Kafka 4.0 starts at v1; v4 is flexible.
    (key::DESCRIBE_CONFIGS, 1, 3),
    // v1: the exchange in SaslAuthenticate requests. v0 (the exchange
    // sent raw, unframed) is listed because librdkafka takes a broker
    // without it for one that has no SASL at all; every client that knows
    // SaslAuthenticate asks for v1, and raw bytes would close the
    // connection as a malformed frame.
    (key::SASL_HANDSHAKE, 0, 1),
    // v1 adds the session lifetime; v2 is flexible.
    (key::SASL_AUTHENTICATE, 0, 1),
    // v2 is flexible.
    (key::CREATE_PARTITIONS, 0, 1),
];

/// True when `version` of `api` is served.
pub fn supported(api: i16, version: i16) -> bool {
    SUPPORTED
        .iter()
        .any(|&(k, lo, hi)| k == api && (lo..=hi).contains(&version))
}

/// Each API's first flexible version (KIP-482), by key: from it on, the
/// request header carries tagged fields, the answer's header does too
/// (ApiVersions' excepted), and the bodies use compact strings and arrays.
const FIRST_FLEXIBLE: &[(i16, i16)] = &[
    (key::PRODUCE, 9),
    (key::FETCH, 12),
    (key::LIST_OFFSETS, 6),
    (key::METADATA, 9),
    (key::OFFSET_COMMIT, 8),
    (key::OFFSET_FETCH, 6),
    (key::FIND_COORDINATOR, 3),
    (key::JOIN_GROUP, 6),
    (key::HEARTBEAT, 4),
    (key::LEAVE_GROUP, 4),
    (key::SYNC_GROUP, 4),
    (key::DESCRIBE_GROUPS, 5),
    (key::LIST_GROUPS, 3),
    (key::API_VERSIONS, 3),
    (key::CREATE_TOPICS, 5),
    (key::DELETE_TOPICS, 4),
    (key::INIT_PRODUCER_ID, 2),
    (key::OFFSET_FOR_LEADER_EPOCH, 4),
    (key::DESCRIBE_CONFIGS, 4),
    (key::SASL_AUTHENTICATE, 2),
    (key::CREATE_PARTITIONS, 2),
];

/// True when `version` of `api` is a flexible one.
pub fn flexible(api: i16, version: i16) -> bool {
    FIRST_FLEXIBLE
        .iter()
        .any(|&(k, first)| k == api && version >= first)
}

/// The ApiVersions answer for a request of `version`: the list, or
/// UNSUPPORTED_VERSION and the list in v0's layout (what every client
/// expects when it asked for more than the broker knows). Its header is
/// v0 whatever the version (Kafka's rule for this one API), so only the
/// body of v3+ is flexible.
pub fn answer(version: i16) -> Vec<u8> {
    let known = supported(key::API_VERSIONS, version);
    if known && version >= 3 {
        return flexible_answer();
    }
    let mut w = Writer::default();
    w.i16(if known {
        code::NONE
    } else {
        code::UNSUPPORTED_VERSION
    });
    w.array(SUPPORTED.len());
    for &(api, lo, hi) in SUPPORTED {
        w.i16(api);
        w.i16(lo);
        w.i16(hi);
    }
    if known && version >= 1 {
        w.i32(0); // throttle_time_ms
    }
    w.out
}

/// ApiVersions v3–4's body: compact array, tagged fields (none: the
/// optional feature lists are for KRaft's own nodes).
fn flexible_answer() -> Vec<u8> {
    let mut w = Writer::default();
    w.i16(code::NONE);
    w.compact_array(SUPPORTED.len());
    for &(api, lo, hi) in SUPPORTED {
        w.i16(api);
        w.i16(lo);
        w.i16(hi);
        w.no_tagged_fields();
    }
    w.i32(0); // throttle_time_ms
    w.no_tagged_fields();
    w.out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::wire::Reader;

    #[test]
    fn a_client_asking_for_a_newer_api_versions_is_told_the_list_in_the_oldest_layout() {
        // Past v4 (librdkafka asks with v3, the Java client with v4).
        for asked in [5, 9] {
            let body = answer(asked);
            let mut r = Reader::new(&body);
            assert_eq!(r.i16("error").unwrap(), code::UNSUPPORTED_VERSION);
            assert_eq!(r.array(6, "keys").unwrap(), Some(SUPPORTED.len()));
            let mut listed = Vec::new();
            for _ in 0..SUPPORTED.len() {
                listed.push((
                    r.i16("key").unwrap(),
                    r.i16("min").unwrap(),
                    r.i16("max").unwrap(),
                ));
            }
            assert_eq!(listed, SUPPORTED);
            assert_eq!(r.remaining(), 0, "v0 has no throttle time");
        }
        let body = answer(2);
        assert_eq!(&body[..2], &[0, 0]);
        assert_eq!(&answer(3), &answer(4), "v4 has v3's layout");
        let v3 = answer(3);
        assert_eq!(&v3[..2], &[0, 0]);
        assert_eq!(usize::from(v3[2]), SUPPORTED.len() + 1);
        let key = &v3[3..10];
        let (api, lo, hi) = SUPPORTED[0];
        let mut want = Vec::new();
        for v in [api, lo, hi] {
            want.extend_from_slice(&v.to_be_bytes());
        }
        want.push(0);
        assert_eq!(key, &want[..], "each key ends with its tagged fields");
        assert_eq!(v3.len(), 3 + SUPPORTED.len() * 7 + 4 + 1);
        assert_eq!(body.len(), 2 + 4 + SUPPORTED.len() * 6 + 4);
        assert!(supported(key::PRODUCE, 8));
        assert!(
            !supported(key::PRODUCE, 9),
            "flexible versions are not read"
        );
        assert!(
            !supported(key::FETCH, 3),
            "no record batch v2 before Fetch v4"
        );
        assert!(!supported(99, 0));
        // Every served API has its first flexible version listed (SASL's
        // handshake has none), and only ApiVersions and Metadata are served
        // at one.
        for &(api, _, hi) in SUPPORTED {
            let listed = FIRST_FLEXIBLE.iter().any(|&(k, _)| k == api);
            assert_eq!(listed, api != key::SASL_HANDSHAKE, "api {api}");
            let served_flexible = flexible(api, hi);
            assert_eq!(
                served_flexible,
                api == key::API_VERSIONS || api == key::METADATA,
                "api {api}"
            );
        }
    }
}
