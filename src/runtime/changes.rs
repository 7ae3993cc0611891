//! The change bell: rings when any replica commits a journal append or a board change, so live
//! streams wake at once instead of at their next poll.
//!
//! On PostgreSQL a task listens for the store's notifications
//! ([`Store::listen_changes`](crate::store::Store::listen_changes)) and bumps a counter for each;
//! when the listening connection fails it listens again after a pause (notifications sent
//! meanwhile are missed, which is why streams keep polling as their fallback). On SQLite the
//! bell never rings: one machine, and the streams' polling sees every change. This module never
//! reads what changed; a stream re-reads the database when woken.

use std::time::Duration;

use tokio::sync::watch;

use crate::runtime::executions::Executions;
use crate::store::Store;

/// Pause before listening again after the listener failed.
const RELISTEN_AFTER: Duration = Duration::from_secs(1);

/// A receiver that changes whenever a change was committed anywhere (cheap to clone).
#[derive(Debug, Clone)]
pub struct Bell {
    rung: watch::Receiver<u64>,
    /// Keeps the channel open, so a waiter never sees it closed (which would end every wait at
    /// once).
    _ringer: std::sync::Arc<watch::Sender<u64>>,
}

impl Bell {
    /// A bell that never rings (SQLite, tests).
    pub fn silent() -> Bell {
        let (tx, rung) = watch::channel(0);
        Bell { rung, _ringer: std::sync::Arc::new(tx) }
    }

    /// Starts listening on the store of `execs` (PostgreSQL; a silent bell on SQLite) until
    /// `closing` turns true.
    pub fn start(execs: &Executions, mut closing: watch::Receiver<bool>) -> Bell {
        let store: Store = execs.store().clone();
        if store.backend_name() != "postgres" {
            return Bell::silent();
        }
        let (tx, rung) = watch::channel(0u64);
        let ringer = std::sync::Arc::new(tx);
        let tx = ringer.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            loop {
                if *closing.borrow() {
                    return;
                }
                let mut listener = match store.listen_changes().await {
                    Ok(Some(l)) => l,
                    Ok(None) => return,
                    Err(e) => {
                        tracing::warn!("listening for changes: {e}; polling meanwhile");
                        tokio::select! {
                            () = tokio::time::sleep(RELISTEN_AFTER) => continue,
                            _ = closing.changed() => return,
                        }
                    }
                };
                loop {
                    tokio::select! {
                        change = listener.recv() => match change {
                            Ok(_) => {
                                n = n.wrapping_add(1);
                                tx.send_replace(n);
                            }
                            Err(e) => {
                                tracing::warn!("listening for changes: {e}; listening again");
                                break;
                            }
                        },
                        _ = closing.changed() => return,
                    }
                }
                tokio::time::sleep(RELISTEN_AFTER).await;
            }
        });
        Bell { rung, _ringer: ringer }
    }

    /// Waits until the bell rings or `limit` passes, whichever comes first.
    pub async fn wait(&mut self, limit: Duration) {
        tokio::select! {
            _ = self.rung.changed() => {}
            () = tokio::time::sleep(limit) => {}
        }
    }
}
