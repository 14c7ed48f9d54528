//! CreateAcls, DeleteAcls, AlterUsers and AlterQuotas (through the control
//! thread, which owns the registry and publishes the result to every shard
//! before answering), DescribeAcls, ListUsers and DescribeQuotas (from this
//! broker's copy).
//! Who may send them is [`crate::auth::authorize`]'s business.

use super::{invalid_header, Dispatched, Failure, Payload, Response};
use crate::mailbox::ControlMsg;
use crate::shard::Shard;
use coordinator::security::{Changed, QuotaRecord, SecurityChange};
use protocol::codec::security as codec;
use protocol::codec::verify;
use protocol::frame::Api;
use protocol::scram::{self, Credential};
use protocol::{wire, ErrorCode};
use std::rc::Rc;

/// Users one AlterUsers may change.
const USERS_PER_REQUEST_MAX: usize = 1000;

/// Handles one of the five.
#[expect(clippy::too_many_lines, reason = "one match over the security apis")]
pub fn handle(shard: &Rc<Shard>, api: Api, header: &[u8]) -> Result<Dispatched, Failure> {
    let bad = |e| invalid_header(api, e);
    let invalid =
        |message: String| Failure::new(ErrorCode::InvalidRequest, format!("{api:?}: {message}"));
    let change = match api {
        Api::DescribeAcls => {
            let request = verify::<wire::DescribeAclsRequest>(header).map_err(bad)?;
            let filter = codec::decode_acl_filter(request).map_err(|e| invalid(e.to_string()))?;
            let header = shard.security.with(|snapshot| {
                let rules: Vec<_> = protocol::acl::filter(
                    snapshot.acls.rules(),
                    filter.principal.as_deref(),
                    filter.resource,
                    filter.name.as_deref(),
                )
                .collect();
                super::with_builder(shard, |fbb| {
                    codec::describe_acls_response(fbb, &rules).to_vec()
                })
            });
            return Ok(Dispatched::Ready(ready(api, header)));
        }
        Api::ListUsers => {
            verify::<wire::ListUsersRequest>(header).map_err(bad)?;
            let mut users: Vec<String> = shard.security.with(|s| s.users.keys().cloned().collect());
            users.sort();
            let header = super::with_builder(shard, |fbb| {
                codec::list_users_response(fbb, &users).to_vec()
            });
            return Ok(Dispatched::Ready(ready(api, header)));
        }
        Api::CreateAcls => {
            let request = verify::<wire::CreateAclsRequest>(header).map_err(bad)?;
            SecurityChange::AddAcls(
                codec::decode_rules(request.rules()).map_err(|e| invalid(e.to_string()))?,
            )
        }
        Api::DeleteAcls => {
            let request = verify::<wire::DeleteAclsRequest>(header).map_err(bad)?;
            SecurityChange::RemoveAcls(
                codec::decode_rules(request.rules()).map_err(|e| invalid(e.to_string()))?,
            )
        }
        Api::DescribeQuotas => {
            verify::<wire::DescribeQuotasRequest>(header).map_err(bad)?;
            let described = described_quotas();
            let header = super::with_builder(shard, |fbb| {
                protocol::codec::quotas::describe_quotas_response(fbb, &described).to_vec()
            });
            return Ok(Dispatched::Ready(ready(api, header)));
        }
        Api::AlterQuotas => {
            let request = verify::<wire::AlterQuotasRequest>(header).map_err(bad)?;
            quota_change(&request)?
        }
        Api::AlterUsers => {
            let request = verify::<wire::AlterUsersRequest>(header).map_err(bad)?;
            let mut upserts = Vec::new();
            for user in request.upserts().iter().flatten() {
                let name = user.name().unwrap_or_default();
                scram::check_user(name).map_err(|e| invalid(e.to_string()))?;
                let credential = Credential::from_text(user.credential().unwrap_or_default())
                    .map_err(|e| invalid(format!("user {name}: {e}")))?;
                upserts.push((name.to_string(), credential));
            }
            let mut deletions = Vec::new();
            for name in request.deletions().iter().flatten() {
                scram::check_user(name).map_err(|e| invalid(e.to_string()))?;
                deletions.push(name.to_string());
            }
            let count = upserts.len() + deletions.len();
            if count == 0 || count > USERS_PER_REQUEST_MAX {
                return Err(invalid(format!(
                    "{count} users named: a request changes 1 to {USERS_PER_REQUEST_MAX}"
                )));
            }
            SecurityChange::Users { upserts, deletions }
        }
        other => {
            return Err(Failure::new(
                ErrorCode::Internal,
                format!("{other:?} is not a security request"),
            ))
        }
    };
    let (reply, answer) = flume::bounded(1);
    let shard = shard.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        let stopping = || Failure::new(ErrorCode::ShuttingDown, "the broker is stopping");
        let result = if shard
            .control
            .send_async(ControlMsg::Security { change, reply })
            .await
            .is_err()
        {
            Err(stopping())
        } else {
            match answer.recv_async().await {
                Ok(Ok(changed)) => Ok(changed),
                Ok(Err(error)) => Err(Failure::new(error.code, error.message)),
                Err(_) => Err(stopping()),
            }
        };
        let Changed { added, removed } = match result {
            Ok(changed) => changed,
            Err(failure) => {
                crate::metrics::bump(&shard.metrics.counters.request_errors_total, 1);
                return Some(failure.response(api as u16));
            }
        };
        let header = super::with_builder(&shard, |fbb| {
            match api {
                Api::CreateAcls => codec::create_acls_response(fbb, added),
                Api::DeleteAcls => codec::delete_acls_response(fbb, removed),
                Api::AlterQuotas => {
                    protocol::codec::quotas::alter_quotas_response(fbb, added, removed)
                }
                _ => codec::alter_users_response(fbb, added, removed),
            }
            .to_vec()
        });
        Some(ready(api, header))
    })))
}

/// An AlterQuotas request's change, checked: one to
/// [`USERS_PER_REQUEST_MAX`] principals, each named once.
fn quota_change(request: &wire::AlterQuotasRequest<'_>) -> Result<SecurityChange, Failure> {
    use protocol::codec::quotas::{check_principal, decode_entries};
    let invalid = |message: String| {
        Failure::new(
            ErrorCode::InvalidRequest,
            format!("{:?}: {message}", Api::AlterQuotas),
        )
    };
    let set = decode_entries(request.set());
    let delete: Vec<String> = request
        .delete()
        .iter()
        .flatten()
        .map(str::to_string)
        .collect();
    let count = set.len() + delete.len();
    if count == 0 || count > USERS_PER_REQUEST_MAX {
        return Err(invalid(format!(
            "{count} quotas named: a request changes 1 to {USERS_PER_REQUEST_MAX}"
        )));
    }
    let mut named = std::collections::BTreeSet::new();
    for principal in set
        .iter()
        .map(|e| e.principal.as_str())
        .chain(delete.iter().map(String::as_str))
    {
        check_principal(principal).map_err(|e| invalid(e.to_string()))?;
        if !named.insert(principal) {
            return Err(invalid(format!("{principal} is named more than once")));
        }
    }
    if !set.is_empty() && !delete.is_empty() {
        return Err(invalid(
            "a request sets quotas or deletes them, not both".into(),
        ));
    }
    if delete.is_empty() {
        Ok(SecurityChange::SetQuotas(
            set.into_iter()
                .map(|e| {
                    let record = QuotaRecord {
                        produce_bytes_per_second: e.produce_bytes_per_second,
                        fetch_bytes_per_second: e.fetch_bytes_per_second,
                        requests_per_second: e.requests_per_second,
                        connections: e.connections,
                    };
                    (e.principal, record)
                })
                .collect(),
        ))
    } else {
        Ok(SecurityChange::DeleteQuotas(delete))
    }
}

/// The quotas set at run time and this broker's configured ones.
fn described_quotas() -> protocol::codec::quotas::Described {
    let entries = |quotas: std::collections::BTreeMap<String, crate::auth::quota::Quota>| {
        quotas
            .into_iter()
            .map(|(principal, q)| protocol::codec::quotas::QuotaEntry {
                principal,
                produce_bytes_per_second: q.produce_bytes_per_second,
                fetch_bytes_per_second: q.fetch_bytes_per_second,
                requests_per_second: q.requests_per_second,
                connections: q.connections,
            })
            .collect()
    };
    let quotas = crate::auth::quota::quotas();
    protocol::codec::quotas::Described {
        quotas: entries(quotas.registry()),
        configured: entries(quotas.configured()),
    }
}

fn ready(api: Api, header: Vec<u8>) -> Response {
    Response {
        api: api as u16,
        error: 0,
        header,
        payload: Payload::None,
    }
}
