//! A standalone broker's Kafka groups: `<data-dir>/kafka-groups/<group>.json`,
//! one file per group holding its saved state and committed offsets,
//! replaced whole (temporary file, fsync, rename, directory fsync) at each
//! change, so a crash leaves the old or the new file. Runs on the control
//! thread. One broker coordinates every group: there is no one to fence.

use super::{KafkaGroupAnswer, KafkaGroupOp, KafkaOffset, SavedGroup};
use crate::registry::RegistryError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The directory of the group files, inside the data directory.
pub const DIR: &str = "kafka-groups";

#[derive(Debug, Default, Serialize, Deserialize)]
struct GroupFile {
    #[serde(default)]
    state: Option<SavedGroup>,
    #[serde(default)]
    offsets: Vec<KafkaOffset>,
}

/// The group files of one data directory.
#[derive(Debug)]
pub struct GroupFiles {
    dir: PathBuf,
}

impl GroupFiles {
    /// The groups kept in `data_dir`.
    pub fn new(data_dir: &Path) -> GroupFiles {
        GroupFiles {
            dir: data_dir.join(DIR),
        }
    }

    fn path(&self, group: &str) -> PathBuf {
        self.dir.join(format!("{group}.json"))
    }

    fn read(&self, group: &str) -> Result<GroupFile, RegistryError> {
        let path = self.path(group);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| RegistryError::Corrupt {
                path: path.display().to_string(),
                reason: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(GroupFile::default()),
            Err(e) => Err(RegistryError::io("reading", &path, e)),
        }
    }

    fn write(&self, group: &str, file: &GroupFile) -> Result<(), RegistryError> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| RegistryError::io("creating", &self.dir, e))?;
        let path = self.path(group);
        let tmp = self.dir.join(format!("{group}.json.tmp"));
        let text = serde_json::to_vec(file).map_err(|e| RegistryError::Corrupt {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        let mut out =
            std::fs::File::create(&tmp).map_err(|e| RegistryError::io("creating", &tmp, e))?;
        out.write_all(&text)
            .map_err(|e| RegistryError::io("writing", &tmp, e))?;
        out.sync_all()
            .map_err(|e| RegistryError::io("syncing", &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| RegistryError::io("renaming", &path, e))?;
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| RegistryError::io("syncing", &self.dir, e))
    }

    /// Serves one operation.
    pub fn serve(&self, op: KafkaGroupOp) -> Result<KafkaGroupAnswer, RegistryError> {
        Ok(match op {
            KafkaGroupOp::Coordinator { candidate, .. } => KafkaGroupAnswer::Coordinator(candidate),
            KafkaGroupOp::Load { group } => KafkaGroupAnswer::State(self.read(&group)?.state),
            KafkaGroupOp::Save { group, state, .. } => {
                let mut file = self.read(&group)?;
                file.state = state;
                self.write(&group, &file)?;
                KafkaGroupAnswer::Done
            }
            KafkaGroupOp::Commit { group, offsets, .. } => {
                let file = self.read(&group)?;
                let mut all: BTreeMap<(String, u32), KafkaOffset> = file
                    .offsets
                    .into_iter()
                    .map(|o| ((o.topic.clone(), o.partition), o))
                    .collect();
                for o in offsets {
                    all.insert((o.topic.clone(), o.partition), o);
                }
                let file = GroupFile {
                    state: file.state,
                    offsets: all.into_values().collect(),
                };
                self.write(&group, &file)?;
                KafkaGroupAnswer::Done
            }
            KafkaGroupOp::Offsets { group } => {
                KafkaGroupAnswer::Offsets(self.read(&group)?.offsets)
            }
            KafkaGroupOp::List => {
                let mut groups = Vec::new();
                match std::fs::read_dir(&self.dir) {
                    Ok(entries) => {
                        for entry in entries.flatten() {
                            let name = entry.file_name().to_string_lossy().into_owned();
                            if let Some(group) = name.strip_suffix(".json") {
                                groups.push(group.to_string());
                            }
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(RegistryError::io("listing", &self.dir, e)),
                }
                groups.sort();
                KafkaGroupAnswer::Groups(groups)
            }
        })
    }

    /// Removes a deleted topic's offsets from every group.
    pub fn forget_topic(&self, topic: &str) -> Result<(), RegistryError> {
        let KafkaGroupAnswer::Groups(groups) = self.serve(KafkaGroupOp::List)? else {
            return Ok(());
        };
        for group in groups {
            let mut file = self.read(&group)?;
            let before = file.offsets.len();
            file.offsets.retain(|o| o.topic != topic);
            if file.offsets.len() != before {
                self.write(&group, &file)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka_groups::Holder;

    fn offset(topic: &str, partition: u32, offset: i64) -> KafkaOffset {
        KafkaOffset {
            topic: topic.into(),
            partition,
            offset,
            leader_epoch: -1,
            metadata: String::new(),
        }
    }

    #[test]
    fn commits_replace_per_partition_and_survive_a_reopen() {
        let dir = std::env::temp_dir().join(format!("ringlog-kafka-groups-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let files = GroupFiles::new(&dir);
        let me = Holder {
            broker: 0,
            shard: 1,
        };
        let commit = |offsets| KafkaGroupOp::Commit {
            group: "g".into(),
            me,
            offsets,
        };
        files
            .serve(commit(vec![offset("t", 0, 10), offset("t", 1, 20)]))
            .unwrap();
        files.serve(commit(vec![offset("t", 1, 25)])).unwrap();
        let files = GroupFiles::new(&dir);
        let KafkaGroupAnswer::Offsets(offsets) = files
            .serve(KafkaGroupOp::Offsets { group: "g".into() })
            .unwrap()
        else {
            panic!("not offsets")
        };
        assert_eq!(offsets, vec![offset("t", 0, 10), offset("t", 1, 25)]);
        files.forget_topic("t").unwrap();
        let KafkaGroupAnswer::Offsets(offsets) = files
            .serve(KafkaGroupOp::Offsets { group: "g".into() })
            .unwrap()
        else {
            panic!("not offsets")
        };
        assert!(offsets.is_empty());
        let KafkaGroupAnswer::Groups(groups) = files.serve(KafkaGroupOp::List).unwrap() else {
            panic!("not groups")
        };
        assert_eq!(groups, vec!["g".to_string()]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
