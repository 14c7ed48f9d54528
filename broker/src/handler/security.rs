//! CreateAcls, DeleteAcls and AlterUsers (through the control thread,
//! which owns the registry and publishes the result to every shard before
//! answering), DescribeAcls and ListUsers (from this shard's copy).
//! Who may send them is [`crate::auth::authorize`]'s business.

use super::{invalid_header, Dispatched, Failure, Payload, Response};
use crate::mailbox::ControlMsg;
use crate::shard::Shard;
use coordinator::security::{Changed, SecurityChange};
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
                _ => codec::alter_users_response(fbb, added, removed),
            }
            .to_vec()
        });
        Some(ready(api, header))
    })))
}

fn ready(api: Api, header: Vec<u8>) -> Response {
    Response {
        api: api as u16,
        error: 0,
        header,
        payload: Payload::None,
    }
}
