//! The control plane: one thread that owns the topic registry.
//!
//! Shards never touch the registry. A CreateTopic or DeleteTopic handler
//! sends the control thread a [`ControlMsg`] and awaits its answer; the
//! control thread changes the registry (an fsync'd file standalone, etcd in
//! a cluster), then tells every shard over its inbox to open or drop its
//! partitions, waits for all of them, and answers. Admin operations are
//! serialised here, one at a time, so two creates of one name can never
//! both succeed and a delete never overtakes the create it follows.
//!
//! The thread runs a current-thread tokio runtime: the registry's futures
//! need not be `Send`, and the etcd client (tokio/tonic) lives here when
//! the broker runs in a cluster. A shard only ever awaits a flume channel,
//! so a slow registry delays admin answers, never produce or fetch.

use crate::config::Config;
use crate::shard::forward::ShardMsg;
use coordinator::placement;
use coordinator::registry::{Registry, RegistryError, TopicRecord};
use protocol::codec::TopicSettings;
use protocol::ErrorCode;
use std::sync::mpsc;

/// What a shard asks of the control thread.
pub enum ControlMsg {
    /// Register a topic and open its partitions on every shard.
    CreateTopic {
        /// The name (already validated by the handler).
        name: String,
        /// Partition count (already validated).
        partitions: u32,
        /// Overrides (already validated against the broker's limits).
        overrides: TopicSettings,
        /// The record as registered, or why not.
        reply: flume::Sender<Result<TopicRecord, ControlError>>,
    },
    /// Unregister a topic and drop its partitions on every shard.
    DeleteTopic {
        /// The name.
        name: String,
        /// Done, or why not.
        reply: flume::Sender<Result<(), ControlError>>,
    },
}

/// Why the control thread refused or failed an operation, as a wire code
/// and words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlError {
    /// The code the client gets.
    pub code: ErrorCode,
    /// What happened.
    pub message: String,
}

impl ControlError {
    fn new(code: ErrorCode, message: impl Into<String>) -> ControlError {
        ControlError {
            code,
            message: message.into(),
        }
    }
}

impl From<RegistryError> for ControlError {
    fn from(error: RegistryError) -> ControlError {
        let code = match &error {
            RegistryError::TopicExists { .. } => ErrorCode::TopicAlreadyExists,
            RegistryError::UnknownTopic { .. } => ErrorCode::UnknownTopic,
            _ => ErrorCode::StorageFailed,
        };
        ControlError::new(code, error.to_string())
    }
}

/// The running control thread.
pub struct Control {
    /// Where shards send their requests (each shard holds a clone).
    pub requests: flume::Sender<ControlMsg>,
    stop: flume::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Control {
    /// Ends the control thread once its current operation is done (or
    /// abandoned, if it waits on a shard that has stopped) and joins it.
    pub fn stop(self) {
        let _ = self.stop.send(());
        drop(self.requests);
        if self.thread.join().is_err() {
            tracing::error!("the control thread panicked");
        }
    }
}

/// Starts the control thread with the registry `open` builds on it, and
/// returns the registered topics once it has loaded them.
pub fn start<R, F>(
    config: &Config,
    shards: Vec<flume::Sender<ShardMsg>>,
    open: F,
) -> anyhow::Result<(Control, Vec<TopicRecord>)>
where
    R: Registry + 'static,
    F: FnOnce() -> Result<R, RegistryError> + Send + 'static,
{
    let (requests, inbox) = flume::bounded::<ControlMsg>(crate::limits::CONTROL_QUEUE_MAX);
    let (stop, stopped) = flume::bounded::<()>(1);
    let (loaded_tx, loaded_rx) = mpsc::channel::<Result<Vec<TopicRecord>, RegistryError>>();
    let config = config.clone();
    let thread = std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(error) => {
                    let _ = loaded_tx.send(Err(RegistryError::Io {
                        op: "starting the control runtime",
                        path: config.data_dir.clone(),
                        source: error,
                    }));
                    return;
                }
            };
            runtime.block_on(async move {
                let mut registry = match open() {
                    Ok(registry) => registry,
                    Err(error) => {
                        let _ = loaded_tx.send(Err(error));
                        return;
                    }
                };
                match registry.topics().await {
                    Ok(topics) => {
                        let _ = loaded_tx.send(Ok(topics));
                    }
                    Err(error) => {
                        let _ = loaded_tx.send(Err(error));
                        return;
                    }
                }
                let mut plane = ControlPlane {
                    registry,
                    shards,
                    me: config.broker_id,
                };
                plane.serve(inbox, stopped).await;
            });
        })?;
    let topics = match loaded_rx.recv() {
        Ok(Ok(topics)) => topics,
        Ok(Err(error)) => {
            let _ = thread.join();
            return Err(anyhow::Error::new(error).context("loading the topic registry"));
        }
        Err(_) => {
            let _ = thread.join();
            anyhow::bail!("the control thread ended while loading the topic registry");
        }
    };
    Ok((
        Control {
            requests,
            stop,
            thread,
        },
        topics,
    ))
}

struct ControlPlane<R> {
    registry: R,
    shards: Vec<flume::Sender<ShardMsg>>,
    me: protocol::types::BrokerId,
}

impl<R: Registry> ControlPlane<R> {
    async fn serve(&mut self, inbox: flume::Receiver<ControlMsg>, stopped: flume::Receiver<()>) {
        loop {
            let next = futures_lite::future::or(async { inbox.recv_async().await.ok() }, async {
                let _ = stopped.recv_async().await;
                None
            })
            .await;
            let Some(msg) = next else { return };
            // An operation waits on shards; a stop while it waits abandons
            // it (its reply channel drops, and the shard answers
            // SHUTTING_DOWN) instead of hanging on a shard that has exited.
            let operation = self.handle(msg);
            let abandoned = async {
                let _ = stopped.recv_async().await;
            };
            if futures_lite::future::or(
                async {
                    operation.await;
                    false
                },
                async {
                    abandoned.await;
                    true
                },
            )
            .await
            {
                return;
            }
        }
    }

    async fn handle(&mut self, msg: ControlMsg) {
        match msg {
            ControlMsg::CreateTopic {
                name,
                partitions,
                overrides,
                reply,
            } => {
                let result = self.create_topic(&name, partitions, overrides).await;
                let _ = reply.send_async(result).await;
            }
            ControlMsg::DeleteTopic { name, reply } => {
                let result = self.delete_topic(&name).await;
                let _ = reply.send_async(result).await;
            }
        }
    }

    async fn create_topic(
        &mut self,
        name: &str,
        partitions: u32,
        overrides: TopicSettings,
    ) -> Result<TopicRecord, ControlError> {
        let brokers = self.registry.live_brokers().await?;
        if !brokers.contains(&self.me) {
            return Err(ControlError::new(
                ErrorCode::Internal,
                format!(
                    "broker {} is not among the live brokers {brokers:?}",
                    self.me
                ),
            ));
        }
        let owners = placement::spread(name, partitions, &brokers);
        let record = TopicRecord::new(name, overrides, owners);
        self.registry.create_topic(record.clone()).await?;
        let mut failures = Vec::new();
        for shard in &self.shards {
            let (done, result) = flume::bounded(1);
            let msg = ShardMsg::TopicCreated {
                topic: record.clone(),
                done,
            };
            if shard.send_async(msg).await.is_err() {
                failures.push("a shard has stopped".to_string());
                continue;
            }
            match result.recv_async().await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => failures.push(error),
                Err(_) => failures.push("a shard has stopped".to_string()),
            }
        }
        if !failures.is_empty() {
            return Err(ControlError::new(
                ErrorCode::StorageFailed,
                failures.join("; "),
            ));
        }
        tracing::info!(topic = %name, partitions, "created topic");
        Ok(record)
    }

    async fn delete_topic(&mut self, name: &str) -> Result<(), ControlError> {
        self.registry.delete_topic(name).await?;
        for shard in &self.shards {
            let (done, finished) = flume::bounded(1);
            let msg = ShardMsg::TopicDeleted {
                name: name.to_string(),
                done,
            };
            if shard.send_async(msg).await.is_ok() {
                let _ = finished.recv_async().await;
            }
        }
        tracing::info!(topic = %name, "deleted topic");
        Ok(())
    }
}
