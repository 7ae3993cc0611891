//! Which waiting `ci` gate a forge webhook concerns (issue 19.2): the door (`web::webhooks`)
//! only parses a `check_run`, `check_suite`, `status` or `build.complete` delivery into a
//! [`CiNotice`] and calls [`CiService::notice`], which finds the executions whose ci gate waits
//! for that commit or branch (migration 0015's table) and wakes their drivers, so they read the
//! checks now instead of at their next poll. What the checks say is never taken from the
//! delivery: the driver reads the forge's API (`runtime::ci`). It never touches HTTP.

use crate::runtime::executions::Executions;
use crate::runtime::pool::Pool;

/// What a webhook delivery says about CI (parsed by the door, decided here).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CiNotice {
    /// The commit the delivery is about, when it names one.
    pub sha: Option<String>,
    /// The branches it names (`baton/<task_id>`, without `refs/heads/`).
    pub branches: Vec<String>,
}

/// The CI side of webhook deliveries: wakes the drivers whose ci gate waits for what a
/// delivery names. Cheap to clone.
#[derive(Debug, Clone)]
pub struct CiService {
    execs: Executions,
    pool: Pool,
}

impl CiService {
    /// A service over `execs` waking `pool`'s drivers.
    pub fn new(execs: Executions, pool: Pool) -> CiService {
        CiService { execs, pool }
    }

    /// A forge said something about CI: every execution whose ci gate waits for the commit
    /// (or the `baton/<task_id>` branch) the notice names has its driver woken, so it reads
    /// the checks now. Returns the executions woken (none: the delivery concerned no wait).
    ///
    /// Errors: the database.
    pub async fn notice(&self, notice: &CiNotice) -> anyhow::Result<Vec<String>> {
        let rows = self.execs.store().ci_waits_for(notice.sha.as_deref(), &notice.branches).await?;
        let mut woken = Vec::new();
        for row in rows {
            // Its driver reads the checks now (one driven by another process polls on).
            self.pool.wake(&row.task_id);
            woken.push(row.task_id);
        }
        Ok(woken)
    }
}
