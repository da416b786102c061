//! The store's connection to the server, replaced when a reply does not come in time.
//!
//! The `redis` crate's connection manager reconnects only on errors that say the connection
//! dropped (reset, broken pipe, end of file). A half-open TCP connection (the server's host
//! gone, a NAT or firewall that forgot the flow, a proxy that holds it) says nothing: every
//! request on it times out, for good, and the manager keeps it. So a request whose reply did
//! not come (the crate's response timeout, or the caller's own timeout dropping the request)
//! puts the connection in doubt, and the next request goes on a new one. Requests already on
//! the old connection finish there or time out; the old connection closes when they are gone.

use std::future::Future;
use std::sync::{Mutex, MutexGuard};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, RedisError};

/// The current connection and the client and settings to open the next one with.
pub(super) struct Connection {
    client: Client,
    config: ConnectionManagerConfig,
    current: Mutex<Current>,
}

struct Current {
    /// Counts replacements, so that many requests timing out on one connection replace it once.
    generation: u64,
    manager: ConnectionManager,
}

impl Connection {
    /// Wraps a connection opened from `client` with `config`.
    pub(super) fn new(
        client: Client,
        config: ConnectionManagerConfig,
        manager: ConnectionManager,
    ) -> Self {
        Self {
            client,
            config,
            current: Mutex::new(Current {
                generation: 0,
                manager,
            }),
        }
    }

    fn current(&self) -> MutexGuard<'_, Current> {
        // The lock is never held across an await or a panic-prone call; recover anyway.
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many times the connection was replaced.
    pub(super) fn replacements(&self) -> u64 {
        self.current().generation
    }

    /// Runs `request` on the current connection. A reply that timed out, or a request
    /// dropped before its reply came, replaces the connection for the requests after it.
    pub(super) async fn run<T, F, Fut>(&self, request: F) -> Result<T, RedisError>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let (generation, manager) = {
            let current = self.current();
            (current.generation, current.manager.clone())
        };
        let mut waiting = Waiting {
            connection: self,
            generation,
            replied: false,
        };
        let result = request(manager).await;
        waiting.replied = !matches!(&result, Err(err) if err.is_timeout());
        result
    }

    /// Replaces the connection of `generation` unless that was done already.
    fn replace(&self, generation: u64) {
        let mut current = self.current();
        if current.generation != generation {
            return;
        }
        // Lazy: nothing is awaited here; the next request connects.
        match ConnectionManager::new_lazy_with_config(self.client.clone(), self.config.clone()) {
            Ok(manager) => {
                *current = Current {
                    generation: generation + 1,
                    manager,
                };
                tracing::debug!(
                    replacements = generation + 1,
                    "a Redis reply did not come in time: the next request opens a new connection"
                );
            }
            // Only a configuration the first connect already accepted gets here.
            Err(err) => tracing::warn!(error = %err, "cannot open a new Redis connection"),
        }
    }
}

/// A request waiting for its reply: dropped before one came (or with a timeout), it puts
/// the connection in doubt.
struct Waiting<'a> {
    connection: &'a Connection,
    generation: u64,
    replied: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.replied {
            self.connection.replace(self.generation);
        }
    }
}
