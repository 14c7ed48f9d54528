//! The in-memory registry, for tests of the code above the seam.

use super::{BrokerRecord, Registry, RegistryError, RegistryEvent, TopicRecord};
use std::collections::BTreeMap;

/// Topics in memory; gone with the process. One live broker: `me`.
#[derive(Debug)]
pub struct Memory {
    me: BrokerRecord,
    topics: BTreeMap<String, TopicRecord>,
}

impl Memory {
    /// An empty registry whose only live broker is `me`.
    pub fn new(me: BrokerRecord) -> Memory {
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

    async fn brokers(&mut self) -> Result<Vec<BrokerRecord>, RegistryError> {
        Ok(vec![self.me.clone()])
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

    async fn next_event(&mut self) -> RegistryEvent {
        std::future::pending().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_registry_conforms() {
        let me = super::super::conformance::broker(4);
        futures_lite::future::block_on(super::super::conformance::check(&mut Memory::new(me), 4));
    }
}
