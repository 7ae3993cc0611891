//! Remediation rounds (part of the operator service, see `ops`; issue 19.3/4): starting a
//! round on a completed execution whose pull request is open, within its bound, or parking
//! past it ([`Ops::start_remediation`]); and deciding whether a review comment may start a
//! round or stop the loop ([`Ops::review_remediation`]): only a forge user mapped to a Baton
//! user with the reviewer role or above, never Baton's own account, never an unmapped user.
//! It never parses webhook payloads and never calls a forge.

use super::*;

use crate::model::state::{QueuedComment, RemediationCause, ReviewThread};
use crate::runtime::fixes::{agent_of_change, review_prompt, ReviewComment};

/// A round to start.
#[derive(Debug, Clone)]
pub struct RoundRequest {
    /// Why.
    pub cause: RemediationCause,
    /// The pull request head it fixes.
    pub sha: String,
    /// The fix step's prompt.
    pub prompt: String,
    /// The review comments it answers.
    pub threads: Vec<ReviewThread>,
    /// Its idempotency key (one round per head and cause, whichever delivery asks first).
    pub key: String,
    /// How many queued review comments (oldest first) its prompt answers: they leave the queue.
    pub queued: u32,
}

/// What a request for a round did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoundOutcome {
    /// A round started: its number among its cause's rounds and the agent it went to.
    Started {
        /// Round number (1-based, per cause).
        round: u32,
        /// The fix step's agent.
        agent: String,
    },
    /// The bound was reached (or a reviewer said stop): Baton parked and asks a human.
    Parked(String),
    /// A round runs: the review comments wait, journaled, for the next round (how many wait).
    Queued(usize),
    /// Nothing happened, and why (a round runs, already parked, the same head again, …).
    Ignored(String),
}

/// A review on (or comment in) a Baton pull request, as the webhook door read it.
#[derive(Debug, Clone)]
pub struct ReviewRequest {
    /// `github` or `ado`.
    pub forge: &'static str,
    /// Who wrote it: their forge identity (GitHub login, Azure DevOps e-mail).
    pub identity: (ForgeIdentity, String),
    /// The pull request's source branch (`baton/<task_id>`, with or without `refs/heads/`).
    pub branch: String,
    /// The pull request's head commit, as the delivery says.
    pub sha: String,
    /// The comments (a review's body and its comments, or one comment).
    pub comments: Vec<ReviewComment>,
    /// The GitHub review it is, or (a line comment) belongs to: the review's line comments,
    /// and its body when it requests changes, are read from the API
    /// ([`crate::runtime::remediation::Remediation::review`]).
    pub review_id: Option<u64>,
    /// The comment is `/baton stop`: end the loop.
    pub stop: bool,
    /// Written by Baton's own account (the configured `BATON_GITHUB_LOGIN` /
    /// `BATON_ADO_USER_EMAIL`, or carrying Baton's hidden marker): it starts nothing.
    pub own: bool,
}

impl Ops {
    /// Starts remediation round `request` on `task_id`: refused (ignored, with the reason)
    /// unless the execution is complete and not parked; past the bound of its cause
    /// (`[ci] max_fix_rounds` / `[review] max_rounds`, per project) Baton parks instead
    /// (`remediation_parked`) and the report-back asks a human. The fix step goes to `[ci]
    /// fixer` (CI rounds) or the agent that made the change. Journaled as Baton; this
    /// process's pool drives the execution again.
    ///
    /// Errors: the database, the configuration; a refused event is an outcome.
    pub async fn start_remediation(&self, task_id: &str, request: RoundRequest) -> Result<RoundOutcome, OpsError> {
        let state = self.get(task_id).await?;
        if let Some(why) = &state.remediation.parked {
            return Ok(RoundOutcome::Ignored(format!("remediation of {task_id} is parked: {why}")));
        }
        if self.execs.key_applied(&state, &request.key).await? {
            return Ok(RoundOutcome::Ignored(format!(
                "a {} round for {} already started",
                request.cause.as_str(),
                request.sha
            )));
        }
        if state.status != ExecutionStatus::Complete {
            return Ok(RoundOutcome::Ignored(format!(
                "execution {task_id} is {}: a round starts only once it completed",
                state.status.as_str()
            )));
        }
        let project = crate::runtime::specs::project_of(&self.execs, task_id).await?;
        let config = self.execs.data().config().map_err(OpsError::Internal)?;
        let ci = config.ci_for(project.as_deref());
        let max = match request.cause {
            RemediationCause::Ci => ci.max_fix_rounds,
            RemediationCause::Review => config.review_rounds_for(project.as_deref()),
        };
        let used = state.remediation.used(request.cause);
        if used >= max {
            let what = match request.cause {
                RemediationCause::Ci => "CI fix rounds",
                RemediationCause::Review => "review rounds",
            };
            let reason = format!("{used} of {max} {what} are used and the pull request still needs a fix");
            let kind = EventKind::RemediationParked { reason: reason.clone() };
            let key = format!("remediation-parked:{task_id}:{}:{used}", request.cause.as_str());
            self.record(task_id, Event::new(kind).with_key(key), &Operator::baton()).await?;
            return Ok(RoundOutcome::Parked(reason));
        }
        let fixer = match request.cause {
            RemediationCause::Ci => ci.fixer.clone(),
            RemediationCause::Review => None,
        };
        let agent = fixer.or_else(|| agent_of_change(&state)).unwrap_or_else(|| "backend-engineer".into());
        let kind = EventKind::RemediationStarted {
            cause: request.cause,
            sha: request.sha.clone(),
            agent_name: agent.clone(),
            task_description: request.prompt,
            max_rounds: max,
            threads: request.threads,
            queued: request.queued,
        };
        let decided = self.record(task_id, Event::new(kind).with_key(request.key), &Operator::baton()).await?;
        if !decided.recorded {
            return Ok(RoundOutcome::Ignored(format!("the round for {} already started", request.sha)));
        }
        self.drive(task_id).await?;
        Ok(RoundOutcome::Started { round: used + 1, agent })
    }

    /// Decides whether a review (or review comment, or `/baton stop`) on a Baton pull request
    /// starts a review round: its author must map to a Baton user with the reviewer role or
    /// above (an unmapped user, or Baton's own account — [`ReviewRequest::own`] — decides
    /// nothing: untrusted text never drives an agent); the
    /// branch must be `baton/<task_id>` of an executing spec whose pull request is open.
    /// `/baton stop` parks the loop. `Ok(Err(reason))` when the comment starts nothing.
    ///
    /// Errors: the database, the configuration.
    pub async fn review_remediation(
        &self,
        request: ReviewRequest,
    ) -> Result<Result<(String, RoundOutcome), String>, OpsError> {
        let (kind, who) = (&request.identity.0, request.identity.1.as_str());
        if request.own {
            return Ok(Err(format!("{who} is Baton's own account: its comments start nothing")));
        }
        let Some(op) = self.forge_operator(*kind, who).await? else {
            return Ok(Err(format!("{} user {who:?} is not mapped to a Baton user", request.forge)));
        };
        if op.role < Role::Reviewer {
            return Ok(Err(format!(
                "{} is a {}; asking Baton for changes needs the reviewer role",
                op.name,
                op.role.as_str()
            )));
        }
        let branch = request.branch.strip_prefix("refs/heads/").unwrap_or(&request.branch);
        let Some(task_id) = branch.strip_prefix("baton/").filter(|t| !t.is_empty()) else {
            return Ok(Err(format!("{branch} is not a baton/<task_id> branch")));
        };
        let store = self.execs.store();
        let Some(spec) = store.spec_of_execution(task_id).await? else {
            return Ok(Err(format!("no spec was fired as {task_id}")));
        };
        if spec.status != "executing" {
            return Ok(Err(format!("spec {} is {}", spec.spec_id, spec.status)));
        }
        let Some(merge) = store.merge(task_id).await?.filter(|m| m.state == "opened") else {
            return Ok(Err(format!("execution {task_id} has no open pull request")));
        };
        if request.stop {
            let reason = format!("{} stopped the remediation loop with /baton stop", op.name);
            let kind = EventKind::RemediationParked { reason: reason.clone() };
            let state = self.get(task_id).await?;
            let key = format!("remediation-stopped:{task_id}:{}", state.remediation.rounds.len());
            self.record(task_id, Event::new(kind).with_key(key), &Operator::baton()).await?;
            return Ok(Ok((task_id.to_string(), RoundOutcome::Parked(reason))));
        }
        let state = self.get(task_id).await?;
        // A comment already answered or waiting (GitHub sends a review's line comments as
        // deliveries of their own too) is not asked twice.
        let comments: Vec<ReviewComment> = request
            .comments
            .into_iter()
            .filter(|c| !c.body.trim().is_empty() && !state.remediation.knows_comment(&c.id))
            .collect();
        if comments.is_empty() {
            return Ok(Err("the review says nothing new to change".into()));
        }
        if let Some(why) = &state.remediation.parked {
            return Ok(Ok((task_id.to_string(), RoundOutcome::Ignored(format!("remediation is parked: {why}")))));
        }
        if state.status != ExecutionStatus::Complete {
            return Ok(Ok((task_id.to_string(), self.queue_comments(task_id, &state, &comments).await?)));
        }
        let sha = if merge.pushed_sha.is_empty() { request.sha.clone() } else { merge.pushed_sha.clone() };
        let outcome = self.review_round(task_id, &spec.project, &merge.pr_url, &sha, &state, comments.clone()).await?;
        if matches!(outcome, RoundOutcome::Ignored(_)) {
            // Another delivery's round started first: these comments wait for the next one.
            let state = self.get(task_id).await?;
            if state.status != ExecutionStatus::Complete && state.remediation.parked.is_none() {
                // What that round answers (the same review, read by another of its deliveries)
                // is not asked again: only the rest waits.
                let comments: Vec<ReviewComment> =
                    comments.into_iter().filter(|c| !state.remediation.knows_comment(&c.id)).collect();
                if comments.is_empty() {
                    return Ok(Err("the round that just started answers these comments".into()));
                }
                return Ok(Ok((task_id.to_string(), self.queue_comments(task_id, &state, &comments).await?)));
            }
        }
        Ok(Ok((task_id.to_string(), outcome)))
    }

    /// Journals `comments` as waiting for the next review round (`review_queued`).
    async fn queue_comments(
        &self,
        task_id: &str,
        state: &ExecutionState,
        comments: &[ReviewComment],
    ) -> Result<RoundOutcome, OpsError> {
        let queued: Vec<QueuedComment> = comments
            .iter()
            .map(|c| QueuedComment {
                id: c.id.clone(),
                path: c.path.clone(),
                line: c.line,
                diff_hunk: c.diff_hunk.clone(),
                body: crate::model::text::cut(&c.body, QUEUED_BODY_CHARS),
                author: c.author.clone(),
            })
            .collect();
        let room = crate::engine::remediate::MAX_QUEUED.saturating_sub(state.remediation.queued.len());
        if room == 0 {
            return Ok(RoundOutcome::Ignored(format!(
                "{} review comments already wait for the next round",
                state.remediation.queued.len()
            )));
        }
        let queued: Vec<QueuedComment> = queued.into_iter().take(room).collect();
        use sha2::Digest as _;
        let mut hasher = sha2::Sha256::new();
        for c in &queued {
            hasher.update(format!("{}\u{0}{}\u{0}{}\u{0}", c.id, c.author, c.body).as_bytes());
        }
        let digest = hex::encode(&hasher.finalize()[..12]);
        let n = queued.len();
        let key = format!("review-queued:{task_id}:{digest}");
        let kind = EventKind::ReviewQueued { comments: queued };
        let decided = self.record(task_id, Event::new(kind).with_key(key), &Operator::baton()).await?;
        let waiting = self.get(task_id).await?.remediation.queued.len();
        if !decided.recorded {
            return Ok(RoundOutcome::Ignored(format!("these comments already wait ({waiting} in all)")));
        }
        tracing::info!(task.id = %task_id, "{n} review comments wait for the next round ({waiting} in all)");
        Ok(RoundOutcome::Queued(waiting))
    }

    /// Starts a review round on `task_id` (completed, its pull request at `sha`) answering the
    /// queued comments and then `comments`.
    async fn review_round(
        &self,
        task_id: &str,
        project: &str,
        pr_url: &str,
        sha: &str,
        state: &ExecutionState,
        comments: Vec<ReviewComment>,
    ) -> Result<RoundOutcome, OpsError> {
        let queued = &state.remediation.queued;
        let mut all: Vec<ReviewComment> = queued
            .iter()
            .map(|q| ReviewComment {
                id: q.id.clone(),
                path: q.path.clone(),
                line: q.line,
                diff_hunk: q.diff_hunk.clone(),
                body: q.body.clone(),
                author: q.author.clone(),
            })
            .collect();
        all.extend(comments);
        let config = self.execs.data().config().map_err(OpsError::Internal)?;
        let round = state.remediation.used(RemediationCause::Review) + 1;
        let prompt = review_prompt(pr_url, sha, &all, round, config.review_rounds_for(Some(project)));
        let mut threads: Vec<ReviewThread> = Vec::new();
        for c in all.iter().filter(|c| !c.id.is_empty()) {
            if !threads.iter().any(|t| t.id == c.id) {
                threads.push(ReviewThread { id: c.id.clone(), path: c.path.clone(), line: c.line });
            }
        }
        threads.truncate(crate::engine::remediate::MAX_THREADS);
        let n = state.remediation.rounds.len();
        let request = RoundRequest {
            cause: RemediationCause::Review,
            sha: sha.to_string(),
            prompt,
            threads,
            // One review round at a time: deliveries that read the same state ask for the same
            // round, and the first one starts it.
            key: format!("remediation:{task_id}:review:{sha}:{n}"),
            queued: u32::try_from(queued.len()).unwrap_or(u32::MAX),
        };
        self.start_remediation(task_id, request).await
    }

    /// Starts the next review round with the comments that arrived while the last round ran,
    /// once the execution completed again (its fix pushed) and its pull request is still open;
    /// within the same bound (past it, Baton parks). `None`: nothing waits, or it is not time.
    ///
    /// Errors: the database, the configuration.
    pub async fn start_queued_review(&self, task_id: &str) -> Result<Option<RoundOutcome>, OpsError> {
        let state = self.get(task_id).await?;
        if state.remediation.queued.is_empty()
            || state.status != ExecutionStatus::Complete
            || state.remediation.parked.is_some()
        {
            return Ok(None);
        }
        let store = self.execs.store();
        let Some(spec) = store.spec_of_execution(task_id).await?.filter(|s| s.status == "executing") else {
            return Ok(None);
        };
        let Some(merge) = store.merge(task_id).await?.filter(|m| m.state == "opened") else {
            return Ok(None);
        };
        if merge.pushed_sha.is_empty() {
            return Ok(None);
        }
        let outcome =
            self.review_round(task_id, &spec.project, &merge.pr_url, &merge.pushed_sha, &state, Vec::new()).await?;
        Ok(Some(outcome))
    }
}

/// Characters of a queued comment's body kept.
const QUEUED_BODY_CHARS: usize = 4_000;
