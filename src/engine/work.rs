//! What a finished agent attempt must show before its success counts: some trace of work
//! (issue 15.7: an agent that could not load its skill or model exits 0 having done nothing),
//! and no mass deletion of the repository (issue 15.8). The runtime's harvest measures the
//! attempt (tokens, cost, commit, files, the base tree) and asks these rules; they only read
//! the plan step and the numbers given, and never do IO.

use crate::model::plan::PlanStep;

/// Characters of the agent's own text quoted in a "did no work" refusal.
pub const NO_WORK_QUOTE_CHARS: usize = 1_000;

/// Why a successful-looking attempt of `step` did no work, or `None` when it counts.
///
/// No work is zero tokens, zero cost, no commit and no changed files, all at once. Steps that
/// legitimately change nothing are exempt: `expect_changes: false`, automation steps (a shell
/// command has no tokens) and goal evaluations (whose writes are never kept). The reason quotes
/// the end of `agent_text` (what the agent printed), or says it printed nothing.
pub fn no_work_reason(
    step: &PlanStep,
    tokens: u64,
    cost_usd: f64,
    commit: &str,
    files: &[String],
    agent_text: &str,
) -> Option<String> {
    if !step.expects_changes()
        || step.is_automation()
        || crate::engine::goal::is_evaluation(step)
        || crate::engine::review::is_review(step)
    {
        return None;
    }
    if tokens > 0 || cost_usd > 0.0 || !commit.is_empty() || !files.is_empty() {
        return None;
    }
    let text = agent_text.trim();
    let said = if text.is_empty() {
        "it printed nothing".to_string()
    } else {
        let start = text.char_indices().rev().nth(NO_WORK_QUOTE_CHARS - 1).map_or(0, |(i, _)| i);
        format!("its output: {}", &text[start..])
    };
    Some(format!(
        "agent did no work: no tokens, no cost, no commit and no changed files (set `expect_changes: false` on \
         step {} if it may change nothing); {said}",
        step.step_id
    ))
}

/// Why a commit of `step` that deletes `deleted` of the `tracked` files of its base is refused,
/// or `None` when it may be consolidated: more than half (`2 × deleted > tracked`) is refused
/// unless the step sets `allow_mass_deletion: true`.
pub fn mass_deletion_reason(step: &PlanStep, deleted: usize, tracked: usize) -> Option<String> {
    if step.allows_mass_deletion() || deleted == 0 || deleted.saturating_mul(2) <= tracked {
        return None;
    }
    Some(format!(
        "refused to consolidate: the commit deletes {deleted} of the {tracked} files tracked at its base (more than \
         half); set `allow_mass_deletion: true` on step {} if that is intended",
        step.step_id
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step() -> PlanStep {
        PlanStep::new("1.1", "dev", "do it")
    }

    #[test]
    fn nothing_at_all_is_no_work_and_quotes_the_agent() {
        let why = no_work_reason(&step(), 0, 0.0, "", &[], "Error: skill 'x' not found\n").unwrap();
        assert!(why.starts_with("agent did no work"), "{why}");
        assert!(why.contains("skill 'x' not found"), "{why}");
        assert!(no_work_reason(&step(), 0, 0.0, "", &[], "  ").unwrap().contains("printed nothing"));
    }

    #[test]
    fn any_trace_of_work_counts() {
        assert_eq!(no_work_reason(&step(), 1, 0.0, "", &[], ""), None);
        assert_eq!(no_work_reason(&step(), 0, 0.01, "", &[], ""), None);
        assert_eq!(no_work_reason(&step(), 0, 0.0, "abc", &[], ""), None);
        assert_eq!(no_work_reason(&step(), 0, 0.0, "", &["a".into()], ""), None);
    }

    #[test]
    fn steps_that_may_change_nothing_are_exempt() {
        let mut s = step();
        s.expect_changes = Some(false);
        assert_eq!(no_work_reason(&s, 0, 0.0, "", &[], ""), None);
        let mut s = step();
        s.expect_changes = Some(true);
        assert!(no_work_reason(&s, 0, 0.0, "", &[], "").is_some());
        let mut s = step();
        s.step_type = "automation".into();
        assert_eq!(no_work_reason(&s, 0, 0.0, "", &[], ""), None);
    }

    #[test]
    fn a_long_text_is_quoted_by_its_end() {
        let text = format!("{}END", "é".repeat(5_000));
        let why = no_work_reason(&step(), 0, 0.0, "", &[], &text).unwrap();
        assert!(why.ends_with("END"));
        assert!(why.chars().count() < NO_WORK_QUOTE_CHARS + 300);
    }

    #[test]
    fn more_than_half_deleted_is_refused_unless_allowed() {
        assert_eq!(mass_deletion_reason(&step(), 2, 4), None, "exactly half is allowed");
        assert_eq!(mass_deletion_reason(&step(), 0, 0), None);
        let why = mass_deletion_reason(&step(), 3, 4).unwrap();
        assert!(why.contains("deletes 3 of the 4 files"), "{why}");
        assert!(mass_deletion_reason(&step(), 1, 1).is_some());
        let mut s = step();
        s.allow_mass_deletion = Some(true);
        assert_eq!(mass_deletion_reason(&s, 4, 4), None);
    }
}
