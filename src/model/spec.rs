//! Specs: the spec lifecycle as a pure transition table, and where a spec stands on the board.
//!
//! The lifecycle is DESIGN.md §6: `draft | imported → enriched → in_review → approved | bounced
//! → executing → awaiting_human ⇄ validating → changelist_review → pr_open → merged` (while the
//! pull request is open, a failing check or a requested change runs the execution again:
//! `pr_open → executing → pr_open`, issue 19.3/4), plus `failed`,
//! `cancelled` and `closed_unmerged` (its pull request was closed without merging). The store keeps only the statuses a human moves a spec through
//! ([`SpecStatus`]); once a spec is fired, where it stands (executing, awaiting human,
//! validating, changelist review, failed) is read from its execution's summary
//! ([`SpecStage::of`]). This module never does IO.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The stored status of a spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SpecStatus {
    /// Written on the board, not enriched yet.
    Draft,
    /// Imported from a forge (GitHub issue, Azure DevOps work item), not enriched yet.
    Imported,
    /// Has a plan, a risk tier and a cost forecast.
    Enriched,
    /// Submitted for human review.
    InReview,
    /// Approved by a reviewer; may be fired.
    Approved,
    /// Sent back with a reason; may be edited and enriched again.
    Bounced,
    /// Fired: its execution exists (see [`SpecStage`] for where it stands).
    Executing,
    /// Its pull request was merged (final).
    Merged,
    /// Cancelled by an operator (final).
    Cancelled,
    /// Its pull request was closed on the forge without being merged (final; issue 19.5).
    ClosedUnmerged,
}

/// Every stored status, in lifecycle order.
pub const SPEC_STATUSES: [SpecStatus; 10] = [
    SpecStatus::Draft,
    SpecStatus::Imported,
    SpecStatus::Enriched,
    SpecStatus::InReview,
    SpecStatus::Approved,
    SpecStatus::Bounced,
    SpecStatus::Executing,
    SpecStatus::Merged,
    SpecStatus::Cancelled,
    SpecStatus::ClosedUnmerged,
];

impl SpecStatus {
    /// The wire and database string (`draft`, `in_review`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            SpecStatus::Draft => "draft",
            SpecStatus::Imported => "imported",
            SpecStatus::Enriched => "enriched",
            SpecStatus::InReview => "in_review",
            SpecStatus::Approved => "approved",
            SpecStatus::Bounced => "bounced",
            SpecStatus::Executing => "executing",
            SpecStatus::Merged => "merged",
            SpecStatus::Cancelled => "cancelled",
            SpecStatus::ClosedUnmerged => "closed_unmerged",
        }
    }

    /// Parses [`SpecStatus::as_str`]'s strings; `None` for anything else.
    pub fn parse(s: &str) -> Option<SpecStatus> {
        SPEC_STATUSES.into_iter().find(|st| st.as_str() == s)
    }

    /// Merged, cancelled and closed-unmerged specs accept no action.
    pub fn is_final(self) -> bool {
        matches!(self, SpecStatus::Merged | SpecStatus::Cancelled | SpecStatus::ClosedUnmerged)
    }
}

impl fmt::Display for SpecStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a person (or an importer) does to a spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SpecAction {
    /// Change the title, body or priority: the plan no longer matches, so the spec is a
    /// draft again.
    Edit,
    /// Attach a generated plan, risk tier and forecast (again, after an edit or a bounce).
    Enrich,
    /// Replace the plan with an uploaded MachinePlan (a new forecast is made for it).
    UploadPlan,
    /// Ask for review.
    Submit,
    /// A reviewer approves it.
    Approve,
    /// A reviewer sends it back with a reason.
    Bounce,
    /// Start its execution.
    Fire,
    /// Firing failed after the spec was claimed: it is approved again.
    FireFailed,
    /// Stop it (and its execution, when fired).
    Cancel,
    /// Its forge item changed (a webhook): new title and body, the plan dropped, imported
    /// again.
    Reimport,
    /// Its pull request was merged on the forge.
    Merged,
    /// Its pull request was closed on the forge without being merged.
    ClosedUnmerged,
}

impl SpecAction {
    /// The journal string (`edit`, `upload_plan`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            SpecAction::Edit => "edit",
            SpecAction::Enrich => "enrich",
            SpecAction::UploadPlan => "upload_plan",
            SpecAction::Submit => "submit",
            SpecAction::Approve => "approve",
            SpecAction::Bounce => "bounce",
            SpecAction::Fire => "fire",
            SpecAction::FireFailed => "fire_failed",
            SpecAction::Cancel => "cancel",
            SpecAction::Reimport => "reimport",
            SpecAction::Merged => "merged",
            SpecAction::ClosedUnmerged => "closed_unmerged",
        }
    }
}

/// An action the spec's status does not allow; the web layer answers 409 with `current`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot {} a spec that is {current} (allowed from: {allowed})", action.as_str())]
pub struct IllegalTransition {
    /// The refused action.
    pub action: SpecAction,
    /// The spec's status.
    pub current: SpecStatus,
    /// The statuses the action is allowed from, comma-separated.
    pub allowed: String,
}

/// The statuses `action` is allowed from, and the status it leads to.
pub fn rule(action: SpecAction) -> (&'static [SpecStatus], SpecStatus) {
    use SpecStatus::*;
    match action {
        SpecAction::Edit => (&[Draft, Imported, Enriched, InReview, Bounced], Draft),
        SpecAction::Enrich | SpecAction::UploadPlan => (&[Draft, Imported, Enriched, Bounced], Enriched),
        SpecAction::Submit => (&[Enriched], InReview),
        SpecAction::Approve => (&[Enriched, InReview], Approved),
        SpecAction::Bounce => (&[Enriched, InReview], Bounced),
        SpecAction::Fire => (&[Approved], Executing),
        SpecAction::FireFailed => (&[Executing], Approved),
        SpecAction::Cancel => (&[Draft, Imported, Enriched, InReview, Approved, Bounced, Executing], Cancelled),
        SpecAction::Reimport => (&[Draft, Imported, Enriched, InReview, Bounced], Imported),
        SpecAction::Merged => (&[Executing], Merged),
        SpecAction::ClosedUnmerged => (&[Executing], ClosedUnmerged),
    }
}

/// The status `action` moves a spec in `current` to.
///
/// Errors: [`IllegalTransition`] when `current` is not one the action is allowed from (every
/// action is refused on a merged or cancelled spec).
pub fn transition(current: SpecStatus, action: SpecAction) -> Result<SpecStatus, IllegalTransition> {
    let (from, to) = rule(action);
    if from.contains(&current) {
        return Ok(to);
    }
    Err(IllegalTransition { action, current, allowed: from.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ") })
}

/// Where a spec stands: its stored status before it is fired, its execution's afterwards.
/// The board's columns group these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SpecStage {
    /// Draft, imported, enriched, approved or bounced.
    Queued,
    /// Submitted for review.
    InReview,
    /// Its execution dispatches steps or waits for running agents.
    Executing,
    /// Its execution waits for an approval or feedback.
    AwaitingHuman,
    /// A gate must run, or failed and is retried.
    Validating,
    /// Its execution completed: the changelist is ready for review.
    ChangelistReview,
    /// Its execution completed and its pull request is open on the forge: CI and reviewers
    /// have it; a failing check or a requested change starts a remediation round (issue 19.3).
    PrOpen,
    /// Merged.
    Merged,
    /// Its pull request was closed without merging.
    ClosedUnmerged,
    /// Its execution failed.
    Failed,
    /// Cancelled (shown in the archive, not on the board).
    Cancelled,
}

/// The board's columns in order (cancelled specs are archived, not a column).
pub const BOARD_STAGES: [SpecStage; 10] = [
    SpecStage::Queued,
    SpecStage::InReview,
    SpecStage::Executing,
    SpecStage::AwaitingHuman,
    SpecStage::Validating,
    SpecStage::ChangelistReview,
    SpecStage::PrOpen,
    SpecStage::Merged,
    SpecStage::ClosedUnmerged,
    SpecStage::Failed,
];

impl SpecStage {
    /// Where a spec with stored `status` stands, given its execution's summary status and
    /// whether its pull request is open: a completed execution whose pull request was opened
    /// is [`SpecStage::PrOpen`], otherwise as [`SpecStage::of`].
    pub fn of_pull(status: SpecStatus, execution_status: Option<&str>, pr_opened: bool) -> SpecStage {
        match SpecStage::of(status, execution_status) {
            SpecStage::ChangelistReview if pr_opened => SpecStage::PrOpen,
            stage => stage,
        }
    }

    /// Where a spec with stored `status` stands, given its execution's summary status
    /// (`running`, `approval_pending`, …; `None` before it is fired), before any pull request
    /// is known (see [`SpecStage::of_pull`]).
    pub fn of(status: SpecStatus, execution_status: Option<&str>) -> SpecStage {
        match status {
            SpecStatus::Draft
            | SpecStatus::Imported
            | SpecStatus::Enriched
            | SpecStatus::Approved
            | SpecStatus::Bounced => SpecStage::Queued,
            SpecStatus::InReview => SpecStage::InReview,
            SpecStatus::Merged => SpecStage::Merged,
            SpecStatus::ClosedUnmerged => SpecStage::ClosedUnmerged,
            SpecStatus::Cancelled => SpecStage::Cancelled,
            SpecStatus::Executing => match execution_status {
                Some("approval_pending" | "feedback_pending" | "budget_exceeded") => SpecStage::AwaitingHuman,
                Some("gate_pending" | "gate_failed") => SpecStage::Validating,
                Some("complete") => SpecStage::ChangelistReview,
                Some("failed") => SpecStage::Failed,
                Some("cancelled") => SpecStage::Cancelled,
                _ => SpecStage::Executing,
            },
        }
    }

    /// The wire string (`awaiting_human`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            SpecStage::Queued => "queued",
            SpecStage::InReview => "in_review",
            SpecStage::Executing => "executing",
            SpecStage::AwaitingHuman => "awaiting_human",
            SpecStage::Validating => "validating",
            SpecStage::ChangelistReview => "changelist_review",
            SpecStage::PrOpen => "pr_open",
            SpecStage::Merged => "merged",
            SpecStage::ClosedUnmerged => "closed_unmerged",
            SpecStage::Failed => "failed",
            SpecStage::Cancelled => "cancelled",
        }
    }

    /// The column heading on the board.
    pub fn title(self) -> &'static str {
        match self {
            SpecStage::Queued => "Queued",
            SpecStage::InReview => "In review",
            SpecStage::Executing => "Executing",
            SpecStage::AwaitingHuman => "Awaiting human",
            SpecStage::Validating => "Validating",
            SpecStage::ChangelistReview => "Changelist review",
            SpecStage::PrOpen => "Pull request open",
            SpecStage::Merged => "Merged",
            SpecStage::ClosedUnmerged => "Closed unmerged",
            SpecStage::Failed => "Failed",
            SpecStage::Cancelled => "Archive",
        }
    }

    /// Parses [`SpecStage::as_str`]'s strings.
    pub fn parse(s: &str) -> Option<SpecStage> {
        BOARD_STAGES.into_iter().chain([SpecStage::Cancelled]).find(|st| st.as_str() == s)
    }
}

/// Where a spec's pull request stands on the forge, as Baton learns it from webhooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PullState {
    /// Opened and not closed yet.
    Open,
    /// Merged (the spec is `merged`).
    Merged,
    /// Closed without merging (the spec is `closed_unmerged`).
    ClosedUnmerged,
}

/// An execution's pull request: what its card, its page and the API show (issue 19.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PullRequest {
    /// Its number (GitHub) or id (Azure DevOps).
    pub number: i64,
    /// Its web address.
    pub url: String,
    /// Where it stands.
    pub state: PullState,
}

impl PullState {
    /// The wire string (`open`, `merged`, `closed_unmerged`).
    pub fn as_str(self) -> &'static str {
        match self {
            PullState::Open => "open",
            PullState::Merged => "merged",
            PullState::ClosedUnmerged => "closed_unmerged",
        }
    }
}

impl PullRequest {
    /// The pull request opened as `number` at `url` for a spec in `status` (its state follows
    /// the spec: merged and closed-unmerged are recorded there by the forges' webhooks); `None`
    /// before one was opened (no number or an empty address).
    pub fn of(status: Option<SpecStatus>, number: Option<i64>, url: Option<&str>) -> Option<PullRequest> {
        let (number, url) = (number?, url.filter(|u| !u.is_empty())?);
        let state = match status {
            Some(SpecStatus::Merged) => PullState::Merged,
            Some(SpecStatus::ClosedUnmerged) => PullState::ClosedUnmerged,
            _ => PullState::Open,
        };
        Some(PullRequest { number, url: url.to_string(), state })
    }

    /// `#12 open`, `#12 merged`, `#12 closed unmerged`: the card's and page's words.
    pub fn label(&self) -> String {
        format!("#{} {}", self.number, self.state.as_str().replace('_', " "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_happy_path_reaches_executing() {
        let mut s = SpecStatus::Draft;
        for a in [SpecAction::Enrich, SpecAction::Submit, SpecAction::Approve, SpecAction::Fire] {
            s = transition(s, a).expect("allowed");
        }
        assert_eq!(s, SpecStatus::Executing);
    }

    #[test]
    fn a_bounced_spec_is_edited_and_enriched_again() {
        let s = transition(SpecStatus::InReview, SpecAction::Bounce).expect("bounce");
        assert_eq!(s, SpecStatus::Bounced);
        assert_eq!(transition(s, SpecAction::Fire).map_err(|e| e.current), Err(SpecStatus::Bounced));
        let s = transition(s, SpecAction::Edit).expect("edit");
        assert_eq!(transition(s, SpecAction::Enrich), Ok(SpecStatus::Enriched));
    }

    #[test]
    fn final_specs_refuse_every_action_and_name_their_status() {
        for status in [SpecStatus::Merged, SpecStatus::Cancelled, SpecStatus::ClosedUnmerged] {
            for a in [SpecAction::Edit, SpecAction::Enrich, SpecAction::Approve, SpecAction::Fire, SpecAction::Cancel] {
                let err = transition(status, a).expect_err("final");
                assert_eq!(err.current, status);
                assert!(err.to_string().contains(status.as_str()), "{err}");
            }
        }
    }

    #[test]
    fn only_an_executing_spec_is_merged_and_merged_is_final() {
        assert_eq!(transition(SpecStatus::Executing, SpecAction::Merged), Ok(SpecStatus::Merged));
        for s in SPEC_STATUSES.into_iter().filter(|s| *s != SpecStatus::Executing) {
            let err = transition(s, SpecAction::Merged).expect_err("only from executing");
            assert_eq!(err.allowed, "executing");
        }
        assert!(SpecStatus::Merged.is_final());
        assert!(transition(SpecStatus::Merged, SpecAction::Cancel).is_err());
    }

    #[test]
    fn a_forge_update_reimports_until_the_spec_is_approved() {
        for s in
            [SpecStatus::Draft, SpecStatus::Imported, SpecStatus::Enriched, SpecStatus::InReview, SpecStatus::Bounced]
        {
            assert_eq!(transition(s, SpecAction::Reimport), Ok(SpecStatus::Imported));
        }
        for s in [SpecStatus::Approved, SpecStatus::Executing, SpecStatus::Merged, SpecStatus::Cancelled] {
            assert!(transition(s, SpecAction::Reimport).is_err(), "{s}");
        }
    }

    #[test]
    fn firing_needs_an_approval_and_happens_once() {
        assert!(transition(SpecStatus::Enriched, SpecAction::Fire).is_err());
        assert!(transition(SpecStatus::Executing, SpecAction::Fire).is_err());
    }

    #[test]
    fn stage_follows_the_execution_once_fired() {
        let st = |e| SpecStage::of(SpecStatus::Executing, e);
        assert_eq!(st(Some("running")), SpecStage::Executing);
        assert_eq!(st(Some("approval_pending")), SpecStage::AwaitingHuman);
        assert_eq!(st(Some("budget_exceeded")), SpecStage::AwaitingHuman);
        assert_eq!(st(Some("gate_failed")), SpecStage::Validating);
        assert_eq!(st(Some("complete")), SpecStage::ChangelistReview);
        assert_eq!(SpecStage::of_pull(SpecStatus::Executing, Some("complete"), true), SpecStage::PrOpen);
        assert_eq!(SpecStage::of_pull(SpecStatus::Executing, Some("running"), true), SpecStage::Executing);
        assert_eq!(st(Some("failed")), SpecStage::Failed);
        assert_eq!(SpecStage::of(SpecStatus::Approved, None), SpecStage::Queued);
        for s in SPEC_STATUSES {
            assert_eq!(SpecStatus::parse(s.as_str()), Some(s));
        }
    }

    #[test]
    fn a_pull_request_stands_where_its_spec_does() {
        let url = Some("https://github.com/o/r/pull/7");
        assert_eq!(PullRequest::of(Some(SpecStatus::Executing), None, url), None);
        assert_eq!(PullRequest::of(Some(SpecStatus::Executing), Some(7), Some("")), None);
        let open = PullRequest::of(Some(SpecStatus::Executing), Some(7), url).expect("opened");
        assert_eq!((open.state, open.label().as_str()), (PullState::Open, "#7 open"));
        let merged = PullRequest::of(Some(SpecStatus::Merged), Some(7), url).expect("opened");
        assert_eq!(merged.state, PullState::Merged);
        let closed = PullRequest::of(Some(SpecStatus::ClosedUnmerged), Some(7), url).expect("opened");
        assert_eq!(closed.label(), "#7 closed unmerged");
    }
}
