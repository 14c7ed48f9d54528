//! AlterQuotas (api 32) and DescribeQuotas (api 33): principals' quotas
//! set at run time.

use super::finish;
use crate::wire;
use flatbuffers::{FlatBufferBuilder, WIPOffset};

/// The principal name that stands for every principal without its own.
pub const DEFAULT_PRINCIPAL: &str = "default";

/// Longest principal a quota names.
const PRINCIPAL_BYTES_MAX: usize = 256;

/// One principal's quota (0: no bound).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuotaEntry {
    /// `User:NAME`, or [`DEFAULT_PRINCIPAL`].
    pub principal: String,
    /// Message-set bytes produced per second.
    pub produce_bytes_per_second: u64,
    /// Log bytes fetched per second.
    pub fetch_bytes_per_second: u64,
    /// Requests of any api per second.
    pub requests_per_second: u64,
    /// Connections open at once, per broker.
    pub connections: u32,
}

/// What DescribeQuotas answers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Described {
    /// Set at run time, in the cluster's registry.
    pub quotas: Vec<QuotaEntry>,
    /// The answering broker's configuration.
    pub configured: Vec<QuotaEntry>,
}

/// Why a quota's principal is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrincipalError {
    /// Neither `User:NAME` nor `default`.
    #[error("a quota names `User:NAME` or `{DEFAULT_PRINCIPAL}`, not {0:?}")]
    Kind(String),
    /// An empty, too long or unprintable name.
    #[error("{0:?}: a principal's name is 1 to {max} printable bytes without `/`", max = PRINCIPAL_BYTES_MAX - 5)]
    Name(String),
}

/// Checks a principal a quota names: `default`, or `User:NAME` with a
/// printable name.
pub fn check_principal(principal: &str) -> Result<(), PrincipalError> {
    if principal == DEFAULT_PRINCIPAL {
        return Ok(());
    }
    let Some(name) = principal.strip_prefix("User:") else {
        return Err(PrincipalError::Kind(principal.to_string()));
    };
    if name.is_empty()
        || principal.len() > PRINCIPAL_BYTES_MAX
        || name.chars().any(|c| c.is_control() || c == '/')
    {
        return Err(PrincipalError::Name(principal.to_string()));
    }
    Ok(())
}

fn encode_entries<'b>(
    fbb: &mut FlatBufferBuilder<'b>,
    entries: &[QuotaEntry],
) -> WIPOffset<flatbuffers::Vector<'b, flatbuffers::ForwardsUOffset<wire::QuotaEntry<'b>>>> {
    let encoded: Vec<_> = entries
        .iter()
        .map(|e| {
            let principal = fbb.create_string(&e.principal);
            wire::QuotaEntry::create(
                fbb,
                &wire::QuotaEntryArgs {
                    principal: Some(principal),
                    produce_bytes_per_second: e.produce_bytes_per_second,
                    fetch_bytes_per_second: e.fetch_bytes_per_second,
                    requests_per_second: e.requests_per_second,
                    connections: e.connections,
                },
            )
        })
        .collect();
    fbb.create_vector(&encoded)
}

/// The entries of a decoded list.
pub fn decode_entries(
    entries: Option<flatbuffers::Vector<'_, flatbuffers::ForwardsUOffset<wire::QuotaEntry<'_>>>>,
) -> Vec<QuotaEntry> {
    entries
        .map(|list| {
            list.iter()
                .map(|e| QuotaEntry {
                    principal: e.principal().unwrap_or_default().to_string(),
                    produce_bytes_per_second: e.produce_bytes_per_second(),
                    fetch_bytes_per_second: e.fetch_bytes_per_second(),
                    requests_per_second: e.requests_per_second(),
                    connections: e.connections(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// AlterQuotas request header.
pub fn alter_quotas_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    set: &[QuotaEntry],
    delete: &[&str],
) -> &'b [u8] {
    fbb.reset();
    let set = encode_entries(fbb, set);
    let names: Vec<_> = delete.iter().map(|n| fbb.create_string(n)).collect();
    let delete = fbb.create_vector(&names);
    let root = wire::AlterQuotasRequest::create(
        fbb,
        &wire::AlterQuotasRequestArgs {
            set: Some(set),
            delete: Some(delete),
        },
    );
    finish(fbb, root)
}

/// AlterQuotas response header.
pub fn alter_quotas_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    set: u32,
    deleted: u32,
) -> &'b [u8] {
    fbb.reset();
    let root =
        wire::AlterQuotasResponse::create(fbb, &wire::AlterQuotasResponseArgs { set, deleted });
    finish(fbb, root)
}

/// DescribeQuotas request header.
pub fn describe_quotas_request<'b>(fbb: &'b mut FlatBufferBuilder<'_>) -> &'b [u8] {
    fbb.reset();
    let root = wire::DescribeQuotasRequest::create(fbb, &wire::DescribeQuotasRequestArgs {});
    finish(fbb, root)
}

/// DescribeQuotas response header.
pub fn describe_quotas_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    described: &Described,
) -> &'b [u8] {
    fbb.reset();
    let quotas = encode_entries(fbb, &described.quotas);
    let configured = encode_entries(fbb, &described.configured);
    let root = wire::DescribeQuotasResponse::create(
        fbb,
        &wire::DescribeQuotasResponseArgs {
            quotas: Some(quotas),
            configured: Some(configured),
        },
    );
    finish(fbb, root)
}

/// A decoded DescribeQuotas answer.
pub fn decode_described(response: wire::DescribeQuotasResponse<'_>) -> Described {
    Described {
        quotas: decode_entries(response.quotas()),
        configured: decode_entries(response.configured()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_and_round_trips() {
        assert!(check_principal("User:alice").is_ok());
        assert!(check_principal("default").is_ok());
        assert!(check_principal("alice")
            .unwrap_err()
            .to_string()
            .contains("User:NAME"));
        assert!(check_principal("User:").is_err());
        assert!(check_principal("User:a/b").is_err());
        let entry = QuotaEntry {
            principal: "User:alice".into(),
            produce_bytes_per_second: 1_000_000,
            connections: 4,
            ..QuotaEntry::default()
        };
        let mut fbb = FlatBufferBuilder::new();
        let bytes =
            alter_quotas_request(&mut fbb, std::slice::from_ref(&entry), &["User:bob"]).to_vec();
        let request = flatbuffers::root::<wire::AlterQuotasRequest>(&bytes).unwrap();
        assert_eq!(decode_entries(request.set()), vec![entry.clone()]);
        assert_eq!(request.delete().unwrap().get(0), "User:bob");
        let described = Described {
            quotas: vec![entry.clone()],
            configured: vec![QuotaEntry {
                principal: "default".into(),
                requests_per_second: 50,
                ..QuotaEntry::default()
            }],
        };
        let bytes = describe_quotas_response(&mut fbb, &described).to_vec();
        let response = flatbuffers::root::<wire::DescribeQuotasResponse>(&bytes).unwrap();
        assert_eq!(decode_described(response), described);
    }
}
