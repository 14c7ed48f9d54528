//! The in-memory registry, for tests of the code above the seam.

use super::{Registry, RegistryError, TopicRecord};
use protocol::types::BrokerId;
use std::collections::BTreeMap;

/// Topics in memory; gone with the process. One live broker: `me`.
#[derive(Debug, Default)]
pub struct Memory {
    me: BrokerId,
    topics: BTreeMap<String, TopicRecord>,
}

impl Memory {
    /// An empty registry whose only live broker is `me`.
    pub fn new(me: BrokerId) -> Memory {
        Memory {
            me,
            topics: BTreeMap::new(),
        }
    }
}

impl Registry for Memory {
    async fn topics(&mut self) -> Result<Vec<TopicRecord>, RegistryError> {
        Ok(self.topics.values().cloned().collect())
    }

    async fn live_brokers(&mut self) -> Result<Vec<BrokerId>, RegistryError> {
        Ok(vec![self.me])
    }

    async fn create_topic(&mut self, topic: TopicRecord) -> Result<(), RegistryError> {
        if self.topics.contains_key(&topic.name) {
            return Err(RegistryError::TopicExists { name: topic.name });
        }
        self.topics.insert(topic.name.clone(), topic);
        Ok(())
    }

    async fn delete_topic(&mut self, name: &str) -> Result<TopicRecord, RegistryError> {
        self.topics
            .remove(name)
            .ok_or_else(|| RegistryError::UnknownTopic {
                name: name.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_registry_conforms() {
        super::super::conformance::check(&mut Memory::new(4), 4);
    }
}
