//! The spec queue service: projects, specs and their lifecycle, enrichment, firing.
//!
//! Every change checks the lifecycle table (`model::spec`) against the status it read, then
//! writes with a compare-and-set on that status (`Store::change_spec`), so two people acting at
//! once get one change and one [`SpecError::Conflict`] naming the status now. Firing claims the
//! spec first, then creates the execution (`driver::prepare`), and hands it to the
//! [`Pool`]; when creating fails the spec is approved again with the reason (and an execution
//! already created is cancelled with it, so none is left live). A forge item becomes a spec
//! through [`Specs::import`] (in `import`): fitted to the spec limits ([`crate::forge::ForgeItem::fitted`]), created or
//! updated, as its [`ImportOutcome`] says. This module reads
//! repositories (roster, test command) but never writes them, and never touches HTTP.

mod import;
mod projects;

pub use import::ImportOutcome;
pub use projects::{detect_test_command, NewProject};

use std::path::PathBuf;

use crate::clock;
use crate::engine;
use crate::git::GitRepo;
use crate::model::event::{Event, EventKind};
use crate::model::plan::MachinePlan;
use crate::model::spec::{self, IllegalTransition, SpecAction, SpecStatus};
use crate::pmo::enrich::{self, EnrichInput, Forecast, SpendHistory};
use crate::pmo::pricing::PriceTable;
use crate::runtime::agent::roster::load_roster;
use crate::runtime::driver::{self, RunOptions};
use crate::runtime::executions::Executions;
use crate::runtime::pool::Pool;
use crate::runtime::remote;
use crate::runtime::{blocking, BadInput};
use crate::store::{NewSpec, ProjectRow, SpecChange, SpecEventRow, SpecFilter, SpecInsert, SpecRow, StoreError};

/// Longest spec title, characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// Largest spec body, bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Why a spec-queue request failed; the web layer maps each to a status.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// 404: no such project or spec.
    #[error("{0}")]
    NotFound(String),
    /// 422: a field is wrong; names the field.
    #[error("{field}: {message}")]
    Invalid {
        /// The field (`title`, `repo_path`, `plan.phases[0].steps[1].agent_name`, …).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// 422: an uploaded plan has problems (every one listed).
    #[error("the plan has {} problems: {}", .0.len(), .0.join("; "))]
    InvalidPlan(Vec<String>),
    /// 409: the spec's status does not allow it (or changed meanwhile): `current` is its status.
    #[error("{message}")]
    Conflict {
        /// What was refused.
        message: String,
        /// The spec's (or project's) status now.
        current: String,
    },
    /// 500: anything else.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl From<IllegalTransition> for SpecError {
    fn from(e: IllegalTransition) -> SpecError {
        SpecError::Conflict { message: e.to_string(), current: e.current.as_str().to_string() }
    }
}

impl From<StoreError> for SpecError {
    fn from(e: StoreError) -> SpecError {
        match e {
            StoreError::NoSuchSpec { .. } | StoreError::NoSuchProject { .. } => SpecError::NotFound(e.to_string()),
            StoreError::SpecChanged { ref current, .. } => {
                SpecError::Conflict { message: format!("{e}; reload and try again"), current: current.clone() }
            }
            StoreError::ProjectExists { .. } | StoreError::ProjectInUse { .. } => {
                SpecError::Conflict { message: e.to_string(), current: String::new() }
            }
            other => SpecError::Internal(other.into()),
        }
    }
}

fn invalid(field: &str, message: impl Into<String>) -> SpecError {
    SpecError::Invalid { field: field.into(), message: message.into() }
}

/// A spec to create.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SpecInput {
    /// Project name.
    pub project: String,
    /// 1–200 characters.
    pub title: String,
    /// Up to 64 KiB.
    #[serde(default)]
    pub body: String,
    /// 0 (highest) … 3; default 2.
    #[serde(default)]
    pub priority: Option<i64>,
}

/// Changes to a spec's text.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SpecEdit {
    /// New title.
    #[serde(default)]
    pub title: Option<String>,
    /// New body.
    #[serde(default)]
    pub body: Option<String>,
    /// New priority.
    #[serde(default)]
    pub priority: Option<i64>,
}

/// The spec queue over one store, firing into one pool.
#[derive(Debug, Clone)]
pub struct Specs {
    execs: Executions,
    pool: Pool,
}

/// A ceiling given for a spec or a project: what the engine accepts as a ceiling (a cent to
/// its cap), checked when it is given rather than when the spec is fired (found by a tester:
/// an approved $0.001 ceiling made every fire fail).
fn check_budget(usd: f64, field: &str) -> Result<f64, SpecError> {
    use crate::engine::budget::{MAX_CEILING_USD, MIN_CEILING_USD};
    if usd.is_finite() && (MIN_CEILING_USD..=MAX_CEILING_USD).contains(&usd) {
        Ok(usd)
    } else {
        Err(invalid(field, format!("{usd}: {}", crate::runtime::spend::USD_EXPECTED)))
    }
}

fn check_title(title: &str) -> Result<String, SpecError> {
    let t = title.trim();
    if t.is_empty() {
        return Err(invalid("title", "must not be empty"));
    }
    if t.chars().count() > MAX_TITLE_CHARS {
        return Err(invalid("title", format!("longer than {MAX_TITLE_CHARS} characters")));
    }
    if !crate::model::text::is_one_line(t) {
        return Err(invalid(
            "title",
            "must be one line without control characters, line separators or bidirectional overrides",
        ));
    }
    Ok(t.to_string())
}

fn check_body(body: &str) -> Result<String, SpecError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(invalid("body", format!("larger than {MAX_BODY_BYTES} bytes")));
    }
    if body.contains('\0') {
        return Err(invalid("body", engine::validate::NUL_REFUSED));
    }
    Ok(body.to_string())
}

fn check_priority(p: i64) -> Result<i64, SpecError> {
    if (0..=3).contains(&p) {
        Ok(p)
    } else {
        Err(invalid("priority", format!("{p} is not 0 (highest) … 3")))
    }
}

impl Specs {
    /// The service over `pool`'s executions.
    pub fn new(pool: Pool) -> Specs {
        Specs { execs: pool.execs().clone(), pool }
    }

    /// The pool specs are fired into.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Creates a draft spec (`imported` when `source` is a forge).
    ///
    /// Errors: an empty or overlong title, an oversized body, a priority out of 0…3
    /// ([`SpecError::Invalid`]); an unknown project ([`SpecError::NotFound`]).
    pub async fn create(
        &self,
        input: SpecInput,
        source: &str,
        source_url: &str,
        actor: &str,
    ) -> Result<SpecRow, SpecError> {
        match self.insert(input, source, source_url, "{}", "", actor).await? {
            SpecInsert::Created(id) | SpecInsert::Existing(id) => self.get(id).await,
        }
    }

    /// Inserts a spec, or finds the spec of the same forge item (`source_key`, unique).
    async fn insert(
        &self,
        input: SpecInput,
        source: &str,
        source_url: &str,
        source_meta: &str,
        source_key: &str,
        actor: &str,
    ) -> Result<SpecInsert, SpecError> {
        let title = check_title(&input.title)?;
        let body = check_body(&input.body)?;
        let priority = check_priority(input.priority.unwrap_or(2))?;
        let status = if source == "board" { SpecStatus::Draft } else { SpecStatus::Imported };
        Ok(self
            .execs
            .store()
            .insert_spec(&NewSpec {
                project: input.project,
                title,
                body,
                source: source.into(),
                source_url: source_url.into(),
                source_meta: source_meta.into(),
                source_key: source_key.into(),
                priority,
                status: status.as_str().into(),
                actor: actor.into(),
                at: clock::now_rfc3339(),
            })
            .await?)
    }

    /// One spec. Errors: [`SpecError::NotFound`].
    pub async fn get(&self, spec_id: i64) -> Result<SpecRow, SpecError> {
        self.execs.store().spec(spec_id).await?.ok_or_else(|| SpecError::NotFound(format!("no spec with id {spec_id}")))
    }

    /// Specs matching `filter`. Errors: an unknown status name (invalid), an unknown project
    /// ([`SpecError::NotFound`], naming it), the database.
    pub async fn list(&self, filter: &SpecFilter) -> Result<Vec<SpecRow>, SpecError> {
        if let Some(s) = filter.status.as_deref().filter(|s| SpecStatus::parse(s).is_none()) {
            return Err(invalid("status", format!("{s:?} is not a spec status")));
        }
        if let Some(name) = &filter.project {
            self.project(name).await?;
        }
        Ok(self.execs.store().list_specs(filter).await?)
    }

    /// A spec's lifecycle events. Errors: not found.
    pub async fn events(&self, spec_id: i64) -> Result<Vec<SpecEventRow>, SpecError> {
        self.get(spec_id).await?;
        Ok(self.execs.store().spec_events(spec_id).await?)
    }

    fn status_of(row: &SpecRow) -> Result<SpecStatus, SpecError> {
        SpecStatus::parse(&row.status).ok_or_else(|| {
            SpecError::Internal(anyhow::anyhow!("spec {} has unknown status {}", row.spec_id, row.status))
        })
    }

    /// Checks `action` on the spec and writes `change` (its action, statuses, actor and time
    /// are filled in here).
    async fn change(
        &self,
        row: &SpecRow,
        action: SpecAction,
        actor: &str,
        change: SpecChange,
    ) -> Result<SpecRow, SpecError> {
        change_spec(&self.execs, row, action, actor, change).await
    }

    /// Edits title, body or priority; the spec becomes a draft (its plan is dropped).
    ///
    /// Errors: invalid fields; a status that does not allow editing (conflict).
    pub async fn edit(&self, spec_id: i64, e: SpecEdit, actor: &str) -> Result<SpecRow, SpecError> {
        if e.title.is_none() && e.body.is_none() && e.priority.is_none() {
            // An edit drops the plan: one that changes nothing (`PATCH {}`) did too, and was
            // journaled each time (found by a tester).
            return Err(invalid("spec", "nothing to change: give a title, a body or a priority"));
        }
        let row = self.get(spec_id).await?;
        let title = e.title.as_deref().map(check_title).transpose()?;
        let body = e.body.as_deref().map(check_body).transpose()?;
        let priority = e.priority.map(check_priority).transpose()?;
        // Only the values it already has (a form sent back unchanged) change nothing either.
        let changes = title.as_ref().is_some_and(|t| *t != row.title)
            || body.as_ref().is_some_and(|b| *b != row.body)
            || priority.is_some_and(|p| p != row.priority);
        if !changes {
            return Err(invalid("spec", "nothing to change: the title, body and priority given are the spec's own"));
        }
        let change = SpecChange {
            title,
            body,
            priority,
            plan_json: Some(None),
            forecast_json: Some(None),
            risk: Some(String::new()),
            ..SpecChange::default()
        };
        self.change(&row, SpecAction::Edit, actor, change).await
    }

    /// The spend ledger's history and the price table, for a forecast.
    async fn history(&self) -> Result<(SpendHistory, PriceTable), SpecError> {
        let history = crate::runtime::spend::history(self.execs.store()).await?;
        let data = self.execs.data().clone();
        let prices = blocking(move || data.config()).await??.price_table();
        Ok((history, prices))
    }

    /// Attaches a rule-based plan, risk tier and forecast (see `pmo::enrich`), using the
    /// project's roster and its test command (configured, else detected).
    ///
    /// Errors: a status that does not allow it (conflict); an unreadable roster (invalid).
    pub async fn enrich(&self, spec_id: i64, actor: &str) -> Result<SpecRow, SpecError> {
        let row = self.get(spec_id).await?;
        spec::transition(Self::status_of(&row)?, SpecAction::Enrich)?;
        let project = self.project(&row.project).await?;
        let root = if project.repo_path.is_empty() && remote::active(self.execs.store(), &project) {
            // Registered with its remote alone: this replica's clone.
            remote::replica_clone(self.execs.data(), &project).await?.root().to_path_buf()
        } else {
            PathBuf::from(&project.repo_path)
        };
        let configured = project.test_command.clone();
        let (roster, test_command) = blocking(move || {
            let roster = load_roster(&root).map(|r| r.iter().map(|d| d.name.clone()).collect::<Vec<_>>());
            let cmd = if configured.is_empty() { detect_test_command(&root) } else { Some(configured) };
            (roster, cmd)
        })
        .await?;
        let roster = roster.map_err(|e| invalid("roster", format!("{e:#}")))?;
        let (history, prices) = self.history().await?;
        let task_id = format!("spec-{spec_id}");
        let input = EnrichInput {
            task_id: &task_id,
            title: &row.title,
            body: &row.body,
            roster,
            test_command,
            history,
            prices,
        };
        let e = enrich::enrich(&input).map_err(|e| SpecError::Internal(anyhow::anyhow!("generated plan: {e}")))?;
        let change = SpecChange {
            risk: Some(e.risk),
            plan_json: Some(Some(serde_json::to_string(&e.plan).map_err(anyhow::Error::from)?)),
            forecast_json: Some(Some(serde_json::to_string(&e.forecast).map_err(anyhow::Error::from)?)),
            ..SpecChange::default()
        };
        self.change(&row, SpecAction::Enrich, actor, change).await
    }

    /// Replaces the plan with an uploaded MachinePlan (agent-baton `plan.json`), validated, with
    /// a new forecast; the risk tier becomes the plan's `risk_level`.
    ///
    /// Errors: a malformed plan (invalid, naming the JSON path), an invalid plan (every
    /// problem), a status that does not allow it (conflict).
    pub async fn upload_plan(&self, spec_id: i64, plan: serde_json::Value, actor: &str) -> Result<SpecRow, SpecError> {
        let row = self.get(spec_id).await?;
        spec::transition(Self::status_of(&row)?, SpecAction::UploadPlan)?;
        let plan = MachinePlan::from_value(plan).map_err(|e| invalid("plan", e.to_string()))?;
        if let Err(problems) = engine::validate::validate_new(&plan) {
            return Err(SpecError::InvalidPlan(problems.iter().map(ToString::to_string).collect()));
        }
        engine::start(plan.clone(), &clock::now_rfc3339()).map_err(|e| invalid("plan", e.to_string()))?;
        let (history, prices) = self.history().await?;
        let forecast: Forecast = enrich::forecast(&plan, &history, &prices);
        let change = SpecChange {
            risk: Some(plan.risk_level.to_uppercase()),
            plan_json: Some(Some(serde_json::to_string(&plan).map_err(anyhow::Error::from)?)),
            forecast_json: Some(Some(serde_json::to_string(&forecast).map_err(anyhow::Error::from)?)),
            ..SpecChange::default()
        };
        self.change(&row, SpecAction::UploadPlan, actor, change).await
    }

    /// Submits an enriched spec for review. Errors: conflict.
    pub async fn submit(&self, spec_id: i64, actor: &str) -> Result<SpecRow, SpecError> {
        let row = self.get(spec_id).await?;
        self.change(&row, SpecAction::Submit, actor, SpecChange::default()).await
    }

    /// A reviewer approves (`approve`) or bounces the spec; a bounce needs a reason. An
    /// approval may set the USD ceiling of its execution (`budget_usd`; without one the
    /// project's default applies, then `BATON_RUN_BUDGET_USD`).
    ///
    /// Errors: a bounce without a reason, a ceiling that is not a USD amount above 0 (invalid,
    /// naming `budget_usd`), conflict.
    pub async fn review(
        &self,
        spec_id: i64,
        approve: bool,
        reason: &str,
        actor: &str,
        budget_usd: Option<f64>,
    ) -> Result<SpecRow, SpecError> {
        let row = self.get(spec_id).await?;
        let reason = reason.trim();
        if !approve && reason.is_empty() {
            return Err(invalid("reason", "a bounce needs a reason the author can act on"));
        }
        if reason.contains('\0') {
            return Err(invalid("reason", engine::validate::NUL_REFUSED));
        }
        let budget = budget_usd.map(|b| check_budget(b, "budget_usd")).transpose()?;
        let action = if approve { SpecAction::Approve } else { SpecAction::Bounce };
        let change = SpecChange {
            reason: reason.into(),
            budget_usd: if approve { Some(budget) } else { None },
            ..SpecChange::default()
        };
        self.change(&row, action, actor, change).await
    }

    /// Fires an approved spec: claims it, creates its execution (task id
    /// `spec-<id>-<UTC yyyymmddHHMMSS>`) on the project's repository and default branch with the
    /// project's agent profile, links it to the spec, and hands it to the pool. A process
    /// stopped between the claim and the link leaves the spec `executing` without one:
    /// [`Specs::recover_fires`] links the execution it made, or approves the spec again.
    ///
    /// Errors: a status that does not allow it (conflict); the execution cannot be created
    /// (invalid, and the spec is approved again with the reason; an execution created before
    /// the failure is cancelled with it).
    pub async fn fire(&self, spec_id: i64, actor: &str) -> Result<SpecRow, SpecError> {
        let row = self.get(spec_id).await?;
        let Some(plan_json) = row.plan_json.clone() else {
            return Err(SpecError::Conflict { message: format!("spec {spec_id} has no plan"), current: row.status });
        };
        let project = self.project(&row.project).await?;
        let task_id = format!("spec-{spec_id}-{}", clock::now().format("%Y%m%d%H%M%S"));
        let claimed = self.change(&row, SpecAction::Fire, actor, SpecChange::default()).await?;
        match self.create_execution(spec_id, &task_id, &plan_json, &project).await {
            Ok(task_id) => {
                if let Err(e) = self.execs.store().attach_execution(spec_id, &task_id).await {
                    // Cancelled while its execution was being created: cancel that execution
                    // too, so nothing runs for a cancelled spec.
                    let event =
                        Event::new(EventKind::Cancelled { reason: "the spec was cancelled while firing".into() })
                            .by("baton");
                    self.execs.record_once(&task_id, event).await?;
                    let current = self.get(spec_id).await.map(|r| r.status).unwrap_or_default();
                    return Err(SpecError::Conflict {
                        message: format!("spec {spec_id} changed while it was being fired ({e})"),
                        current,
                    });
                }
                self.pool.drive(&task_id, Some(&project.name));
                self.get(spec_id).await
            }
            Err(e) => {
                let reason = format!("{e:#}");
                let change = SpecChange { reason: format!("firing failed: {reason}"), ..SpecChange::default() };
                self.change(&claimed, SpecAction::FireFailed, "baton", change).await?;
                Err(invalid("spec", format!("the execution could not be created: {reason}")))
            }
        }
    }

    /// For a server starting, before it serves: every spec a stopped process left `executing`
    /// without an execution (found by a tester who killed the server during fires: `fire`
    /// refused such a spec with 409 and only a cancel got it out, or its execution ran without
    /// the spec naming it). The fire made an execution (`spec-<id>-…`) that has not ended: the
    /// newest is linked to the spec. It made none: the spec is approved again, with the reason
    /// in its history, to be fired again. (A spec names its execution only once it exists: the
    /// column is a foreign key.) A fire still in flight on another replica then finds its spec
    /// changed and cancels what it made (`fire`), so nothing runs unlinked. Returns how many
    /// specs were recovered.
    ///
    /// Errors: the database.
    pub async fn recover_fires(&self) -> Result<usize, SpecError> {
        let store = self.execs.store();
        let filter = SpecFilter {
            status: Some(SpecStatus::Executing.as_str().into()),
            limit: i64::MAX,
            ..SpecFilter::default()
        };
        let stuck: Vec<SpecRow> =
            store.list_specs(&filter).await?.into_iter().filter(|row| row.task_id.is_none()).collect();
        let made = if stuck.is_empty() { Vec::new() } else { store.list_executions().await? };
        let mut recovered = 0;
        for row in stuck {
            let prefix = format!("spec-{}-", row.spec_id);
            let unlinked = made
                .iter()
                .filter(|e| e.task_id.starts_with(&prefix))
                .filter(|e| !matches!(e.summary.status.as_str(), "complete" | "cancelled"))
                .map(|e| e.task_id.clone())
                .next_back();
            // A spec that changed meanwhile (another replica's fire finished, a cancel) is
            // left as it now is.
            let done = match unlinked {
                Some(task_id) => store.attach_execution(row.spec_id, &task_id).await.map_err(SpecError::from),
                None => {
                    let change = SpecChange {
                        reason: "firing was interrupted (the server stopped) before its execution was created: \
                                 fire it again"
                            .into(),
                        ..SpecChange::default()
                    };
                    self.change(&row, SpecAction::FireFailed, "baton", change).await.map(|_| ())
                }
            };
            match done {
                Ok(()) => recovered += 1,
                Err(e) => tracing::warn!(spec.id = row.spec_id, "an interrupted fire was left as it is: {e}"),
            }
        }
        Ok(recovered)
    }

    async fn create_execution(
        &self,
        spec_id: i64,
        task_id: &str,
        plan_json: &str,
        project: &ProjectRow,
    ) -> anyhow::Result<String> {
        let mut plan: MachinePlan = serde_json::from_str(plan_json)?;
        plan.task_id = task_id.to_string();
        // On PostgreSQL with a remote: this replica's fetched clone, from the remote's branch.
        let (repo, base) = if remote::active(self.execs.store(), project) {
            let clone = remote::replica_clone(self.execs.data(), project).await?;
            (clone.root().to_path_buf(), format!("refs/remotes/{}/{}", driver::REMOTE, project.default_branch))
        } else {
            (PathBuf::from(&project.repo_path), project.default_branch.clone())
        };
        let options = RunOptions {
            repo: Some(repo.clone()),
            agent: Some(project.agent_profile.clone()),
            base: Some(base),
            forge_repo: Some(project.forge_repo.clone()),
            project: Some(project.name.clone()),
            ..RunOptions::default()
        };
        let task_id = driver::prepare(self.execs.data(), plan, &options).await?.task_id;
        if remote::active(self.execs.store(), project) {
            // Published at once, so any replica can take the execution over from the remote.
            let published = async {
                let clone = blocking(move || GitRepo::open(&repo)).await??;
                remote::publish(&clone, &driver::feature_branch(&task_id)).await
            };
            if let Err(e) = published.await {
                return Err(self.cancel_unfired(&task_id, e).await);
            }
        }
        match self.set_ceiling(spec_id, project, &task_id).await {
            Ok(()) => Ok(task_id),
            Err(e) => Err(self.cancel_unfired(&task_id, e).await),
        }
    }

    /// Journals the reviewed ceiling, else the project's default (else the driver's
    /// environment applies when it runs).
    async fn set_ceiling(&self, spec_id: i64, project: &ProjectRow, task_id: &str) -> anyhow::Result<()> {
        let spec_budget = self.get(spec_id).await.ok().and_then(|r| r.budget_usd);
        let ceiling = spec_budget.map(|b| (b, "spec")).or(project.budget_usd.map(|b| (b, "project")));
        if let Some((usd, source)) = ceiling {
            let kind = EventKind::BudgetSet { ceiling_usd: Some(usd), source: source.into() };
            self.execs.record_once(task_id, Event::new(kind).by("baton")).await?;
        }
        Ok(())
    }

    /// A fire failed after its execution was created: cancels that execution with the reason
    /// (journaled), so no execution is left `running` with nothing driving it, and returns the
    /// error naming it.
    async fn cancel_unfired(&self, task_id: &str, error: anyhow::Error) -> anyhow::Error {
        let reason = format!("firing failed: {error:#}");
        let event = Event::new(EventKind::Cancelled { reason: reason.clone() }).by("baton");
        match self.execs.record_once(task_id, event).await {
            Ok(_) => error.context(format!("execution {task_id} was cancelled")),
            Err(cancel) => {
                tracing::warn!(task.id = %task_id, "{reason}; cancelling the execution failed too: {cancel:#}");
                error.context(format!("execution {task_id} could not be cancelled ({cancel:#})"))
            }
        }
    }

    /// Cancels a spec; a fired spec's execution is cancelled first (its driver stopped, its
    /// agents' process groups sent SIGTERM).
    ///
    /// Errors: conflict (already final).
    pub async fn cancel(&self, spec_id: i64, reason: &str, actor: &str) -> Result<SpecRow, SpecError> {
        if reason.contains('\0') {
            return Err(invalid("reason", engine::validate::NUL_REFUSED));
        }
        let row = self.get(spec_id).await?;
        spec::transition(Self::status_of(&row)?, SpecAction::Cancel)?;
        if let Some(task_id) = &row.task_id {
            let summary = self.execs.store().summary(task_id).await?;
            if summary.is_some_and(|s| !matches!(s.status.as_str(), "complete" | "cancelled")) {
                self.pool.halt(task_id).await;
                let why = if reason.trim().is_empty() { "spec cancelled" } else { reason.trim() };
                let event = Event::new(EventKind::Cancelled { reason: why.to_string() }).by(actor);
                self.execs.record_once(task_id, event).await.map_err(|e| match e.downcast::<BadInput>() {
                    Ok(b) => SpecError::Conflict { message: b.0, current: row.status.clone() },
                    Err(e) => SpecError::Internal(e),
                })?;
            }
        }
        self.change(
            &row,
            SpecAction::Cancel,
            actor,
            SpecChange { reason: reason.trim().into(), ..SpecChange::default() },
        )
        .await
    }
}

/// The spec fired as `task_id`, when it is still `executing`, is cancelled with its execution
/// (by `baton`, with the execution's `reason`), so the spec, its card and the execution say
/// the same; a spec already final is left as it is.
///
/// Errors: the database.
pub async fn execution_cancelled(execs: &Executions, task_id: &str, reason: &str) -> Result<(), SpecError> {
    let store = execs.store();
    let Some(row) = store.spec_of_execution(task_id).await? else { return Ok(()) };
    if SpecStatus::parse(&row.status) != Some(SpecStatus::Executing) {
        return Ok(());
    }
    let change = SpecChange { reason: format!("its execution was cancelled: {reason}"), ..SpecChange::default() };
    match change_spec(execs, &row, SpecAction::Cancel, "baton", change).await {
        Ok(_) | Err(SpecError::Conflict { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Checks `action` on the spec `row` and writes `change` (its action, statuses, actor and time
/// are filled in here); returns the spec after.
async fn change_spec(
    execs: &Executions,
    row: &SpecRow,
    action: SpecAction,
    actor: &str,
    mut change: SpecChange,
) -> Result<SpecRow, SpecError> {
    let current = Specs::status_of(row)?;
    let to = spec::transition(current, action)?;
    change.action = action.as_str().into();
    change.expected = current.as_str().into();
    change.to = to.as_str().into();
    change.actor = actor.into();
    change.at = clock::now_rfc3339();
    execs.store().change_spec(row.spec_id, &change).await?;
    execs
        .store()
        .spec(row.spec_id)
        .await?
        .ok_or_else(|| SpecError::NotFound(format!("no spec with id {}", row.spec_id)))
}

/// The project of `task_id`'s spec (for its agent cap), when it was fired from one.
///
/// Errors: the database.
pub async fn project_of(execs: &Executions, task_id: &str) -> anyhow::Result<Option<String>> {
    Ok(execs.store().spec_of_execution(task_id).await?.map(|s| s.project))
}
