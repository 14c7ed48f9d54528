//! A cluster's Kafka groups in etcd (keys in [`crate::keys`]): the
//! coordinator key is bound to its broker's registration lease; the state
//! and the offsets are written only by a transaction that finds the
//! coordinator key naming the writer.

use super::{Holder, KafkaGroupAnswer, KafkaGroupOp, KafkaOffset, SavedGroup, OFFSETS_PER_TXN};
use crate::keys::Keys;
use crate::registry::RegistryError;
use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

fn unavailable(error: impl std::fmt::Display) -> RegistryError {
    RegistryError::Unavailable {
        reason: error.to_string(),
    }
}

async fn deadline<T>(
    timeout: Duration,
    request: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, RegistryError> {
    match tokio::time::timeout(timeout, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(unavailable(error)),
        Err(_) => Err(unavailable(format!("no answer within {timeout:?}"))),
    }
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// The Kafka groups of one cluster, as its control thread reaches them.
pub struct EtcdKafkaGroups<'a> {
    /// The etcd client.
    pub client: &'a mut Client,
    /// The cluster's keys.
    pub keys: &'a Keys,
    /// This broker's registration lease (0: none right now).
    pub lease: i64,
    /// How long one etcd request may take.
    pub timeout: Duration,
}

impl EtcdKafkaGroups<'_> {
    /// Serves one operation.
    pub async fn serve(&mut self, op: KafkaGroupOp) -> Result<KafkaGroupAnswer, RegistryError> {
        Ok(match op {
            KafkaGroupOp::Coordinator { group, candidate } => {
                KafkaGroupAnswer::Coordinator(self.coordinator(&group, candidate).await?)
            }
            KafkaGroupOp::Load { group } => {
                let key = self.keys.kafka_group_state(&group);
                let response = deadline(self.timeout, self.client.get(key, None)).await?;
                let state = match response.kvs().first() {
                    None => None,
                    Some(kv) => Some(serde_json::from_slice::<SavedGroup>(kv.value()).map_err(
                        |e| RegistryError::Corrupt {
                            path: String::from_utf8_lossy(kv.key()).into_owned(),
                            reason: e.to_string(),
                        },
                    )?),
                };
                KafkaGroupAnswer::State(state)
            }
            KafkaGroupOp::Save { group, me, state } => {
                let key = self.keys.kafka_group_state(&group);
                let op = match state {
                    Some(state) => TxnOp::put(key, json(&state), None),
                    None => TxnOp::delete(key, None),
                };
                self.fenced(&group, me, vec![op]).await?;
                KafkaGroupAnswer::Done
            }
            KafkaGroupOp::Commit { group, me, offsets } => {
                for chunk in offsets.chunks(OFFSETS_PER_TXN) {
                    let ops = chunk
                        .iter()
                        .map(|o| {
                            let key = self.keys.kafka_group_offset(&group, &o.topic, o.partition);
                            TxnOp::put(key, json(o), None)
                        })
                        .collect();
                    self.fenced(&group, me, ops).await?;
                }
                KafkaGroupAnswer::Done
            }
            KafkaGroupOp::Offsets { group } => {
                let prefix = self.keys.kafka_group_offsets(&group);
                let response = deadline(
                    self.timeout,
                    self.client
                        .get(prefix, Some(GetOptions::new().with_prefix())),
                )
                .await?;
                let offsets = response
                    .kvs()
                    .iter()
                    .filter_map(|kv| serde_json::from_slice::<KafkaOffset>(kv.value()).ok())
                    .collect();
                KafkaGroupAnswer::Offsets(offsets)
            }
            KafkaGroupOp::List => KafkaGroupAnswer::Groups(self.list().await?),
        })
    }

    /// The group's coordinator: the one recorded, or `candidate`, recorded
    /// now under this broker's lease.
    async fn coordinator(
        &mut self,
        group: &str,
        candidate: Holder,
    ) -> Result<Holder, RegistryError> {
        if self.lease == 0 {
            return Err(unavailable(
                "this broker holds no registration lease right now",
            ));
        }
        let key = self.keys.kafka_group_coordinator(group);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                json(&candidate),
                Some(PutOptions::new().with_lease(self.lease)),
            )])
            .or_else([TxnOp::get(key.clone(), None)]);
        let response = deadline(self.timeout, self.client.txn(txn)).await?;
        if response.succeeded() {
            return Ok(candidate);
        }
        for op in response.op_responses() {
            if let etcd_client::TxnOpResponse::Get(get) = op {
                if let Some(kv) = get.kvs().first() {
                    return serde_json::from_slice(kv.value()).map_err(|e| {
                        RegistryError::Corrupt {
                            path: key.clone(),
                            reason: e.to_string(),
                        }
                    });
                }
            }
        }
        Err(unavailable(
            "the coordinator key vanished between the compare and the read",
        ))
    }

    /// Runs `ops` if the coordinator key still names `me`.
    async fn fenced(
        &mut self,
        group: &str,
        me: Holder,
        ops: Vec<TxnOp>,
    ) -> Result<(), RegistryError> {
        let key = self.keys.kafka_group_coordinator(group);
        let txn = Txn::new()
            .when([Compare::value(key, CompareOp::Equal, json(&me))])
            .and_then(ops);
        let response = deadline(self.timeout, self.client.txn(txn)).await?;
        if response.succeeded() {
            Ok(())
        } else {
            Err(RegistryError::NotCoordinator {
                group: group.to_string(),
            })
        }
    }

    /// Every group with a key.
    async fn list(&mut self) -> Result<Vec<String>, RegistryError> {
        let prefix = self.keys.kafka_groups();
        let response = deadline(
            self.timeout,
            self.client.get(
                prefix.clone(),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            ),
        )
        .await?;
        let groups: BTreeSet<String> = response
            .kvs()
            .iter()
            .filter_map(|kv| {
                let key = std::str::from_utf8(kv.key()).ok()?;
                let rest = key.strip_prefix(prefix.as_str())?;
                Some(rest.split('/').next()?.to_string())
            })
            .collect();
        Ok(groups.into_iter().collect())
    }

    /// Deletes a deleted topic's offsets from every group.
    pub async fn forget_topic(&mut self, topic: &str) -> Result<(), RegistryError> {
        for group in self.list().await? {
            let prefix = self.keys.kafka_group_topic_offsets(&group, topic);
            deadline(
                self.timeout,
                self.client.delete(
                    prefix,
                    Some(etcd_client::DeleteOptions::new().with_prefix()),
                ),
            )
            .await?;
        }
        Ok(())
    }
}
