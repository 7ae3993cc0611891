//! Remediation of an open pull request (issue 19.3/4): CI fix rounds and review rounds.
//!
//! Once a completed execution's pull request is open (its spec stands in `pr_open`), a
//! required check of the pull request's head that fails starts a **CI fix round**: the
//! execution is reopened the way an amendment reopens one (`remediation_started`: a fix phase
//! whose one step goes to the agent that made the change, or `[ci] fixer`), the step runs in a
//! worktree at the feature branch's tip (the pull request's head), its commit is consolidated
//! and pushed to the same branch, never forced (`remediation_pushed`, by the driver), and the
//! execution completes again. A reviewer's requested change starts a **review round** the
//! same way (the operator service decides who may ask: `runtime::ops`), and after the push
//! Baton replies on each review comment with the commit that addressed it
//! (`runtime::fixes::reply_threads`). Rounds are bounded per pull request and cause (`[ci]
//! max_fix_rounds`, `[review] max_rounds`, per project; default 2 each, counted apart); past
//! the bound Baton parks (`remediation_parked`), the report-back asks a human on the source
//! item and the card says so.
//!
//! This module decides whether a CI notice starts a round ([`Remediation::ci_notice`]): the
//! pull request must be Baton's, open, its spec executing and its execution complete; what
//! failed is read from the forge's API (never taken from the delivery). A lost webhook loses
//! nothing: the periodic pass ([`Remediation::run`], one replica at a time on PostgreSQL)
//! reads the checks of every open pull request's head with backoff (`[ci] pr_poll_secs`
//! doubling to `pr_max_poll_secs`, restarted by any CI webhook about it; the schedule is kept
//! in the store, `pr_polls`, so a restart or another replica goes on with it) and starts the
//! same round through the same path, and starts the review round that queued review comments wait
//! for. A review is read into its comments with their file and line context
//! ([`Remediation::review`]: a GitHub review's line comments, an Azure DevOps thread's
//! context) before the operator service decides. Recording goes through the operator service;
//! the prompt is `runtime::fixes`'. It never parses HTTP.

use std::collections::HashMap;
use std::time::Duration;

use crate::clock::Clock;
use crate::forge::checks::CheckDetail;
use crate::forge::{ForgeError, RepoRef};
use crate::model::state::{ExecutionStatus, RemediationCause};
use crate::runtime::ci_events::CiNotice;
use crate::runtime::executions::Executions;
use crate::runtime::fixes::{ci_prompt, failed_required, FailedCheck, ReviewComment};
use crate::runtime::forge::Forges;
use crate::runtime::ops::{Ops, ReviewRequest, RoundOutcome, RoundRequest};
use crate::store::{MergeRow, PrPollRow};

/// The CI side of remediation: which open pull request a CI notice concerns, whether its
/// failing checks start a round, and the periodic pass that polls the checks a lost webhook
/// would have announced. Cheap to clone. The poll schedule lives in the store (`pr_polls`),
/// shared by every replica.
#[derive(Debug, Clone)]
pub struct Remediation {
    execs: Executions,
    ops: Ops,
    forges: Forges,
}

/// Longest pause between two passes of [`Remediation::run`].
const MAX_TICK: Duration = Duration::from_secs(5);

impl Remediation {
    /// A service recording through `ops`, reading the forges through `forges`.
    pub fn new(execs: Executions, ops: Ops, forges: Forges) -> Remediation {
        Remediation { execs, ops, forges }
    }

    /// The same service reading the forges through `forges`.
    #[must_use]
    pub fn with_forges(mut self, forges: Forges) -> Remediation {
        self.forges = forges;
        self
    }

    fn clock(&self) -> &Clock {
        self.ops.clock()
    }

    /// The poll intervals: `[ci] pr_poll_secs` and `pr_max_poll_secs` (at least 1 s each).
    fn intervals(&self) -> (Duration, Duration) {
        let ci = self.execs.data().config().map(|c| c.ci).unwrap_or_default();
        let first = Duration::from_secs(ci.pr_poll_secs.max(1));
        (first, Duration::from_secs(ci.pr_max_poll_secs.max(1)).max(first))
    }

    /// The schedule of `task_id`'s pull request at `sha`: next poll at `now + interval`, the
    /// one after `interval` later.
    fn poll_row(&self, task_id: &str, sha: &str, interval: Duration, then: Duration) -> PrPollRow {
        let next = self.clock().now() + chrono::Duration::from_std(interval).unwrap_or_default();
        PrPollRow {
            task_id: task_id.to_string(),
            sha: sha.to_string(),
            interval_ms: i64::try_from(then.as_millis()).unwrap_or(i64::MAX),
            next_at: next.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        }
    }

    /// A webhook spoke about `task_id`'s pull request at `sha`: its next poll is one first
    /// interval away again (in the store: every replica's pass reads it).
    ///
    /// Errors: the database.
    async fn restart_poll(&self, task_id: &str, sha: &str) -> anyhow::Result<()> {
        let (first, _) = self.intervals();
        self.execs.store().put_pr_poll(&self.poll_row(task_id, sha, first, first)).await?;
        Ok(())
    }

    /// Runs [`Remediation::pass`] every few seconds (at most 5 s apart, sooner when
    /// `[ci] pr_poll_secs` is shorter) until `closing` turns true. With several replicas on one
    /// PostgreSQL database one replica's pass runs at a time (the `pr-checks` cluster job's
    /// advisory lock): the others skip theirs. A failing pass is logged and the next one tries
    /// again.
    pub async fn run(self, mut closing: tokio::sync::watch::Receiver<bool>) {
        loop {
            match self.execs.store().cluster_job("pr-checks").await {
                Ok(Some(job)) => {
                    if let Err(e) = self.pass().await {
                        tracing::warn!("pull request checks pass failed: {e:#}");
                    }
                    job.done().await;
                }
                Ok(None) => {}
                Err(e) => tracing::warn!("pull request checks pass not started: {e}"),
            }
            let tick = self.intervals().0.min(MAX_TICK);
            tokio::select! {
                () = tokio::time::sleep(tick) => {}
                _ = closing.wait_for(|c| *c) => return,
            }
        }
    }

    /// One pass over the open pull requests: a review round starts for the comments that
    /// queued while the last round ran, once it completed; and the checks of each pull
    /// request's head are read when its poll is due (a new head is first read one
    /// `pr_poll_secs` after it is seen; each poll doubles the interval up to
    /// `pr_max_poll_secs`), a failed required check starting a CI fix round through the same
    /// path as the webhook (one round per head, whichever comes first). Returns what started
    /// or parked, per execution.
    ///
    /// Errors: the database.
    pub async fn pass(&self) -> anyhow::Result<Vec<(String, RoundOutcome)>> {
        let (first, max) = self.intervals();
        let store = self.execs.store();
        let rows = store.opened_merges().await?;
        store.prune_pr_polls().await?;
        let polls: HashMap<String, PrPollRow> =
            store.pr_polls().await?.into_iter().map(|p| (p.task_id.clone(), p)).collect();
        let mut out = Vec::new();
        for row in rows {
            if let Some(outcome) = self.ops.start_queued_review(&row.task_id).await? {
                tracing::info!(task.id = %row.task_id, "queued review comments: {outcome:?}");
                out.push((row.task_id.clone(), outcome));
                continue;
            }
            let now = self.clock().now();
            let due = match polls.get(&row.task_id).filter(|p| p.sha == row.pushed_sha) {
                None => {
                    // A new head (or one no pass saw yet): CI needs a moment to report on it.
                    store.put_pr_poll(&self.poll_row(&row.task_id, &row.pushed_sha, first, first)).await?;
                    false
                }
                Some(poll) => {
                    let next = chrono::DateTime::parse_from_rfc3339(&poll.next_at)
                        .map_or(now, |t| t.with_timezone(&chrono::Utc));
                    let interval =
                        Duration::from_millis(u64::try_from(poll.interval_ms).unwrap_or_default()).clamp(first, max);
                    let due = now >= next;
                    if due {
                        let then = (interval * 2).min(max);
                        store.put_pr_poll(&self.poll_row(&row.task_id, &row.pushed_sha, interval, then)).await?;
                    }
                    due
                }
            };
            if !due {
                continue;
            }
            let outcome = self.check_pull(&row).await?;
            match &outcome {
                RoundOutcome::Ignored(why) => tracing::debug!(task.id = %row.task_id, "polled checks: {why}"),
                other => {
                    tracing::info!(task.id = %row.task_id, "polled checks of {}: {other:?}", row.pushed_sha);
                    out.push((row.task_id.clone(), outcome));
                }
            }
        }
        Ok(out)
    }

    /// A review on (or comment in) a Baton pull request, as the webhook door read it: a GitHub
    /// review's line comments (`GET /repos/{o}/{r}/pulls/{n}/reviews/{id}/comments`) — for a
    /// line comment's delivery, those of the review it belongs to, and that review's body when
    /// it requests changes (`GET …/reviews/{id}`), so a review whose comments are delivered
    /// before it is answered by one round — and an
    /// Azure DevOps thread's file and line (`threadContext`) are read from the forge's API
    /// and added to it; then the operator service decides whether it starts a round, waits
    /// for the next one, or stops the loop. A forge failure leaves the comments as the
    /// delivery gave them.
    ///
    /// Errors: as [`Ops::review_remediation`].
    pub async fn review(
        &self,
        mut request: ReviewRequest,
    ) -> Result<Result<(String, RoundOutcome), String>, crate::runtime::ops::OpsError> {
        if !request.own && !request.stop {
            if let Err(e) = self.add_context(&mut request).await {
                tracing::warn!("reading the review's comments from the forge: {e}");
            }
        }
        self.ops.review_remediation(request).await
    }

    /// Adds what the forge's API knows of `request`'s comments (see [`Remediation::review`]).
    async fn add_context(&self, request: &mut ReviewRequest) -> anyhow::Result<()> {
        let branch = request.branch.strip_prefix("refs/heads/").unwrap_or(&request.branch);
        let Some(task_id) = branch.strip_prefix("baton/").filter(|t| !t.is_empty()) else { return Ok(()) };
        let Some(merge) = self.execs.store().merge(task_id).await? else { return Ok(()) };
        let Some(number) = merge.pr_number.and_then(|n| u64::try_from(n).ok()) else { return Ok(()) };
        match RepoRef::parse(&merge.forge_repo)? {
            RepoRef::GitHub { owner, repo } => {
                let Some(review_id) = request.review_id else { return Ok(()) };
                let github = self.forges.github();
                // The review itself: a line comment's delivery often comes before the review's,
                // and its body belongs in the same round. Only a review that requests changes,
                // by the same author, adds its body.
                let body_id = crate::runtime::fixes::review_body_id(review_id);
                if !request.comments.iter().any(|k| k.id == body_id) {
                    match github.review(&owner, &repo, number, review_id).await {
                        Ok(r)
                            if r.state == "changes_requested"
                                && !r.body.is_empty()
                                && r.author.eq_ignore_ascii_case(&request.identity.1) =>
                        {
                            request.comments.insert(
                                0,
                                ReviewComment {
                                    id: body_id,
                                    path: String::new(),
                                    line: None,
                                    diff_hunk: String::new(),
                                    body: r.body,
                                    author: r.author,
                                },
                            );
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!("reading review {review_id} from the forge: {e}"),
                    }
                }
                let found = github.review_comments(&owner, &repo, number, review_id).await?;
                for c in found {
                    let id = c.id.to_string();
                    if !request.comments.iter().any(|k| k.id == id) {
                        request.comments.push(ReviewComment {
                            id,
                            path: c.path,
                            line: c.line,
                            diff_hunk: c.diff_hunk,
                            body: c.body,
                            author: c.author,
                        });
                    }
                }
            }
            RepoRef::Ado { org, project, repository } => {
                for c in request.comments.iter_mut().filter(|c| !c.id.is_empty() && c.path.is_empty()) {
                    let Ok(thread) = c.id.parse::<u64>() else { continue };
                    let (path, line) =
                        self.forges.ado().thread_context(&org, &project, &repository, number, thread).await?;
                    c.path = path;
                    c.line = line;
                }
            }
        }
        Ok(())
    }

    /// A forge said something about CI: every open Baton pull request whose head is the
    /// notice's commit (or whose branch it names) has its checks read, and a failed required
    /// check starts a fix round (or parks, past the bound). Returns what happened per execution
    /// (none: the notice concerned no open pull request).
    ///
    /// Errors: the database; a forge failure is an outcome ([`RoundOutcome::Ignored`]).
    pub async fn ci_notice(&self, notice: &CiNotice) -> anyhow::Result<Vec<(String, RoundOutcome)>> {
        let sha = notice.sha.as_deref().map(str::to_ascii_lowercase);
        let mut out = Vec::new();
        for row in self.execs.store().opened_merges().await? {
            let named = sha.as_deref().is_some_and(|s| !s.is_empty() && row.pushed_sha.eq_ignore_ascii_case(s))
                || notice.branches.contains(&row.branch);
            if named {
                self.restart_poll(&row.task_id, &row.pushed_sha).await?;
                let outcome = self.check_pull(&row).await?;
                out.push((row.task_id.clone(), outcome));
            }
        }
        Ok(out)
    }

    /// Reads the checks of the head of `row`'s pull request and starts a fix round when a
    /// required one failed.
    ///
    /// Errors: the database.
    pub async fn check_pull(&self, row: &MergeRow) -> anyhow::Result<RoundOutcome> {
        let task_id = &row.task_id;
        let store = self.execs.store();
        let Some(spec) = store.spec_of_execution(task_id).await? else {
            return Ok(RoundOutcome::Ignored(format!("execution {task_id} came from no spec")));
        };
        if spec.status != "executing" {
            return Ok(RoundOutcome::Ignored(format!("spec {} is {}", spec.spec_id, spec.status)));
        }
        let Some(state) = self.execs.load(task_id).await? else {
            return Ok(RoundOutcome::Ignored(format!("no execution {task_id}")));
        };
        if state.status != ExecutionStatus::Complete {
            return Ok(RoundOutcome::Ignored(format!(
                "execution {task_id} is {}: a round starts only on a completed execution",
                state.status.as_str()
            )));
        }
        if let Some(why) = &state.remediation.parked {
            return Ok(RoundOutcome::Ignored(format!("remediation of {task_id} is parked: {why}")));
        }
        let head = row.pushed_sha.clone();
        let key = format!("remediation:{task_id}:ci:{head}");
        if self.execs.key_applied(&state, &key).await? {
            return Ok(RoundOutcome::Ignored(format!("a ci round for {head} already started")));
        }
        let config = self.execs.data().config()?;
        let ci = config.ci_for(Some(&spec.project));
        let checks =
            match crate::runtime::ci::read_checks(self.forges.settings(), &row.forge_repo, &row.branch, &head).await {
                Ok(c) => c,
                Err(e) => return Ok(RoundOutcome::Ignored(format!("reading the checks of {head}: {e}"))),
            };
        let failed = failed_required(&checks, &ci.required);
        if failed.is_empty() {
            return Ok(RoundOutcome::Ignored(format!("no required check of {head} failed")));
        }
        let details = match self.details(&row.forge_repo, &row.branch, &head).await {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(task.id = %task_id, "reading what the failed checks of {head} say: {e}");
                Vec::new()
            }
        };
        let failed: Vec<FailedCheck> = failed
            .iter()
            .map(|c| FailedCheck {
                name: c.name.clone(),
                summary: c.summary.clone(),
                details: details.iter().find(|d| d.name == c.name).map(|d| d.text.clone()).unwrap_or_default(),
            })
            .collect();
        let round = state.remediation.used(RemediationCause::Ci) + 1;
        let prompt = ci_prompt(&row.pr_url, &head, &failed, round, ci.max_fix_rounds);
        let request = RoundRequest {
            cause: RemediationCause::Ci,
            sha: head.clone(),
            prompt,
            threads: Vec::new(),
            key,
            queued: 0,
        };
        Ok(self.ops.start_remediation(task_id, request).await?)
    }

    /// What the failed checks of `sha` say beyond their summaries (GitHub: output text and
    /// annotations; Azure DevOps: the tail of each failed task's build log).
    async fn details(&self, forge_repo: &str, branch: &str, sha: &str) -> Result<Vec<CheckDetail>, ForgeError> {
        match RepoRef::parse(forge_repo)? {
            RepoRef::GitHub { owner, repo } => self.forges.github().failed_check_details(&owner, &repo, sha).await,
            RepoRef::Ado { org, project, .. } => {
                self.forges.ado().failed_build_details(&org, &project, branch, sha).await
            }
        }
    }
}
