//! What a clustered broker's data directory remembers of its cluster, so
//! that a registry which forgot (an empty, wiped or restored etcd, a wrong
//! `--cluster`) can never take the data with it.
//!
//! - `meta.toml`: the cluster this data directory belongs to — its name,
//!   the id its first broker created in etcd (`cluster-id`), and the broker
//!   id. Written once, when the directory first joins a cluster (and again
//!   only by `--join-new-cluster`). A broker whose etcd prefix holds another
//!   id, or none, applies nothing from it (`coordinator::registry::Etcd`).
//!   As KRaft's `meta.properties`: a data directory is never silently
//!   adopted by a cluster it did not join.
//! - `cluster-topics.toml`: the topic records as this broker last applied
//!   them (every topic of the cluster, with its id, settings and
//!   placement), rewritten by the control thread after each change. A
//!   broker that starts against a foreign registry opens its partitions
//!   from here and keeps serving them; `--join-new-cluster` registers them
//!   again from here.
//!
//! Both are replaced whole ([`crate::durable_file`]). A standalone broker
//! has neither: its registry is `topics.toml`.

use crate::durable_file;
use anyhow::Context;
use coordinator::registry::TopicRecord;
use protocol::types::BrokerId;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The identity file's name in the data directory.
pub const META_FILE: &str = "meta.toml";
/// The applied topics' file name in the data directory.
pub const APPLIED_TOPICS_FILE: &str = "cluster-topics.toml";

/// The cluster a data directory belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    /// The cluster's name (`--cluster`), for the operator's eyes: the id is
    /// what is checked.
    pub cluster: String,
    /// The id in the cluster's `cluster-id` key.
    pub cluster_id: String,
    /// The broker id this data directory was used with.
    pub broker_id: BrokerId,
}

impl Meta {
    /// Reads `meta.toml`; `None` for a data directory that never joined a
    /// cluster.
    pub fn read(data_dir: &Path) -> anyhow::Result<Option<Meta>> {
        let path = data_dir.join(META_FILE);
        let Some(text) =
            durable_file::read(&path).with_context(|| format!("reading {}", path.display()))?
        else {
            return Ok(None);
        };
        let meta: Meta = toml::from_str(&text).with_context(|| {
            format!(
                "{} is unreadable; it says which cluster this data directory belongs to",
                path.display()
            )
        })?;
        Ok(Some(meta))
    }

    /// Writes `meta.toml`, durably.
    pub fn write(&self, data_dir: &Path) -> anyhow::Result<()> {
        let path = data_dir.join(META_FILE);
        let body = toml::to_string(self).context("encoding meta.toml")?;
        let text = format!(
            "# Written by the ringlog broker: the cluster this data directory belongs to.\n\
             # A broker refuses to apply a registry (etcd prefix) whose cluster-id differs.\n\
             # Do not edit; after a deliberate rebuild of etcd, start once with --join-new-cluster.\n{body}"
        );
        durable_file::replace(&path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))
    }

    /// Refuses a data directory used with another broker id: the registry
    /// would give its partitions to someone else and this broker would
    /// move them all aside.
    pub fn check_broker_id(&self, data_dir: &Path, broker_id: BrokerId) -> anyhow::Result<()> {
        if self.broker_id != broker_id {
            anyhow::bail!(
                "data dir {} belongs to broker {} of cluster {:?} (id {}), not to --broker-id {broker_id}: start it with --broker-id {}, or give broker {broker_id} a data directory of its own",
                data_dir.display(),
                self.broker_id,
                self.cluster,
                self.cluster_id,
                self.broker_id
            );
        }
        Ok(())
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct AppliedFile {
    #[serde(default)]
    topic: Vec<TopicRecord>,
}

/// The topics as last applied, in name order; empty when none were
/// recorded yet.
pub fn read_applied_topics(data_dir: &Path) -> anyhow::Result<Vec<TopicRecord>> {
    let path = data_dir.join(APPLIED_TOPICS_FILE);
    let Some(text) =
        durable_file::read(&path).with_context(|| format!("reading {}", path.display()))?
    else {
        return Ok(Vec::new());
    };
    let file: AppliedFile =
        toml::from_str(&text).with_context(|| format!("{} is unreadable", path.display()))?;
    let mut topics = Vec::with_capacity(file.topic.len());
    for topic in file.topic {
        match topic.check() {
            Ok(()) => topics.push(topic),
            Err(reason) => {
                tracing::error!(file = %path.display(), %reason, "skipping an invalid topic record")
            }
        }
    }
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(topics)
}

/// Replaces the applied topics with `topics`, durably.
pub fn write_applied_topics<'t>(
    data_dir: &Path,
    topics: impl Iterator<Item = &'t TopicRecord>,
) -> std::io::Result<()> {
    let file = AppliedFile {
        topic: topics.cloned().collect(),
    };
    let body = toml::to_string(&file).map_err(std::io::Error::other)?;
    let text = format!(
        "# Written by the ringlog broker: the cluster's topics as this broker last applied them.\n\
         # Read when the registry does not hold this broker's cluster, and by --join-new-cluster.\n{body}"
    );
    durable_file::replace(&data_dir.join(APPLIED_TOPICS_FILE), text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::codec::TopicSettings;

    #[test]
    fn meta_and_applied_topics_round_trip_and_a_wrong_broker_id_is_refused() {
        let dir = std::env::temp_dir().join(format!("ringlog-membership-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(Meta::read(&dir).unwrap(), None);
        assert!(read_applied_topics(&dir).unwrap().is_empty());
        let meta = Meta {
            cluster: "prod".into(),
            cluster_id: "00ff".into(),
            broker_id: 3,
        };
        meta.write(&dir).unwrap();
        assert_eq!(Meta::read(&dir).unwrap(), Some(meta.clone()));
        meta.check_broker_id(&dir, 3).unwrap();
        let error = meta.check_broker_id(&dir, 4).unwrap_err().to_string();
        assert!(error.contains("belongs to broker 3"), "{error}");

        let mut b = TopicRecord::new("b", TopicSettings::default(), vec![1, 2]);
        b.id = "id-b".into();
        let a = TopicRecord::new("a", TopicSettings::default(), vec![3]);
        write_applied_topics(&dir, [b.clone(), a.clone()].iter()).unwrap();
        assert_eq!(read_applied_topics(&dir).unwrap(), vec![a, b]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
