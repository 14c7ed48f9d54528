//! What the registry keeps for security: the users who may log in (their
//! SCRAM-SHA-256 credentials, never a password) and the access control
//! rules.
//!
//! | store      | where                                                  |
//! |------------|--------------------------------------------------------|
//! | standalone | `<data-dir>/security.toml`, rewritten atomically       |
//! | memory     | the process's memory (tests)                           |
//! | etcd       | `security/users/<name>`, `security/acls/<rule>` and `security/quotas/<principal>` under the cluster's prefix ([`crate::keys`]) |
//!
//! Quotas set at run time (`ringlog quotas set`) live here too: per
//! principal, and [`DEFAULT_QUOTA`] for a principal without its own; they
//! take precedence over a broker's configured ones.
//!
//! The first user is written before any broker runs, straight into the
//! store (`ringlog users add NAME --password-file F --data-dir DIR`, or
//! `--etcd URL`): [`change_file`] and [`change_etcd`]. From then on users
//! and rules change through any broker (AlterUsers, CreateAcls,
//! DeleteAcls), whose control thread owns the registry.

use crate::keys::{Key, Keys};
pub use crate::password_file::read_password_file;
use crate::registry::error::RegistryError;
use protocol::acl::AclRule;
use protocol::scram::Credential;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// File name of the standalone store inside the data directory.
pub const SECURITY_FILE: &str = "security.toml";

/// The users and rules, as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecurityRecords {
    /// Each user's credential, by name.
    pub users: BTreeMap<String, Credential>,
    /// The access control rules, sorted, without duplicates.
    pub acls: Vec<AclRule>,
    /// The cluster's secret (32 bytes) from which the salt and iteration
    /// count answered for an unknown user derive: every broker of the
    /// cluster, before and after a restart, answers an unknown name alike,
    /// so the answer does not tell a real user from a made-up one (issue
    /// 48). Empty where none is kept (the memory registry of tests).
    pub login_secret: Vec<u8>,
    /// Quotas set at run time, by principal (`User:alice`), and
    /// [`DEFAULT_QUOTA`] for a principal without its own.
    pub quotas: BTreeMap<String, QuotaRecord>,
}

/// The key of the quota of a principal without its own.
pub const DEFAULT_QUOTA: &str = protocol::codec::quotas::DEFAULT_PRINCIPAL;

/// One principal's quota, as stored (0 = no bound). See the broker's
/// `auth/quota.rs` for what each bounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotaRecord {
    /// Message-set bytes produced per second.
    pub produce_bytes_per_second: u64,
    /// Log bytes fetched per second.
    pub fetch_bytes_per_second: u64,
    /// Requests of any api per second.
    pub requests_per_second: u64,
    /// Connections open at once, per broker.
    pub connections: u32,
}

/// A new login secret: 32 random bytes.
pub fn new_login_secret() -> Vec<u8> {
    let mut bytes = [0u8; 32];
    protocol::scram::fill_random(&mut bytes);
    bytes.to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    if text.len() != 64 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The name of the standalone login secret's file in the data directory.
pub const LOGIN_SECRET_FILE: &str = "login-secret";

/// The standalone broker's login secret, made (mode 0600) when missing.
pub fn file_login_secret(dir: &Path) -> Result<Vec<u8>, RegistryError> {
    let path = dir.join(LOGIN_SECRET_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            return unhex(&text).ok_or_else(|| RegistryError::Corrupt {
                path: path.display().to_string(),
                reason: "not 64 hex digits".into(),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(RegistryError::io("reading", &path, e)),
    }
    let secret = new_login_secret();
    write_private(dir, LOGIN_SECRET_FILE, hex(&secret).as_bytes())?;
    Ok(secret)
}

/// Replaces `<dir>/<name>` atomically and durably with `bytes`, its
/// owner's alone from the start (mode 0600, whatever the umask): the files
/// that hold credentials.
fn write_private(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), RegistryError> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| RegistryError::io("creating", &tmp, e))?;
    out.write_all(bytes)
        .and_then(|()| out.sync_all())
        .map_err(|e| RegistryError::io("writing", &tmp, e))?;
    drop(out);
    std::fs::rename(&tmp, &path).map_err(|e| RegistryError::io("renaming", &path, e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| RegistryError::io("syncing", dir, e))
}

/// A change to the users or the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecurityChange {
    /// Add or replace these users' credentials, remove those users.
    Users {
        /// (name, credential) to add or replace.
        upserts: Vec<(String, Credential)>,
        /// Names to remove.
        deletions: Vec<String>,
    },
    /// Add these rules (those present already stay as they are).
    AddAcls(Vec<AclRule>),
    /// Remove these rules where they exist.
    RemoveAcls(Vec<AclRule>),
    /// Set these principals' quotas (each replaces the principal's whole
    /// quota; [`DEFAULT_QUOTA`] names the default).
    SetQuotas(Vec<(String, QuotaRecord)>),
    /// Remove these principals' quotas where they exist.
    DeleteQuotas(Vec<String>),
}

/// What a change did: users added or replaced and removed, or rules
/// created and deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changed {
    /// Users upserted, or rules that were new.
    pub added: u32,
    /// Users or rules that existed and are gone.
    pub removed: u32,
}

impl SecurityRecords {
    /// Applies `change` in memory.
    pub fn apply(&mut self, change: &SecurityChange) -> Changed {
        let mut changed = Changed::default();
        match change {
            SecurityChange::Users { upserts, deletions } => {
                for (name, credential) in upserts {
                    self.users.insert(name.clone(), credential.clone());
                    changed.added += 1;
                }
                for name in deletions {
                    changed.removed += u32::from(self.users.remove(name).is_some());
                }
            }
            SecurityChange::AddAcls(rules) => {
                for rule in rules {
                    if let Err(at) = self.acls.binary_search(rule) {
                        self.acls.insert(at, rule.clone());
                        changed.added += 1;
                    }
                }
            }
            SecurityChange::RemoveAcls(rules) => {
                for rule in rules {
                    if let Ok(at) = self.acls.binary_search(rule) {
                        self.acls.remove(at);
                        changed.removed += 1;
                    }
                }
            }
            SecurityChange::SetQuotas(quotas) => {
                for (principal, quota) in quotas {
                    self.quotas.insert(principal.clone(), *quota);
                    changed.added += 1;
                }
            }
            SecurityChange::DeleteQuotas(principals) => {
                for principal in principals {
                    changed.removed += u32::from(self.quotas.remove(principal).is_some());
                }
            }
        }
        changed
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct SecurityFile {
    /// name = "SCRAM-SHA-256:..."
    #[serde(default)]
    users: BTreeMap<String, String>,
    /// Rules in their text form.
    #[serde(default)]
    acls: Vec<String>,
    /// Quotas set at run time, by principal.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    quotas: BTreeMap<String, QuotaRecord>,
}

fn corrupt(path: &Path, reason: impl std::fmt::Display) -> RegistryError {
    RegistryError::Corrupt {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// Reads `<dir>/security.toml`; a missing file holds no users and no rules.
/// A file that other users may read is refused (its keys would let them
/// pose as any user to this broker, as ssh refuses a private key left
/// readable): [`RegistryError::Exposed`].
pub fn read_file(dir: &Path) -> Result<SecurityRecords, RegistryError> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(SECURITY_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(SecurityRecords::default()),
        Err(e) => return Err(RegistryError::io("reading", &path, e)),
    };
    let mode = std::fs::metadata(&path)
        .map_err(|e| RegistryError::io("reading", &path, e))?
        .permissions()
        .mode()
        & 0o7777;
    if mode & 0o077 != 0 {
        return Err(RegistryError::Exposed {
            path: path.display().to_string(),
            mode,
        });
    }
    let file: SecurityFile = toml::from_str(&text).map_err(|e| corrupt(&path, e))?;
    let mut records = SecurityRecords::default();
    for (name, credential) in file.users {
        protocol::scram::check_user(&name).map_err(|e| corrupt(&path, e))?;
        let credential = Credential::from_text(&credential)
            .map_err(|e| corrupt(&path, format!("user {name}: {e}")))?;
        records.users.insert(name, credential);
    }
    for line in file.acls {
        records
            .acls
            .push(AclRule::parse(&line).map_err(|e| corrupt(&path, e))?);
    }
    records.acls.sort();
    records.acls.dedup();
    records.quotas = file.quotas;
    Ok(records)
}

/// Replaces `<dir>/security.toml` atomically and durably, mode 0600: it
/// holds every user's stored and server keys.
pub fn write_file(dir: &Path, records: &SecurityRecords) -> Result<(), RegistryError> {
    let path = dir.join(SECURITY_FILE);
    let file = SecurityFile {
        users: records
            .users
            .iter()
            .map(|(name, c)| (name.clone(), c.to_text()))
            .collect(),
        acls: records.acls.iter().map(|r| r.to_string()).collect(),
        quotas: records.quotas.clone(),
    };
    let text = toml::to_string(&file)
        .map_err(|e| RegistryError::io("encoding", &path, std::io::Error::other(e)))?;
    write_private(dir, SECURITY_FILE, text.as_bytes())
}

/// Applies `change` to `<dir>/security.toml` (read, change, replace).
pub fn change_file(dir: &Path, change: &SecurityChange) -> Result<Changed, RegistryError> {
    let mut records = read_file(dir)?;
    let changed = records.apply(change);
    write_file(dir, &records)?;
    Ok(changed)
}

/// The modification time of `<dir>/security.toml` (`None`: no file), so a
/// standalone broker notices a change written by `ringlog users add
/// --data-dir` while it runs.
pub fn file_version(dir: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(dir.join(SECURITY_FILE))
        .and_then(|m| m.modified())
        .ok()
}

/// Reads the users and rules under `keys` in etcd. An entry that does
/// not parse is skipped with a warning (it grants nothing).
pub async fn read_etcd(
    client: &mut etcd_client::Client,
    keys: &Keys,
) -> Result<SecurityRecords, RegistryError> {
    let options = etcd_client::GetOptions::new().with_prefix();
    let response = client
        .get(keys.security(), Some(options))
        .await
        .map_err(|e| RegistryError::Unavailable {
            reason: format!("reading users and access rules: {e}"),
        })?;
    let mut records = SecurityRecords::default();
    for kv in response.kvs() {
        let (Ok(key), Ok(value)) = (
            std::str::from_utf8(kv.key()),
            std::str::from_utf8(kv.value()),
        ) else {
            continue;
        };
        match keys.parse(key) {
            Some(Key::User(name)) => match Credential::from_text(value) {
                Ok(credential) if protocol::scram::check_user(name).is_ok() => {
                    records.users.insert(name.to_string(), credential);
                }
                _ => tracing::warn!(
                    key,
                    "a user's credential in etcd does not parse; that user cannot log in"
                ),
            },
            Some(Key::Acl(text)) => match AclRule::parse(text) {
                Ok(rule) => records.acls.push(rule),
                Err(error) => {
                    tracing::warn!(key, %error, "an access rule in etcd does not parse; it grants and denies nothing")
                }
            },
            Some(Key::Quota(principal)) => match serde_json::from_str::<QuotaRecord>(value) {
                Ok(quota) => {
                    records.quotas.insert(principal.to_string(), quota);
                }
                Err(error) => tracing::warn!(key, %error, "a quota in etcd does not parse; it bounds nothing"),
            },
            Some(Key::LoginSecret) => match unhex(value) {
                Some(secret) => records.login_secret = secret,
                None => tracing::warn!(key, "the login secret in etcd is not 64 hex digits; made-up logins use this broker's own"),
            },
            _ => {}
        }
    }
    records.acls.sort();
    records.acls.dedup();
    if records.login_secret.is_empty() {
        records.login_secret = make_etcd_login_secret(client, keys).await?;
    }
    Ok(records)
}

/// Writes a login secret if there is none (of brokers that race, one
/// writes it), and reads the one that is there.
async fn make_etcd_login_secret(
    client: &mut etcd_client::Client,
    keys: &Keys,
) -> Result<Vec<u8>, RegistryError> {
    use etcd_client::{Compare, CompareOp, Txn, TxnOp};
    let key = keys.login_secret();
    let unavailable = |e: etcd_client::Error| RegistryError::Unavailable {
        reason: format!("making the login secret: {e}"),
    };
    let put = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key.clone(), hex(&new_login_secret()), None)]);
    client.txn(put).await.map_err(unavailable)?;
    let response = client.get(key.clone(), None).await.map_err(unavailable)?;
    response
        .kvs()
        .first()
        .and_then(|kv| std::str::from_utf8(kv.value()).ok())
        .and_then(unhex)
        .ok_or_else(|| RegistryError::Unavailable {
            reason: format!("{key} is missing or not 64 hex digits"),
        })
}

/// Operations per etcd transaction (etcd refuses more than 128 by
/// default).
const TXN_OPS_MAX: usize = 100;

/// Applies `change` to etcd under `keys`: one transaction per hundred
/// keys (a request of up to a thousand rules is several; each key's
/// change is atomic, the request as a whole is not).
pub async fn change_etcd(
    client: &mut etcd_client::Client,
    keys: &Keys,
    change: &SecurityChange,
) -> Result<Changed, RegistryError> {
    let before = read_etcd(client, keys).await?;
    let mut after = before.clone();
    let changed = after.apply(change);
    // Each key once, with its last change: etcd refuses a transaction
    // that names a key twice.
    let mut writes: BTreeMap<String, Option<String>> = BTreeMap::new();
    match change {
        SecurityChange::Users { upserts, deletions } => {
            for (name, credential) in upserts {
                writes.insert(keys.user(name), Some(credential.to_text()));
            }
            for name in deletions {
                writes.insert(keys.user(name), None);
            }
        }
        SecurityChange::AddAcls(rules) => {
            for rule in rules {
                let text = rule.to_string();
                writes.insert(keys.acl(&text), Some(text));
            }
        }
        SecurityChange::RemoveAcls(rules) => {
            for rule in rules {
                writes.insert(keys.acl(&rule.to_string()), None);
            }
        }
        SecurityChange::SetQuotas(quotas) => {
            for (principal, quota) in quotas {
                let value =
                    serde_json::to_string(quota).map_err(|e| RegistryError::Unavailable {
                        reason: format!("encoding a quota: {e}"),
                    })?;
                writes.insert(keys.quota(principal), Some(value));
            }
        }
        SecurityChange::DeleteQuotas(principals) => {
            for principal in principals {
                writes.insert(keys.quota(principal), None);
            }
        }
    }
    let ops: Vec<etcd_client::TxnOp> = writes
        .into_iter()
        .map(|(key, value)| match value {
            Some(value) => etcd_client::TxnOp::put(key, value, None),
            None => etcd_client::TxnOp::delete(key, None),
        })
        .collect();
    for chunk in ops.chunks(TXN_OPS_MAX) {
        client
            .txn(etcd_client::Txn::new().and_then(chunk.to_vec()))
            .await
            .map_err(|e| RegistryError::Unavailable {
                reason: format!("changing users or access rules: {e}"),
            })?;
    }
    Ok(changed)
}

/// Connects to etcd at `endpoints` for the CLI's bootstrap (no broker
/// involved), within 5 s.
async fn connect_etcd(
    endpoints: &[String],
    access: &crate::registry::access::EtcdAccess,
) -> Result<etcd_client::Client, RegistryError> {
    access
        .check(endpoints)
        .map_err(|reason| RegistryError::Unavailable {
            reason: reason.to_string(),
        })?;
    let timeout = std::time::Duration::from_secs(5);
    let options = access.connect_options(timeout)?.with_timeout(timeout);
    etcd_client::Client::connect(endpoints.to_vec(), Some(options))
        .await
        .map_err(|e| {
            let reason = format!("connecting to {}: {e}", endpoints.join(","));
            RegistryError::Unavailable {
                reason: format!("{reason}{}", access.hint_for(&reason)),
            }
        })
}

/// Applies `change` to cluster `cluster`'s registry in the etcd at
/// `endpoints` (`ringlog users add --etcd`, before any broker runs).
pub async fn change_at(
    endpoints: &[String],
    access: &crate::registry::access::EtcdAccess,
    cluster: &str,
    change: &SecurityChange,
) -> Result<Changed, RegistryError> {
    let mut client = connect_etcd(endpoints, access).await?;
    change_etcd(&mut client, &Keys::new(cluster), change).await
}

/// The users and rules of cluster `cluster` in the etcd at `endpoints`.
pub async fn read_at(
    endpoints: &[String],
    access: &crate::registry::access::EtcdAccess,
    cluster: &str,
) -> Result<SecurityRecords, RegistryError> {
    let mut client = connect_etcd(endpoints, access).await?;
    read_etcd(&mut client, &Keys::new(cluster)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_store_keeps_users_and_rules_across_reads_and_refuses_a_corrupt_file() {
        let dir = std::env::temp_dir().join(format!("ringlog-security-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(read_file(&dir).unwrap(), SecurityRecords::default());
        assert_eq!(file_version(&dir), None);
        let alice = Credential::new(b"pw", protocol::scram::ITERATIONS_MIN);
        let changed = change_file(
            &dir,
            &SecurityChange::Users {
                upserts: vec![("alice".into(), alice.clone())],
                deletions: vec!["nobody".into()],
            },
        )
        .unwrap();
        assert_eq!(
            changed,
            Changed {
                added: 1,
                removed: 0
            }
        );
        let rule = AclRule::parse("allow User:alice read topic:clicks").unwrap();
        let add = SecurityChange::AddAcls(vec![rule.clone(), rule.clone()]);
        assert_eq!(change_file(&dir, &add).unwrap().added, 1);
        assert_eq!(change_file(&dir, &add).unwrap().added, 0);
        let records = read_file(&dir).unwrap();
        assert_eq!(records.users.get("alice"), Some(&alice));
        assert_eq!(records.acls, vec![rule.clone()]);
        assert!(file_version(&dir).is_some());
        let text = std::fs::read_to_string(dir.join(SECURITY_FILE)).unwrap();
        assert!(!text.contains("pw\""), "{text}");
        let removed = change_file(&dir, &SecurityChange::RemoveAcls(vec![rule])).unwrap();
        assert_eq!(removed.removed, 1);
        use std::os::unix::fs::PermissionsExt;
        let mode = |dir: &Path| {
            std::fs::metadata(dir.join(SECURITY_FILE))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(&dir), 0o600, "written for its owner alone");
        std::fs::set_permissions(
            dir.join(SECURITY_FILE),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let exposed = read_file(&dir).unwrap_err();
        assert!(
            matches!(exposed, RegistryError::Exposed { mode: 0o644, .. }),
            "{exposed}"
        );
        assert!(exposed.to_string().contains("chmod 600"), "{exposed}");
        std::fs::set_permissions(
            dir.join(SECURITY_FILE),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        std::fs::write(dir.join(SECURITY_FILE), "acls = [\"allow nobody\"]").unwrap();
        assert!(matches!(
            read_file(&dir),
            Err(RegistryError::Corrupt { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
