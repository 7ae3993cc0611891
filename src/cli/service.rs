//! The CLI's doors to the runtime services for one command: open the service a one-shot
//! process needs, run the command over it, and always end it for the process's exit, so that
//! no command leaves the store's WAL long for the next process to read back (issue 14.8).
//!
//! Owns: [`with_operator_service`] (the `execute` family, approval links) and
//! [`with_executions`] (every other command that reads or writes executions). Never decides
//! anything or prints: the commands do, through the services.

use crate::runtime::app::{App, AppConfig};
use crate::runtime::config::DataDir;
use crate::runtime::executions::Executions;
use crate::runtime::ops::Ops;
use crate::store::Workload;

/// Runs `command` over the operator service of a one-shot process over `data`, from the
/// composition root (its pool stays idle: a driver in another process is reached through the
/// lease), then ends that service for the process's exit ([`Ops::close_for_exit`]) whatever
/// `command` returned.
pub(super) async fn with_operator_service<T>(
    data: DataDir,
    command: impl AsyncFnOnce(&Ops) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let config = AppConfig::new(data.root()).one_shot();
    let ops = App::build_in(data, config).await?.ops;
    let done = command(&ops).await;
    ops.close_for_exit().await;
    done
}

/// Runs `command` over the execution service of a one-shot process over `data`
/// ([`Workload::OneShot`]: one reader, no journal thread),
/// then ends it for the process's exit ([`Executions::close_for_exit`]:
/// a WAL its writes made long is emptied, so the next CLI process does not read it back)
/// whatever `command` returned. The door of every CLI command that needs the executions but
/// not the operator service (`replay`, `audit verify`, `gc`, `token`, `spec import`, `merge`,
/// `goal`'s check, `daemon start`'s).
pub(super) async fn with_executions<T>(
    data: DataDir,
    command: impl AsyncFnOnce(&Executions) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let execs = Executions::open_for(data, Workload::OneShot).await?;
    let done = command(&execs).await;
    execs.close_for_exit().await;
    done
}
