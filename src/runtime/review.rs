//! What a reviewer sees before deciding an approval: each step of the phase with its agent's
//! summary and the files it changed (a diff per file), the phase's gate runs with their
//! output, spend against forecast, and the decisions already taken on the execution.
//!
//! Read only: the diffs come from the step commits on the feature branch (never from a
//! worktree), everything else from the execution's state. Shared by every page where an
//! approval is decided (the execution page, `/approvals`, the approval link's page).

use serde::Serialize;

use crate::engine;
use crate::git::GitRepo;
use crate::model::state::ExecutionState;
use crate::runtime::blocking;
use crate::runtime::config::DataDir;
use crate::runtime::runs::read_meta;

/// Diff text shown per phase review, bytes (the rest: see the changelist page).
pub const MAX_REVIEW_DIFF_BYTES: usize = 256 * 1024;

/// Lines shown per file's diff.
pub const MAX_FILE_LINES: usize = 600;

/// The kind of a diff line (the template colours it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LineKind {
    /// `+` a line added.
    Add,
    /// `-` a line removed.
    Del,
    /// `@@ … @@` a hunk header.
    Hunk,
    /// An unchanged line, or a header line (`index …`, `new file mode …`).
    Context,
}

impl LineKind {
    /// The CSS class of the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            LineKind::Add => "add",
            LineKind::Del => "del",
            LineKind::Hunk => "hunk",
            LineKind::Context => "ctx",
        }
    }
}

/// One line of a file's diff (untrusted text: escaped when rendered).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiffLine {
    /// What it is.
    pub kind: LineKind,
    /// The line, with its `+`/`-`/` ` prefix, without the newline.
    pub text: String,
}

/// One file a step changed, with its diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileDiff {
    /// Path (the new path of a rename).
    pub path: String,
    /// Lines added.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
    /// The diff's lines (after the `diff --git`, `---` and `+++` headers), at most
    /// [`MAX_FILE_LINES`].
    pub lines: Vec<DiffLine>,
    /// Lines left out (over [`MAX_FILE_LINES`] or the review's byte limit).
    pub cut_lines: usize,
}

/// One step of the phase under review.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReviewStep {
    /// Step id.
    pub step_id: String,
    /// Agent of its latest attempt.
    pub agent_name: String,
    /// Its status (`complete`, `failed`, …).
    pub status: &'static str,
    /// The agent's final text (untrusted).
    pub summary: String,
    /// Spent, USD.
    pub cost_usd: f64,
    /// Its forecast (mid), USD, when the execution has one.
    pub forecast_usd: Option<f64>,
    /// Its commit, short.
    pub commit_short: String,
    /// Files it changed, with diffs.
    pub files: Vec<FileDiff>,
}

/// One gate run of the phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReviewGate {
    /// The phase whose gate it is.
    pub phase_id: i64,
    /// Gate type (`test`, `build`, …).
    pub gate_type: String,
    /// The command, empty for a manual result.
    pub command: String,
    /// True only for a pass (false for a failure and for a skip).
    pub passed: bool,
    /// `passed`, `failed` or `skipped` (nothing to run: not a pass).
    pub outcome: &'static str,
    /// Why it was skipped (`no files changed`, `no command`), empty otherwise.
    pub skip_reason: String,
    /// Its 1-based run.
    pub attempt: u32,
    /// When (RFC 3339).
    pub checked_at: String,
    /// Output tail (untrusted).
    pub output: String,
}

/// A decision already taken on the execution.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EarlierDecision {
    /// `approval of phase 1`, `feedback on phase 2: <question>`, `budget raise`.
    pub what: String,
    /// The result (`approve`, `reject`, the chosen option, `+$2.00`).
    pub result: String,
    /// The reviewer's comment.
    pub comment: String,
    /// Who.
    pub actor: String,
    /// When (RFC 3339).
    pub at: String,
}

/// Everything a reviewer needs to decide the approval of one phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseReview {
    /// The phase.
    pub phase_id: i64,
    /// Its name.
    pub phase_name: String,
    /// Its steps (team members and synthesis after their step).
    pub steps: Vec<ReviewStep>,
    /// The gate runs of this phase and the phases before it, in order (a phase's own gate
    /// runs after its approval, so an approval sees the gates that led to it).
    pub gates: Vec<ReviewGate>,
    /// This phase's own gate command when it has not run yet (it runs after the approval);
    /// empty otherwise.
    pub gate_after: String,
    /// Spent by the phase's steps, USD.
    pub phase_spend_usd: f64,
    /// Forecast of the phase's steps (mid), USD; 0 without a forecast.
    pub phase_forecast_usd: f64,
    /// Spent by the execution, USD.
    pub spend_usd: f64,
    /// Forecast of the execution (mid, every step), USD; 0 without a forecast.
    pub forecast_usd: f64,
    /// The execution's ceiling, USD.
    pub ceiling_usd: Option<f64>,
    /// Decisions taken on the execution so far, oldest first.
    pub decisions: Vec<EarlierDecision>,
    /// Why no diff is shown, when none can be (an execution driven elsewhere, a branch gone).
    pub diff_note: String,
}

/// Splits a unified diff of one commit into files ([`FileDiff`]), at most `max_bytes` of
/// diff lines in all.
pub fn split_patch(patch: &str, max_bytes: usize) -> Vec<FileDiff> {
    let mut files: Vec<FileDiff> = Vec::new();
    let mut in_header = true;
    let mut budget = max_bytes;
    for line in patch.lines() {
        if let Some(rest) = line.strip_prefix("diff --git ") {
            // `a/<path> b/<path>`: the new path is after the last ` b/`.
            let path = rest.rfind(" b/").map_or(rest, |i| &rest[i + 3..]).to_string();
            files.push(FileDiff { path, added: 0, removed: 0, lines: Vec::new(), cut_lines: 0 });
            in_header = true;
            continue;
        }
        let Some(file) = files.last_mut() else { continue };
        if in_header && !line.starts_with("@@") {
            // `index …`, `--- a/…`, `+++ b/…`, mode lines: the file's name says it all, except
            // what is worth knowing (a new, deleted, renamed or binary file).
            if line.starts_with("new file") || line.starts_with("deleted file") || line.starts_with("Binary") {
                file.lines.push(DiffLine { kind: LineKind::Context, text: line.to_string() });
            }
            continue;
        }
        in_header = false;
        let kind = match line.as_bytes().first() {
            Some(b'+') => {
                file.added += 1;
                LineKind::Add
            }
            Some(b'-') => {
                file.removed += 1;
                LineKind::Del
            }
            Some(b'@') => LineKind::Hunk,
            _ => LineKind::Context,
        };
        if file.lines.len() >= MAX_FILE_LINES || line.len() > budget {
            file.cut_lines += 1;
            budget = 0;
            continue;
        }
        budget -= line.len();
        file.lines.push(DiffLine { kind, text: line.to_string() });
    }
    files
}

/// The review of phase `phase_id` of `state`'s execution (`None`: no such phase).
///
/// Diffs are read from the step commits in the execution's repository; when they cannot be
/// (no run record here: another replica ran it, or an external orchestrator drives it; a
/// repository or commit gone) the steps
/// are listed without them and [`PhaseReview::diff_note`] says why.
pub async fn phase_review(data: &DataDir, state: &ExecutionState, phase_id: i64) -> Option<PhaseReview> {
    let phase = state.plan.phases.iter().find(|p| p.phase_id == phase_id)?;
    let forecast = |id: &str| state.budget.forecasts.get(id).map(|f| f.mid_usd);
    let ids: Vec<String> =
        phase.steps.iter().flat_map(|s| std::iter::once(s.step_id.clone()).chain(engine::team::unit_ids(s))).collect();
    let mut steps: Vec<ReviewStep> = ids
        .iter()
        .map(|id| {
            let r = state.result(id);
            let plan_agent = engine::team::work_step(state, id).map(|s| s.agent_name.clone()).unwrap_or_default();
            ReviewStep {
                step_id: id.clone(),
                agent_name: r.map_or(plan_agent, |r| r.agent_name.clone()),
                status: r.map_or("pending", |r| r.status.as_str()),
                summary: r.map(|r| r.outcome.clone()).unwrap_or_default(),
                cost_usd: r.map_or(0.0, |r| r.cost_usd),
                forecast_usd: forecast(id),
                commit_short: r
                    .map(|r| r.commit_hash.get(..10).unwrap_or(&r.commit_hash).to_string())
                    .unwrap_or_default(),
                files: Vec::new(),
            }
        })
        .collect();
    let commits: Vec<(usize, String)> = ids
        .iter()
        .enumerate()
        .filter_map(|(i, id)| state.result(id).map(|r| (i, r.commit_hash.clone())))
        .filter(|(_, sha)| !sha.is_empty())
        .collect();
    let mut diff_note = String::new();
    if !commits.is_empty() {
        match read_meta(data, &state.task_id) {
            Ok(Some(meta)) => {
                let read = blocking(move || -> anyhow::Result<Vec<(usize, Vec<FileDiff>)>> {
                    let repo = GitRepo::open(&meta.repo)?;
                    let mut left = MAX_REVIEW_DIFF_BYTES;
                    let mut out = Vec::new();
                    for (i, sha) in commits {
                        let (patch, _) = repo.diff_patch(&format!("{sha}^"), &sha, left.max(1))?;
                        left = left.saturating_sub(patch.len());
                        out.push((i, split_patch(&patch, MAX_REVIEW_DIFF_BYTES)));
                    }
                    Ok(out)
                })
                .await;
                match read {
                    Ok(Ok(diffs)) => {
                        for (i, files) in diffs {
                            steps[i].files = files;
                        }
                    }
                    Ok(Err(e)) | Err(e) => diff_note = format!("the diffs cannot be read: {e:#}"),
                }
            }
            Ok(None) => {
                diff_note = format!(
                    "no record of its run here (runs/{}/execution.json): the diffs are where it ran (another \
                     replica), or an external orchestrator drives it and keeps no branch here",
                    state.task_id
                )
            }
            Err(e) => diff_note = format!("the diffs cannot be read: {e:#}"),
        }
    }
    let gates = state
        .gate_results
        .iter()
        .filter(|g| g.phase_id <= phase_id)
        .map(|g| ReviewGate {
            phase_id: g.phase_id,
            gate_type: g.gate_type.clone(),
            command: g.command.clone(),
            passed: g.passed,
            outcome: g.outcome().as_str(),
            skip_reason: g.skipped.clone().unwrap_or_default(),
            attempt: g.attempt,
            checked_at: g.checked_at.clone(),
            output: g.output.clone(),
        })
        .collect();
    let gate_after = match &phase.gate {
        Some(g) if !state.gate_results.iter().any(|r| r.phase_id == phase_id) => g.command.clone(),
        _ => String::new(),
    };
    let round = |x: f64| (x * 100.0).round() / 100.0;
    Some(PhaseReview {
        phase_id,
        phase_name: phase.name.clone(),
        phase_spend_usd: round(steps.iter().map(|s| s.cost_usd).sum()),
        phase_forecast_usd: round(steps.iter().filter_map(|s| s.forecast_usd).sum()),
        steps,
        gates,
        gate_after,
        spend_usd: state.counters.spend_usd,
        forecast_usd: round(state.budget.forecasts.values().map(|f| f.mid_usd).sum()),
        ceiling_usd: state.budget.ceiling_usd,
        decisions: decisions(state),
        diff_note,
    })
}

/// The decisions taken on `state`'s execution (approvals, feedback answers, ceiling raises),
/// oldest first.
pub fn decisions(state: &ExecutionState) -> Vec<EarlierDecision> {
    let mut out: Vec<EarlierDecision> = state
        .approval_results
        .iter()
        .map(|a| EarlierDecision {
            what: if a.preflight {
                "pre-flight approval".into()
            } else if !a.team_step.is_empty() {
                format!("file conflict of step {}", a.team_step)
            } else {
                format!("approval of phase {}", a.phase_id)
            },
            result: a.result.as_str().to_string(),
            comment: a.feedback.clone(),
            actor: a.actor.clone(),
            at: a.decided_at.clone(),
        })
        .collect();
    out.extend(state.feedback_results.iter().map(|f| EarlierDecision {
        what: format!("feedback on phase {} ({})", f.phase_id, f.question_id),
        result: f.chosen_option.clone(),
        comment: String::new(),
        actor: String::new(),
        at: String::new(),
    }));
    out.extend(state.budget.raises.iter().map(|r| EarlierDecision {
        what: "budget ceiling".into(),
        result: format!("raised by ${:.2}", r.by_usd),
        comment: String::new(),
        actor: r.actor.clone(),
        at: r.at.clone(),
    }));
    out.sort_by(|a, b| a.at.cmp(&b.at));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "diff --git a/docs/a.md b/docs/a.md\nnew file mode 100644\nindex 0000000..e69de29\n\
--- /dev/null\n+++ b/docs/a.md\n@@ -0,0 +1,2 @@\n+hello\n+<script>\ndiff --git a/src/x.rs b/src/x.rs\n\
index 1..2 100644\n--- a/src/x.rs\n+++ b/src/x.rs\n@@ -1,3 +1,3 @@\n fn a() {}\n-fn b() {}\n+fn c() {}\n";

    #[test]
    fn a_patch_splits_into_files_with_counted_and_classed_lines() {
        let files = split_patch(PATCH, 1 << 20);
        assert_eq!(files.len(), 2);
        assert_eq!((files[0].path.as_str(), files[0].added, files[0].removed), ("docs/a.md", 2, 0));
        assert_eq!(files[0].lines[0].text, "new file mode 100644");
        assert_eq!(files[0].lines[1].kind, LineKind::Hunk);
        assert_eq!(files[0].lines[3], DiffLine { kind: LineKind::Add, text: "+<script>".into() });
        assert_eq!((files[1].path.as_str(), files[1].added, files[1].removed), ("src/x.rs", 1, 1));
        let kinds: Vec<LineKind> = files[1].lines.iter().map(|l| l.kind).collect();
        assert_eq!(kinds, [LineKind::Hunk, LineKind::Context, LineKind::Del, LineKind::Add]);
    }

    #[test]
    fn lines_over_the_byte_limit_are_counted_not_kept() {
        let files = split_patch(PATCH, 20);
        let kept: usize = files.iter().map(|f| f.lines.len()).sum();
        let cut: usize = files.iter().map(|f| f.cut_lines).sum();
        assert!(cut > 0 && kept < 8, "kept {kept}, cut {cut}");
        // Counts still cover every line.
        assert_eq!(files[1].added + files[1].removed, 2);
    }
}
