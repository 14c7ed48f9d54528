//! A copy's source: which cluster, which topic (by name and by id) and
//! which mirror it was made by, recorded in the target topic's
//! `mirror_source` when the mirror creates it and sent with every mirror
//! append, which the target refuses unless the topic records exactly the
//! same (issue 45, item 1).
//!
//! The record is text, as the broker stores and shows it
//! (`ringlog topic describe`: "mirror of dc1/clicks (cluster …, topic id
//! …)"): the broker only compares it, and the mirror reads the parts back
//! to say *how* an existing copy differs from what it would write — another
//! cluster, the source topic deleted and created again, another mirror.
//! Topic names hold no spaces or parentheses and the ids are hex, so the
//! parts are found from the end; the mirror's name (its `--name`, or the
//! `--from` addresses) may hold anything but " (cluster ".

use std::fmt;

/// Where a copy comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The mirror's name (`--name`).
    pub mirror: String,
    /// The source topic's name.
    pub topic: String,
    /// The source cluster's id (Metadata's `cluster_id`).
    pub cluster_id: String,
    /// The source topic's id (Metadata's topic id: new at each creation).
    pub topic_id: String,
}

/// What an existing target topic records, read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// An ordinary topic, or a copy promoted since: nothing to mirror into.
    Ordinary,
    /// A copy made before copies recorded their source's ids: only the
    /// `mirror/topic` label is known.
    Label(String),
    /// A copy that records its source.
    Source(Source),
}

impl Recorded {
    /// Reads a target topic's `mirror_source`.
    pub fn parse(text: &str) -> Recorded {
        if text.is_empty() {
            return Recorded::Ordinary;
        }
        let parsed = (|| {
            let rest = text.strip_suffix(')')?;
            let (label, ids) = rest.rsplit_once(" (cluster ")?;
            let (cluster_id, topic_id) = ids.split_once(", topic id ")?;
            let (mirror, topic) = label.rsplit_once('/')?;
            Some(Source {
                mirror: mirror.to_string(),
                topic: topic.to_string(),
                cluster_id: cluster_id.to_string(),
                topic_id: topic_id.to_string(),
            })
        })();
        match parsed {
            Some(source) => Recorded::Source(source),
            None => Recorded::Label(text.to_string()),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} (cluster {}, topic id {})",
            self.mirror, self.topic, self.cluster_id, self.topic_id
        )
    }
}

impl Source {
    /// The `mirror/topic` part, as copies made before the ids said it.
    pub fn label(&self) -> String {
        format!("{}/{}", self.mirror, self.topic)
    }

    /// Why `target` (a topic of the target cluster that `recorded` says
    /// where it comes from) is not this source's copy, or `None` when it
    /// is. A copy from before the ids is taken when its label is this
    /// mirror's and topic's: nothing else can be checked.
    pub fn refuses(&self, target: &str, recorded: &Recorded) -> Option<String> {
        let ours = format!("the copy of {self}");
        match recorded {
            Recorded::Ordinary => Some(format!(
                "{target} exists in the target and is not a mirror's copy (an ordinary topic, or a copy promoted since): the mirror writes nothing into it; mirror under --prefix, or delete it first, to make {ours}"
            )),
            Recorded::Label(label) if *label == self.label() => None,
            Recorded::Label(label) => Some(format!(
                "{target} in the target is a copy of {label:?}, not {ours}"
            )),
            Recorded::Source(theirs) if theirs == self => None,
            Recorded::Source(theirs) if theirs.cluster_id != self.cluster_id => Some(format!(
                "{target} in the target is a copy of {theirs}: another cluster's topic, not {ours}"
            )),
            Recorded::Source(theirs) if theirs.topic != self.topic || theirs.topic_id != self.topic_id => Some(format!(
                "{target} in the target is a copy of {theirs}; the source's {} is topic id {} now (deleted and created again, or another topic): its bytes are another log. Delete the copy to mirror the new topic into it, or mirror it under --prefix",
                self.topic, self.topic_id
            )),
            Recorded::Source(theirs) => Some(format!(
                "{target} in the target is a copy of {theirs}, made by the mirror named {:?}: run this mirror with --name {:?}, or mirror under --prefix",
                theirs.mirror, theirs.mirror
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> Source {
        Source {
            mirror: "dc1".into(),
            topic: "clicks".into(),
            cluster_id: "9f2c".into(),
            topic_id: "3a1b".into(),
        }
    }

    #[test]
    fn a_recorded_source_reads_back_as_written_and_an_address_list_as_a_name_survives() {
        let mut s = source();
        assert_eq!(Recorded::parse(&s.to_string()), Recorded::Source(s.clone()));
        s.mirror = "127.0.0.1:9092,127.0.0.1:9093".into();
        assert_eq!(Recorded::parse(&s.to_string()), Recorded::Source(s.clone()));
        assert_eq!(Recorded::parse(""), Recorded::Ordinary);
        assert_eq!(
            Recorded::parse("dc1/clicks"),
            Recorded::Label("dc1/clicks".into())
        );
    }

    #[test]
    fn only_the_same_source_is_taken_and_each_difference_is_named() {
        let s = source();
        assert_eq!(s.refuses("clicks", &Recorded::Source(s.clone())), None);
        assert_eq!(
            s.refuses("clicks", &Recorded::Label("dc1/clicks".into())),
            None
        );
        let refused = |r: Recorded| s.refuses("clicks", &r).unwrap_or_default();
        assert!(refused(Recorded::Ordinary).contains("not a mirror's copy"));
        assert!(refused(Recorded::Label("dc2/clicks".into())).contains("\"dc2/clicks\""));
        let other_cluster = Source {
            cluster_id: "77aa".into(),
            ..s.clone()
        };
        assert!(refused(Recorded::Source(other_cluster)).contains("another cluster"));
        let recreated = Source {
            topic_id: "0000".into(),
            ..s.clone()
        };
        assert!(refused(Recorded::Source(recreated)).contains("deleted and created again"));
        let other_mirror = Source {
            mirror: "dc9".into(),
            ..s.clone()
        };
        assert!(refused(Recorded::Source(other_mirror)).contains("--name \"dc9\""));
    }
}
