//! Team steps in the runtime: what each member changed in a file an escalated conflict names.
//!
//! The engine's APPROVAL for an escalated team conflict (seed-spec §3.6) lists each member's
//! outcome and commit; [`with_member_diffs`] adds each member's change of each conflicting file
//! (the diff of its commit on the feature branch, limited to that file and cut at
//! [`MAX_DIFF_BYTES`]), read from the execution's repository. It only reads.

use crate::git::GitRepo;
use crate::model::state::ExecutionState;
use crate::runtime::config::DataDir;
use crate::runtime::{blocking, runs};

/// Largest diff shown per member and file, bytes.
pub const MAX_DIFF_BYTES: usize = 8000;

/// `context` (the approval context of `state`'s pending approval) with, when that approval
/// decides a team step's file conflict, a `## Changes` section: per conflicting file, each
/// member's diff of it. Unchanged for any other approval, and for a diff git cannot produce.
pub fn with_member_diffs(repo: &GitRepo, state: &ExecutionState, context: &str) -> String {
    let Some(step_id) = state.pending_approval_request.as_ref().map(|r| r.team_step.as_str()).filter(|s| !s.is_empty())
    else {
        return context.to_string();
    };
    let Some(result) = state.result(step_id) else { return context.to_string() };
    let mut out = String::new();
    for conflict in &result.team_conflicts {
        for member in &conflict.members {
            let Some(commit) = state.result(member).map(|r| r.commit_hash.as_str()).filter(|c| !c.is_empty()) else {
                continue;
            };
            let Ok((patch, _)) = repo.diff_patch(&format!("{commit}^"), commit, usize::MAX) else { continue };
            let Some(section) = file_section(&patch, &conflict.file) else { continue };
            let shown = cut(&section, MAX_DIFF_BYTES);
            out.push_str(&format!("\n### {} — {member}\n```diff\n{}\n```\n", conflict.file, shown.trim_end()));
        }
    }
    if out.is_empty() {
        return context.to_string();
    }
    format!("{}\n\n## Changes\n{out}", context.trim_end())
}

/// [`with_member_diffs`] for an execution driven by `execute run` (its repository is in the
/// run's `execution.json`); `context` unchanged when there is none.
pub async fn approval_context(data: &DataDir, state: &ExecutionState, context: String) -> String {
    if state.pending_approval_request.as_ref().is_none_or(|r| r.team_step.is_empty()) {
        return context;
    }
    let (data, state) = (data.clone(), state.clone());
    let fallback = context.clone();
    blocking(move || {
        let Ok(Some(meta)) = runs::read_meta(&data, &state.task_id) else { return context };
        match GitRepo::open(&meta.repo) {
            Ok(repo) => with_member_diffs(&repo, &state, &context),
            Err(_) => context,
        }
    })
    .await
    .unwrap_or(fallback)
}

/// The part of a unified diff about `file` (from its `diff --git` header to the next).
fn file_section(patch: &str, file: &str) -> Option<String> {
    let header = format!("diff --git a/{file} b/{file}");
    let start = patch.find(&header)?;
    let rest = &patch[start..];
    let end = rest[header.len()..].find("\ndiff --git ").map_or(rest.len(), |i| i + header.len() + 1);
    Some(rest[..end].to_string())
}

fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n… (cut at {max} bytes)", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_section_keeps_only_the_named_file() {
        let patch = "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-x\n+y\ndiff --git a/b.txt b/b.txt\n+z\n";
        assert_eq!(
            file_section(patch, "a.txt").unwrap(),
            "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-x\n+y\n"
        );
        assert_eq!(file_section(patch, "b.txt").unwrap(), "diff --git a/b.txt b/b.txt\n+z\n");
        assert!(file_section(patch, "c.txt").is_none());
        assert_eq!(cut("héllo", 2), "h\n… (cut at 2 bytes)");
    }
}
