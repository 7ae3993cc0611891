//! The PMO board: specs grouped into the columns of DESIGN.md §6, each column paginated, built
//! from the summary rows only (specs joined with their executions' summaries and live rows; no
//! plan, state or journal is read, so a board costs the same at any journal length). Shared by `GET /api/v1/board` and the HTML board, which only render it.
//! This module never serves HTTP and never writes.

use serde::Serialize;

use crate::model::spec::{PullRequest, SpecStage, SpecStatus, BOARD_STAGES};
use crate::runtime::executions::Executions;
use crate::runtime::specs::SpecError;
use crate::store::CardRow;

/// What a board is asked for (`GET /api/v1/board?project=&page=&archived=`).
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct BoardQuery {
    /// Only this project (empty: every project; 404 when no project has that name).
    pub project: Option<String>,
    /// Page of every column (1-based; 20 cards a page).
    #[param(minimum = 1, default = 1)]
    pub page: Option<usize>,
    /// The archive (cancelled specs) instead of the board.
    #[serde(default)]
    pub archived: bool,
}

impl BoardQuery {
    /// The query as the board reads it: an empty `project` means every project.
    ///
    /// Errors: `page` 0 (pages count from 1), naming the parameter.
    pub fn checked(mut self) -> Result<BoardQuery, String> {
        if self.page == Some(0) {
            return Err("page: pages count from 1".into());
        }
        self.project = self.project.filter(|p| !p.is_empty());
        Ok(self)
    }
}

/// Cards per column page.
pub const PAGE_SIZE: usize = 20;

/// Where a spec with stored `status` stands, given its execution's status.
pub fn stage_of(status: &str, execution_status: Option<&str>) -> SpecStage {
    SpecStatus::parse(status).map_or(SpecStage::Queued, |s| SpecStage::of(s, execution_status))
}

/// Where a spec stands, knowing whether its execution's pull request was opened
/// ([`SpecStage::of_pull`]).
pub fn stage_of_pull(status: &str, execution_status: Option<&str>, pr_opened: bool) -> SpecStage {
    SpecStatus::parse(status).map_or(SpecStage::Queued, |s| SpecStage::of_pull(s, execution_status, pr_opened))
}

/// The status a spec page shows: its stored status, except that a spec whose execution
/// ended shows how the execution ended (`complete`, `failed`, `cancelled`), never `executing`.
pub fn shown_status(status: &str, execution_status: Option<&str>) -> String {
    match execution_status {
        Some(e @ ("complete" | "failed" | "cancelled")) if status == "executing" => format!("execution {e}"),
        _ => status.to_string(),
    }
}

/// One card.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Card {
    /// Spec id.
    pub spec_id: i64,
    /// Title (untrusted text: escaped when rendered).
    pub title: String,
    /// `board`, `github`, `ado`.
    pub source: String,
    /// Link to where it came from, empty when none.
    pub source_url: String,
    /// Project name.
    pub project: String,
    /// Risk tier, empty before enrichment.
    pub risk: String,
    /// 0 (highest) … 3.
    pub priority: i64,
    /// Stored status (`draft`, `approved`, …).
    pub status: String,
    /// Where it stands.
    pub stage: SpecStage,
    /// The plan's agents.
    pub agents: Vec<String>,
    /// One pip per step: true when done.
    pub pips: Vec<bool>,
    /// `"<id> <name>"` of the current phase, when executing.
    pub current_phase: String,
    /// Spend so far, USD.
    pub spend_usd: f64,
    /// How much of `spend_usd` is an estimate, USD: attempts of agents that report tokens but
    /// no cost (codex, gemini), priced from the price table. 0 when all of it was reported.
    pub spend_estimated_usd: f64,
    /// Expected cost, USD, once enriched.
    pub forecast_mid_usd: Option<f64>,
    /// What it waits for (a human decision, a gate, a review), when it waits.
    pub waits_for: Option<String>,
    /// Its execution, once fired.
    pub task_id: Option<String>,
    /// Its execution is paused (no new dispatches until resumed).
    pub paused: bool,
    /// When what it waits for began (RFC 3339): the approval's request, the execution's last
    /// activity, or the spec's last change; empty when it waits for nothing.
    pub waiting_since: String,
    /// What its open execution is doing (executing, validating or awaiting a human).
    pub live: Option<CardLive>,
    /// Its execution's pull request, once opened, and where it stands.
    pub pull_request: Option<PullRequest>,
    /// Remediation rounds on its pull request (issue 19.3/4), once one ran or Baton parked.
    pub remediation: Option<CardRemediation>,
}

/// The remediation rounds a card shows.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct CardRemediation {
    /// CI fix rounds used.
    pub ci_rounds: u32,
    /// Review remediation rounds used.
    pub review_rounds: u32,
    /// Why Baton starts no more rounds and asks a human (empty: it may start them).
    pub parked: String,
}

impl CardRemediation {
    /// Reads the card row's `"<ci> <review> <parked>"`.
    fn parse(text: &str) -> CardRemediation {
        let mut parts = text.splitn(3, ' ');
        let mut n = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let (ci_rounds, review_rounds) = (n(), n());
        CardRemediation { ci_rounds, review_rounds, parked: parts.next().unwrap_or_default().trim().to_string() }
    }

    /// `fix rounds: 1 CI, 0 review`: what the card says.
    pub fn label(&self) -> String {
        format!("fix rounds: {} CI, {} review", self.ci_rounds, self.review_rounds)
    }
}

/// What an open execution is doing, for its card.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct CardLive {
    /// Agents of the attempts running now, with their steps (`1.2 backend-engineer`).
    pub running: Vec<String>,
    /// The execution's forecast (mid, every step), USD: the one the execution page shows
    /// (`forecast_mid_usd` is the enrichment's, made before firing).
    pub forecast_usd: f64,
    /// The execution's ceiling, USD.
    pub ceiling_usd: Option<f64>,
    /// The spend bar: spend, forecast and ceiling as percentages of its width.
    pub bar: SpendBar,
}

/// Spend against forecast and ceiling as a bar: the bar's full width is the largest of the
/// three amounts.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, utoipa::ToSchema)]
pub struct SpendBar {
    /// Width of the spent part, percent (0–100).
    pub spent_pct: u32,
    /// Where the forecast mark stands, percent; `None` without a forecast.
    pub forecast_pct: Option<u32>,
    /// Where the ceiling mark stands, percent; `None` without a ceiling.
    pub ceiling_pct: Option<u32>,
    /// Spent more than the forecast.
    pub over_forecast: bool,
}

impl SpendBar {
    /// The bar of `spent` against `forecast` (0: none) and `ceiling`.
    pub fn new(spent: f64, forecast: f64, ceiling: Option<f64>) -> SpendBar {
        let full = spent.max(forecast).max(ceiling.unwrap_or(0.0));
        let pct = |x: f64| if full > 0.0 { ((x / full) * 100.0).round().clamp(0.0, 100.0) as u32 } else { 0 };
        SpendBar {
            spent_pct: pct(spent),
            forecast_pct: (forecast > 0.0).then(|| pct(forecast)),
            ceiling_pct: ceiling.filter(|c| *c > 0.0).map(pct),
            over_forecast: forecast > 0.0 && spent > forecast + 1e-9,
        }
    }
}

/// What an open execution is doing, from its card row (the running attempts, forecast and
/// ceiling the journal's triggers keep, migration 0011).
pub fn card_live(row: &CardRow) -> CardLive {
    let running = row.running.as_deref().unwrap_or("").lines().filter(|l| !l.is_empty()).map(String::from).collect();
    let forecast_usd = (row.execution_forecast_usd.unwrap_or(0.0) * 100.0).round() / 100.0;
    let ceiling_usd = row.ceiling_usd;
    CardLive {
        running,
        forecast_usd,
        ceiling_usd,
        bar: SpendBar::new(row.spend_usd.unwrap_or(0.0), forecast_usd, ceiling_usd),
    }
}

/// One column.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Column {
    /// Which stage it holds.
    pub stage: SpecStage,
    /// Heading.
    pub title: &'static str,
    /// Cards in the column, all pages.
    pub total: usize,
    /// The page shown (1-based).
    pub page: usize,
    /// Pages in the column.
    pub pages: usize,
    /// The cards of the page shown.
    pub cards: Vec<Card>,
}

/// The whole board.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Board {
    /// The project filter, if any.
    pub project: Option<String>,
    /// Whether this is the archive (cancelled specs in one column).
    pub archived: bool,
    /// Every project name, for the filter.
    pub projects: Vec<String>,
    /// The columns in order.
    pub columns: Vec<Column>,
    /// Executions waiting for a human decision (approval or feedback).
    pub decisions_waiting: usize,
}

/// An RFC 3339 time as `2026-12-02T16:00:00+00:00` (UTC, whole seconds), as the journal
/// writes it; unchanged when it is not one.
fn normal_utc(t: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(t).map_or_else(
        |_| t.to_string(),
        |t| t.with_timezone(&chrono::Utc).to_rfc3339_opts(chrono::SecondsFormat::Secs, false),
    )
}

/// What a card in `stage` waits for.
fn waits_for(stage: SpecStage, row: &CardRow) -> Option<String> {
    let phase = row.current_phase.clone().unwrap_or_default();
    let open = matches!(stage, SpecStage::Executing | SpecStage::AwaitingHuman | SpecStage::Validating);
    // A remediation round on an open pull request parks too (its fix conflicts with what
    // someone pushed): the card says so in `pr_open`.
    let resumable = open || stage == SpecStage::PrOpen;
    if let Some(reason) = row.park_reason.as_ref().filter(|_| resumable) {
        return Some(format!("a resume (parked: {reason})"));
    }
    if row.paused && resumable {
        return Some("a resume (paused by an operator)".into());
    }
    if let Some((account, until)) = row.quota_wait.as_deref().filter(|_| open).and_then(|q| q.split_once(' ')) {
        // `waiting for claude quota until 16:00 UTC` reads as what the card waits for.
        let note = crate::model::state::quota_note(account, &normal_utc(until));
        return Some(note.trim_start_matches("waiting for ").to_string());
    }
    if let Some((done, total)) = row.ci_wait.as_deref().filter(|_| open).and_then(|c| c.split_once(' ')) {
        // `waiting for CI: 3 of 5 checks done` reads as what the card waits for.
        let note = crate::model::state::ci_note(done.parse().unwrap_or(0), total.parse().unwrap_or(0));
        return Some(note.trim_start_matches("waiting for ").to_string());
    }
    match (stage, row.execution_status.as_deref()) {
        (SpecStage::AwaitingHuman, status) => crate::runtime::views::waits_for(status.unwrap_or_default(), &phase),
        (SpecStage::Validating, Some("gate_failed")) => Some(format!("gate retry of phase {phase}")),
        (SpecStage::Validating, _) => Some(format!("gate of phase {phase}")),
        (SpecStage::InReview, _) => Some("a reviewer".into()),
        (SpecStage::ChangelistReview, _) => Some("changelist review".into()),
        (SpecStage::PrOpen, _) => {
            let parked = row.remediation.as_deref().map(CardRemediation::parse).map(|r| r.parked);
            match parked.filter(|p| !p.is_empty()) {
                Some(why) => Some(format!("a human: {why}")),
                None => Some("CI and reviewers on the pull request".into()),
            }
        }
        (SpecStage::Queued, _) => match row.status.as_str() {
            "draft" | "imported" => Some("enrichment".into()),
            "enriched" => Some("review".into()),
            "approved" => Some("fire".into()),
            "bounced" => Some(format!("an edit: {}", row.status_reason)),
            _ => None,
        },
        _ => None,
    }
}

/// Turns a card row into a card: the one mapping from the store's row to what the board and
/// its JSON show (stage, pips, what it waits for and since when, the live part).
pub fn card(row: CardRow) -> Card {
    // The column the database paged it in ([`stage_sql`], generated from `SpecStage::of`).
    let stage = SpecStage::parse(&row.stage).unwrap_or(SpecStage::Queued);
    let total = usize::try_from(row.steps_total.unwrap_or(0)).unwrap_or(0).min(200);
    let done = usize::try_from(row.steps_done.unwrap_or(0)).unwrap_or(0).min(total);
    let mut agents: Vec<String> =
        row.agents.as_deref().unwrap_or("").split(',').filter(|a| !a.is_empty()).map(String::from).collect();
    agents.sort();
    let waits = waits_for(stage, &row);
    let open = matches!(stage, SpecStage::Executing | SpecStage::Validating | SpecStage::AwaitingHuman);
    let live = (open && row.task_id.is_some()).then(|| card_live(&row));
    // An open execution waits since its newest event; anything else since the spec's change.
    let since = match &row.execution_updated_at {
        Some(at) if open => at.clone(),
        _ => row.updated_at.clone(),
    };
    let pull_request = PullRequest::of(SpecStatus::parse(&row.status), row.pr_number, row.pr_url.as_deref());
    let remediation = row.remediation.as_deref().map(CardRemediation::parse);
    Card {
        remediation,
        pull_request,
        waiting_since: if waits.is_some() { since } else { String::new() },
        live,
        waits_for: waits,
        spec_id: row.spec_id,
        title: row.title,
        source: row.source,
        source_url: row.source_url,
        project: row.project,
        risk: row.risk,
        priority: row.priority,
        status: row.status,
        stage,
        agents,
        pips: (0..total).map(|i| i < done).collect(),
        current_phase: row.current_phase.unwrap_or_default(),
        spend_usd: row.spend_usd.unwrap_or(0.0),
        spend_estimated_usd: row.spend_estimated_usd,
        forecast_mid_usd: row.forecast_mid_usd,
        task_id: row.task_id,
        paused: row.paused,
    }
}

/// Execution statuses a fired spec's stage depends on (the engine's `ExecutionStatus` strings).
const EXECUTION_STATUSES: [&str; 9] = [
    "running",
    "approval_pending",
    "feedback_pending",
    "budget_exceeded",
    "gate_pending",
    "gate_failed",
    "complete",
    "failed",
    "cancelled",
];

/// The SQL expression (over `s`, the spec row, and `e`, its execution's summary row) naming a
/// card's column: generated from [`SpecStage::of`], so the database pages columns by the same
/// rule the cards are drawn with.
pub fn stage_sql() -> String {
    let mut sql = String::from("case s.status");
    for status in crate::model::spec::SPEC_STATUSES {
        let stage = if status == SpecStatus::Executing {
            let mut inner = String::from("case e.status");
            for exec in EXECUTION_STATUSES {
                let (closed, opened) =
                    (SpecStage::of_pull(status, Some(exec), false), SpecStage::of_pull(status, Some(exec), true));
                if closed == opened {
                    inner.push_str(&format!(" when '{exec}' then '{}'", closed.as_str()));
                } else {
                    // `m`: the merge row with a pull request (the card query's join).
                    inner.push_str(&format!(
                        " when '{exec}' then case when m.pr_url is null then '{}' else '{}' end",
                        closed.as_str(),
                        opened.as_str()
                    ));
                }
            }
            inner.push_str(&format!(" else '{}' end", SpecStage::of(status, None).as_str()));
            inner
        } else {
            format!("'{}'", SpecStage::of(status, None).as_str())
        };
        sql.push_str(&format!(" when '{}' then {stage}", status.as_str()));
    }
    sql.push_str(" else 'queued' end");
    sql
}

/// Loads the board for `query`: one page (`?page`, [`PAGE_SIZE`] cards) of every column, paged
/// in the database, so the cost does not grow with the number of specs beyond the counts. A
/// board built while nothing has changed since (same
/// [`board_version`](crate::store::Store::board_version)) is served from [`BoardCache`].
///
/// Errors: a `?project=` filter naming no project (404, naming it); the database (500).
pub async fn load(execs: &Executions, cache: &BoardCache, query: &BoardQuery) -> Result<Board, SpecError> {
    let store = execs.store();
    let page = query.page.unwrap_or(1).max(1);
    if let Some(name) = &query.project {
        // A misspelt filter is not an empty board.
        if store.project(name).await?.is_none() {
            return Err(SpecError::NotFound(format!("no project named {name}")));
        }
    }
    // Read before the board, so a change made meanwhile moves the version past the cached copy.
    let version = store.board_version().await?;
    let key = (query.project.clone(), page, query.archived);
    if let Some(board) = cache.get(&key, &version) {
        return Ok(board);
    }
    let board = build(execs, query, page).await?;
    cache.put(key, version, board.clone());
    Ok(board)
}

/// Boards already built, by query, with the [`board_version`](crate::store::Store::board_version)
/// they were built at: a board is served again while the version stands (at most
/// [`BoardCache::CAPACITY`] queries kept; beyond that the cache starts over).
#[derive(Debug, Default)]
pub struct BoardCache {
    boards: std::sync::Mutex<std::collections::HashMap<BoardKey, (String, Board)>>,
}

/// (project filter, page, archive).
type BoardKey = (Option<String>, usize, bool);

impl BoardCache {
    /// Queries kept.
    pub const CAPACITY: usize = 64;

    fn get(&self, key: &BoardKey, version: &str) -> Option<Board> {
        let boards = self.boards.lock().ok()?;
        boards.get(key).filter(|(v, _)| v == version).map(|(_, b)| b.clone())
    }

    fn put(&self, key: BoardKey, version: String, board: Board) {
        if let Ok(mut boards) = self.boards.lock() {
            if boards.len() >= Self::CAPACITY && !boards.contains_key(&key) {
                boards.clear();
            }
            boards.insert(key, (version, board));
        }
    }
}

/// The board of `query` at `page`, from the database.
async fn build(execs: &Executions, query: &BoardQuery, page: usize) -> Result<Board, SpecError> {
    let store = execs.store();
    let size = i64::try_from(PAGE_SIZE).unwrap_or(20);
    let offset = i64::try_from(page - 1).unwrap_or(0).saturating_mul(size);
    let (rows, counts) = store.card_page(&stage_sql(), query.project.as_deref(), query.archived, offset, size).await?;
    let count = |stage: SpecStage| {
        counts.iter().find(|(s, _)| s == stage.as_str()).map_or(0, |(_, n)| usize::try_from(*n).unwrap_or(0))
    };
    let cards: Vec<Card> = rows.into_iter().map(card).collect();
    let stages: Vec<SpecStage> = if query.archived { vec![SpecStage::Cancelled] } else { BOARD_STAGES.to_vec() };
    let columns = stages
        .into_iter()
        .map(|stage| {
            let total = count(stage);
            let pages = total.div_ceil(PAGE_SIZE).max(1);
            let cards = cards.iter().filter(|c| c.stage == stage).cloned().collect();
            // The page asked for, even past the column's last: its cards are that page's
            // (none), which `page: 1` claimed otherwise (found by a tester).
            Column { stage, title: stage.title(), total, page, pages, cards }
        })
        .collect();
    let decisions_waiting = if query.archived { 0 } else { count(SpecStage::AwaitingHuman) };
    let projects = store.list_projects().await?.into_iter().map(|p| p.name).collect();
    Ok(Board { project: query.project.clone(), archived: query.archived, projects, columns, decisions_waiting })
}

impl Card {
    /// Steps done (its done pips).
    pub fn steps_done(&self) -> usize {
        self.pips.iter().filter(|d| **d).count()
    }
}
