//! Executions, their hash-chained journal and snapshots on PostgreSQL (see `journal.rs` of the
//! store for the contract).
//!
//! Owns the PostgreSQL statements of the `executions`, `execution_plans`, `execution_events`,
//! `snapshots` and `execution_bases` tables. An append locks its execution's row (`for update`) before reading
//! the chain head, so two appenders (connections, processes or replicas) chain one after the
//! other; the summary and the events commit in the same transaction.

use sqlx::PgConnection;

use super::super::lease::check_fence;
use super::super::{
    event_hash, parse_time, AppendOutcome, BindSummary as _, ChainReport, ExecutionBase, ExecutionRow, Fence, Loaded,
    NewEvent, Snapshot, StoreError, StoredEvent, Summary, GENESIS_HASH, SNAPSHOTS_KEPT,
};
use super::Pg;

/// Rows read per page by [`Pg::verify_chain`].
const VERIFY_PAGE: i64 = 1000;

/// Columns of [`StoredEvent`], in struct order.
const EVENT_COLUMNS: &str = "seq, kind, payload, idempotency_key, at, prev_hash, hash";

/// Reads the chain head, or `NotFound`; `lock` takes the execution's row lock.
async fn head(conn: &mut PgConnection, task_id: &str, lock: bool) -> Result<(i64, String), StoreError> {
    let sql = if lock {
        "select last_seq, last_hash from executions where task_id = $1 for update"
    } else {
        "select last_seq, last_hash from executions where task_id = $1"
    };
    sqlx::query_as::<_, (i64, String)>(sql)
        .bind(task_id)
        .fetch_optional(conn)
        .await?
        .ok_or_else(|| StoreError::NotFound { task_id: task_id.to_owned() })
}

/// Events of `task_id` with `seq > after_seq`, in seq order, at most `limit` (`None`: all).
async fn events_after(
    conn: &mut PgConnection,
    task_id: &str,
    after_seq: i64,
    limit: Option<i64>,
) -> Result<Vec<StoredEvent>, StoreError> {
    let sql =
        format!("select {EVENT_COLUMNS} from execution_events where task_id = $1 and seq > $2 order by seq limit $3");
    Ok(sqlx::query_as::<_, StoredEvent>(&sql).bind(task_id).bind(after_seq).bind(limit).fetch_all(conn).await?)
}

impl Pg {
    pub(in super::super) async fn create_execution(
        &self,
        task_id: &str,
        plan_json: &str,
        summary: &Summary,
        at: &str,
    ) -> Result<(), StoreError> {
        parse_time(at)?;
        let mut tx = self.begin_write().await?;
        let inserted = sqlx::query(
            "insert into executions (task_id, status, current_phase, steps_done, steps_total, spend_usd, \
             created_at, updated_at) values ($1, $2, $3, $4, $5, $6, $7, $7) on conflict (task_id) do nothing",
        )
        .bind(task_id)
        .bind_summary(summary)
        .bind(at)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if inserted == 0 {
            return Err(StoreError::AlreadyExists { task_id: task_id.to_owned() });
        }
        sqlx::query("insert into execution_plans (task_id, plan_json) values ($1, $2)")
            .bind(task_id)
            .bind(plan_json)
            .execute(&mut *tx)
            .await?;
        super::lease::put_active_task(&mut tx, task_id).await?;
        tx.commit().await?;
        Ok(())
    }

    /// See [`Store::append`](super::super::Store::append) and
    /// [`Store::append_fenced`](super::super::Store::append_fenced); the events are already
    /// validated. The execution's row lock serialises this append with every takeover (which
    /// locks the same row to move `lease_epoch`), so the fence read here is the lease as of
    /// the commit.
    pub(in super::super) async fn append(
        &self,
        task_id: &str,
        fence: Option<&Fence>,
        events: &[NewEvent],
        summary: &Summary,
    ) -> Result<Vec<AppendOutcome>, StoreError> {
        let mut tx = self.begin_write().await?;
        let (mut last_seq, mut last_hash) = head(&mut tx, task_id, true).await?;
        if let Some(fence) = fence {
            let current = sqlx::query_as::<_, (String, i64)>("select holder, epoch from leases where task_id = $1")
                .bind(task_id)
                .fetch_optional(&mut *tx)
                .await?;
            check_fence(task_id, fence, current)?;
        }
        let mut updated_at = None;
        let mut outcomes = Vec::with_capacity(events.len());
        let mut written = 0;
        for event in events {
            let seq = last_seq + 1;
            let hash = event_hash(&last_hash, seq, &event.kind, &event.payload, &event.idempotency_key, &event.at);
            let inserted = sqlx::query(
                "insert into execution_events (task_id, seq, kind, payload, idempotency_key, at, prev_hash, hash) \
                 values ($1, $2, $3, $4, $5, $6, $7, $8) on conflict (task_id, idempotency_key) do nothing",
            )
            .bind(task_id)
            .bind(seq)
            .bind(&event.kind)
            .bind(&event.payload)
            .bind(&event.idempotency_key)
            .bind(&event.at)
            .bind(&last_hash)
            .bind(&hash)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if inserted == 0 {
                let existing = sqlx::query_scalar::<_, i64>(
                    "select seq from execution_events where task_id = $1 and idempotency_key = $2",
                )
                .bind(task_id)
                .bind(&event.idempotency_key)
                .fetch_one(&mut *tx)
                .await?;
                outcomes.push(AppendOutcome::Duplicate { seq: existing });
                continue;
            }
            last_seq = seq;
            last_hash.clone_from(&hash);
            updated_at = Some(event.at.as_str());
            written += 1;
            outcomes.push(AppendOutcome::Appended { seq, hash });
        }
        sqlx::query(
            "update executions set status = $1, current_phase = $2, steps_done = $3, steps_total = $4, \
             spend_usd = $5, last_seq = $6, last_hash = $7, updated_at = coalesce($8, updated_at) \
             where task_id = $9",
        )
        .bind_summary(summary)
        .bind(last_seq)
        .bind(&last_hash)
        .bind(updated_at)
        .bind(task_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        crate::crash::committed();
        self.count_commit(written);
        Ok(outcomes)
    }

    pub(in super::super) async fn load_with<S: Send>(
        &self,
        task_id: &str,
        with_plan: bool,
        decode: impl FnOnce(&str) -> S + Send,
    ) -> Result<Option<Loaded<S>>, StoreError> {
        let mut tx = self.begin_read().await?;
        let row = sqlx::query_as::<_, (String, String, String, i64, i64, f64, i64, String)>(
            "select created_at, status, current_phase, steps_done, steps_total, spend_usd, last_seq, \
             last_hash from executions where task_id = $1",
        )
        .bind(task_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((created_at, status, current_phase, steps_done, steps_total, spend_usd, last_seq, last_hash)) = row
        else {
            return Ok(None);
        };
        let snapshot =
            sqlx::query("select seq, state_json from snapshots where task_id = $1 order by seq desc limit 1")
                .bind(task_id)
                .fetch_optional(&mut *tx)
                .await?
                .map(|row| Snapshot::from_row(&row, decode))
                .transpose()?;
        let plan_json = if with_plan || snapshot.is_none() {
            Some(
                sqlx::query_scalar::<_, String>("select plan_json from execution_plans where task_id = $1")
                    .bind(task_id)
                    .fetch_one(&mut *tx)
                    .await?,
            )
        } else {
            None
        };
        let after = snapshot.as_ref().map_or(0, |s| s.seq);
        let events_after_snapshot = events_after(&mut tx, task_id, after, None).await?;
        tx.commit().await?;
        Ok(Some(Loaded {
            plan_json,
            created_at,
            snapshot,
            events_after_snapshot,
            summary: Summary { status, current_phase, steps_done, steps_total, spend_usd },
            last_seq,
            last_hash,
        }))
    }

    pub(in super::super) async fn events(&self, task_id: &str, after_seq: i64) -> Result<Vec<StoredEvent>, StoreError> {
        let mut tx = self.begin_read().await?;
        head(&mut tx, task_id, false).await?;
        let events = events_after(&mut tx, task_id, after_seq, None).await?;
        tx.commit().await?;
        Ok(events)
    }

    pub(in super::super) async fn event_by_key(
        &self,
        task_id: &str,
        idempotency_key: &str,
    ) -> Result<Option<StoredEvent>, StoreError> {
        let sql = format!("select {EVENT_COLUMNS} from execution_events where task_id = $1 and idempotency_key = $2");
        Ok(sqlx::query_as::<_, StoredEvent>(&sql)
            .bind(task_id)
            .bind(idempotency_key)
            .fetch_optional(&self.pool)
            .await?)
    }

    pub(in super::super) async fn put_snapshot(
        &self,
        task_id: &str,
        seq: i64,
        state_json: &str,
        at: &str,
    ) -> Result<(), StoreError> {
        if seq < 0 {
            return Err(StoreError::InvalidArgument(format!("snapshot seq {seq} for execution {task_id} is negative")));
        }
        parse_time(at)?;
        let mut tx = self.begin_write().await?;
        let (last_seq, _) = head(&mut tx, task_id, false).await?;
        if seq > last_seq {
            return Err(StoreError::SnapshotAhead { task_id: task_id.to_owned(), seq, last_seq });
        }
        sqlx::query(
            "insert into snapshots (task_id, seq, state_json, at) values ($1, $2, $3, $4) \
             on conflict (task_id, seq) do update set state_json = excluded.state_json, at = excluded.at",
        )
        .bind(task_id)
        .bind(seq)
        .bind(state_json)
        .bind(at)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "delete from snapshots where task_id = $1 and seq not in \
             (select seq from snapshots where task_id = $1 order by seq desc limit $2)",
        )
        .bind(task_id)
        .bind(SNAPSHOTS_KEPT)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(in super::super) async fn record_base(
        &self,
        task_id: &str,
        branch: &str,
        base_sha: &str,
        at: &str,
    ) -> Result<ExecutionBase, StoreError> {
        parse_time(at)?;
        let mut tx = self.begin_write().await?;
        head(&mut tx, task_id, false).await?;
        sqlx::query(
            "insert into execution_bases (task_id, branch, base_sha, recorded_at) values ($1, $2, $3, $4) \
             on conflict (task_id) do nothing",
        )
        .bind(task_id)
        .bind(branch)
        .bind(base_sha)
        .bind(at)
        .execute(&mut *tx)
        .await?;
        let recorded =
            sqlx::query_as::<_, ExecutionBase>("select branch, base_sha from execution_bases where task_id = $1")
                .bind(task_id)
                .fetch_one(&mut *tx)
                .await?;
        tx.commit().await?;
        Ok(recorded)
    }

    pub(in super::super) async fn recorded_base(&self, task_id: &str) -> Result<Option<ExecutionBase>, StoreError> {
        Ok(sqlx::query_as::<_, ExecutionBase>("select branch, base_sha from execution_bases where task_id = $1")
            .bind(task_id)
            .fetch_optional(&self.pool)
            .await?)
    }

    pub(in super::super) async fn summary(&self, task_id: &str) -> Result<Option<Summary>, StoreError> {
        Ok(sqlx::query_as::<_, Summary>(
            "select status, current_phase, steps_done, steps_total, spend_usd from executions where task_id = $1",
        )
        .bind(task_id)
        .fetch_optional(&self.pool)
        .await?)
    }

    pub(in super::super) async fn list_executions(&self) -> Result<Vec<ExecutionRow>, StoreError> {
        let rows = sqlx::query_as::<_, (String, String, String, i64, i64, f64, String, String, i64)>(
            "select task_id, status, current_phase, steps_done, steps_total, spend_usd, created_at, updated_at, \
             last_seq from executions order by ord",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(
                    task_id,
                    status,
                    current_phase,
                    steps_done,
                    steps_total,
                    spend_usd,
                    created_at,
                    updated_at,
                    last_seq,
                )| {
                    ExecutionRow {
                        task_id,
                        summary: Summary { status, current_phase, steps_done, steps_total, spend_usd },
                        created_at,
                        updated_at,
                        last_seq,
                    }
                },
            )
            .collect())
    }

    pub(in super::super) async fn verify_chain(&self, task_id: &str) -> Result<ChainReport, StoreError> {
        let mut tx = self.begin_read().await?;
        let (recorded_seq, recorded_hash) = head(&mut tx, task_id, false).await?;
        let mut count: u64 = 0;
        let mut first_bad: Option<i64> = None;
        let mut prev_seq: i64 = 0;
        let mut prev_hash = GENESIS_HASH.to_owned();
        loop {
            let page = events_after(&mut tx, task_id, prev_seq, Some(VERIFY_PAGE)).await?;
            if page.is_empty() {
                break;
            }
            for event in &page {
                count += 1;
                if first_bad.is_none() {
                    let expected = prev_seq + 1;
                    let recomputed = event_hash(
                        &event.prev_hash,
                        event.seq,
                        &event.kind,
                        &event.payload,
                        &event.idempotency_key,
                        &event.at,
                    );
                    if event.seq != expected {
                        first_bad = Some(expected);
                    } else if event.prev_hash != prev_hash || recomputed != event.hash {
                        first_bad = Some(event.seq);
                    }
                }
                prev_seq = event.seq;
                prev_hash.clone_from(&event.hash);
            }
        }
        tx.commit().await?;
        if first_bad.is_none() {
            if prev_seq < recorded_seq {
                first_bad = Some(prev_seq + 1);
            } else if prev_seq > recorded_seq {
                first_bad = Some(recorded_seq + 1);
            } else if prev_hash != recorded_hash {
                first_bad = Some(prev_seq.max(1));
            }
        }
        Ok(ChainReport { events: count, first_bad_seq: first_bad, ok: first_bad.is_none() })
    }

    pub(in super::super) async fn head_seq(&self, task_id: &str) -> Result<Option<i64>, StoreError> {
        Ok(sqlx::query_scalar::<_, i64>("select last_seq from executions where task_id = $1")
            .bind(task_id)
            .fetch_optional(&self.pool)
            .await?)
    }
}
