//! The in-memory registry, for tests of the code above the seam.

use super::{BrokerRecord, Registry, RegistryError, RegistryEvent, TopicRecord};
use std::collections::BTreeMap;

/// Topics in memory; gone with the process. One live broker: `me`.
#[derive(Debug)]
pub struct Memory {
    me: BrokerRecord,
    topics: BTreeMap<String, (TopicRecord, i64)>,
    revision: i64,
    security: crate::security::SecurityRecords,
    next_producer_id: i64,
}

impl Memory {
    /// An empty registry whose only live broker is `me`.
    pub fn new(me: BrokerRecord) -> Memory {
        Memory {
            me,
            topics: BTreeMap::new(),
            revision: 0,
            next_producer_id: super::first_producer_id(),
            security: crate::security::SecurityRecords {
                login_secret: crate::security::new_login_secret(),
                ..Default::default()
            },
        }
    }
}

impl Registry for Memory {
    /// No groups: they need a cluster.
    type Groups = crate::groups::MemoryGroups;

    async fn topics(&mut self) -> Result<Vec<TopicRecord>, RegistryError> {
        Ok(self.topics.values().map(|(t, _)| t.clone()).collect())
    }

    async fn producer_ids(&mut self, count: u32) -> Result<std::ops::Range<i64>, RegistryError> {
        let block = super::producer_id_block(self.next_producer_id, count)?;
        self.next_producer_id = block.end;
        Ok(block)
    }

    async fn brokers(&mut self) -> Result<Vec<BrokerRecord>, RegistryError> {
        Ok(vec![self.me.clone()])
    }

    async fn create_topic(&mut self, topic: TopicRecord) -> Result<i64, RegistryError> {
        if self.topics.contains_key(&topic.name) {
            return Err(RegistryError::TopicExists { name: topic.name });
        }
        self.revision += 1;
        self.topics
            .insert(topic.name.clone(), (topic, self.revision));
        Ok(self.revision)
    }

    async fn delete_topic(&mut self, name: &str) -> Result<TopicRecord, RegistryError> {
        self.topics
            .remove(name)
            .map(|(t, _)| t)
            .ok_or_else(|| RegistryError::UnknownTopic {
                name: name.to_string(),
            })
    }

    async fn topic(&mut self, name: &str) -> Result<Option<(TopicRecord, i64)>, RegistryError> {
        Ok(self.topics.get(name).cloned())
    }

    async fn replace_topic(
        &mut self,
        record: TopicRecord,
        expected: i64,
    ) -> Result<Option<i64>, RegistryError> {
        match self.topics.get(&record.name) {
            Some((_, revision)) if *revision == expected => {
                self.revision += 1;
                self.topics
                    .insert(record.name.clone(), (record, self.revision));
                Ok(Some(self.revision))
            }
            _ => Ok(None),
        }
    }

    async fn next_event(&mut self) -> RegistryEvent {
        std::future::pending().await
    }

    async fn security(&mut self) -> Result<crate::security::SecurityRecords, RegistryError> {
        Ok(self.security.clone())
    }

    async fn change_security(
        &mut self,
        change: crate::security::SecurityChange,
    ) -> Result<crate::security::Changed, RegistryError> {
        Ok(self.security.apply(&change))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_registry_conforms() {
        let me = super::super::conformance::broker(4);
        let mut registry = Memory::new(me);
        futures_lite::future::block_on(super::super::conformance::check(&mut registry, 4));
        futures_lite::future::block_on(super::super::conformance::check_replace(&mut registry, 4));
    }
}
