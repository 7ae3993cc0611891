//! `baton gc`: removes the worktrees and kept attempt refs (`refs/baton/<task_id>/…`) of
//! final executions.
//!
//! Only executions that are `complete`, `cancelled` or `failed` and whose last update is older
//! than the cut-off are touched; live executions never are. Run directories stay (they are the
//! audit trail of each attempt).

use anyhow::Context as _;
use chrono::{DateTime, Utc};

use crate::clock;
use crate::git::{self, GitRepo};
use crate::runtime::blocking;
use crate::runtime::executions::Executions;
use crate::runtime::runs::RunMeta;

/// Removes worktrees of final executions last updated more than `hours` ago; returns how many.
pub async fn collect(execs: &Executions, hours: u64) -> anyhow::Result<usize> {
    let cutoff = clock::now() - chrono::Duration::hours(i64::try_from(hours).unwrap_or(i64::MAX / 3600));
    let mut removed = 0;
    for row in execs.store().list_executions().await? {
        if !matches!(row.summary.status.as_str(), "complete" | "cancelled" | "failed") {
            continue;
        }
        let updated = DateTime::parse_from_rfc3339(&row.updated_at).map(|t| t.with_timezone(&Utc));
        if updated.map_or(true, |t| t > cutoff) {
            continue;
        }
        let dir = execs.data().worktrees(&row.task_id);
        if !dir.exists() {
            continue;
        }
        let meta_path = crate::runtime::runs::meta_path(execs.data(), &row.task_id);
        let repo = std::fs::read_to_string(&meta_path)
            .ok()
            .and_then(|t| serde_json::from_str::<RunMeta>(&t).ok())
            .and_then(|m| GitRepo::open(&m.repo).ok());
        let entries: Vec<_> = std::fs::read_dir(&dir)
            .with_context(|| format!("listing {}", dir.display()))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        for wt in entries {
            let repo = repo.clone();
            let path = wt.clone();
            let ok = blocking(move || match &repo {
                Some(r) => r.remove_worktree(&path).is_ok(),
                None => std::fs::remove_dir_all(&path).is_ok(),
            })
            .await?;
            if ok {
                removed += 1;
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        if let Some(r) = repo {
            let prefix = git::attempt_refs_of(&row.task_id);
            let _ = blocking(move || {
                let _ = r.delete_refs_under(&prefix);
                r.prune_worktrees()
            })
            .await;
        }
    }
    Ok(removed)
}
