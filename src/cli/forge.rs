//! `baton spec import` and `baton merge`: the forge commands, run on the data dir directly
//! (beside a running server, like every other command).
//!
//! Owns argument parsing and printing; the work is the runtime's
//! ([`import_from`](crate::runtime::forge::import_from) with
//! [`CLI_PACING`](crate::runtime::forge::CLI_PACING): a rate limit is waited out, then the import
//! goes on; [`merge`](crate::runtime::merge::merge)).

use std::path::Path;
use std::process::ExitCode;

use clap::Subcommand;

use crate::forge::{ForgeError, RetryPolicy};
use crate::runtime::config::DataDir;
use crate::runtime::executions::Executions;
use crate::runtime::forge::{import_from, Forges, ImportError, ImportRequest, CLI_PACING};
use crate::runtime::merge::MergeError;
use crate::runtime::pool::Pool;
use crate::runtime::specs::{ImportOutcome, SpecError, Specs};
use crate::runtime::BadInput;

use super::service::with_executions;

// `baton spec …`. (A doc comment here would become the command's about, over the one
// `Command::Spec` gives, once the subcommands are deferred.)
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(super) enum SpecCommand {
    /// Import an issue or work item as a spec (again: update it, saying what changed):
    /// `github:OWNER/REPO#N`, `ado:ORG/PROJECT#ID`; with --label, every open issue of
    /// `github:OWNER/REPO` carrying it; with --wiql, every work item the query selects in
    /// `ado:ORG/PROJECT`. A rate limit (GitHub's secondary one too) is waited out, then the
    /// import goes on. Credentials: GITHUB_TOKEN, ADO_PAT (or baton.toml).
    Import {
        /// What to import.
        reference: String,
        /// The project the specs join.
        #[arg(long, allow_negative_numbers = true)]
        project: String,
        /// Bulk: the label of the GitHub issues to import.
        #[arg(long, allow_negative_numbers = true)]
        label: Option<String>,
        /// Bulk: the WIQL query selecting the Azure DevOps work items to import.
        #[arg(long, allow_negative_numbers = true)]
        wiql: Option<String>,
    },
}

/// The forge clients of the data dir's configuration and the environment.
fn forges(data: &DataDir) -> anyhow::Result<Forges> {
    let settings = data.config()?.forge_settings(|k| std::env::var(k).ok());
    // No HTTP request limit here: a call may wait out a rate limit of up to a minute.
    let policy = RetryPolicy { deadline: std::time::Duration::from_secs(120), ..RetryPolicy::default() };
    Forges::new(settings, policy).map_err(cli_error)
}

/// A forge error as the CLI's error: a request Baton refuses is bad input (exit 2).
fn cli_error(e: ForgeError) -> anyhow::Error {
    match e {
        ForgeError::Invalid(m) => BadInput(m).into(),
        e => anyhow::Error::new(e),
    }
}

/// Runs `baton spec import`.
///
/// Errors: a bad reference or unknown project (exit 2); a forge failure (exit 1), its text
/// saying what to do.
pub(super) async fn spec_command(data_dir: &Path, command: SpecCommand, json: bool) -> anyhow::Result<ExitCode> {
    let SpecCommand::Import { reference, project, label, wiql } = command;
    let data = DataDir::open(data_dir)?;
    let request = ImportRequest::parse(&reference, label.as_deref(), wiql.as_deref()).map_err(cli_error)?;
    let forges = forges(&data)?;
    with_executions(data, async |execs| import_with(execs, &forges, &reference, &project, &request, json).await).await
}

/// `baton spec import` over `execs`.
async fn import_with(
    execs: &Executions,
    forges: &Forges,
    reference: &str,
    project: &str,
    request: &ImportRequest,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let specs = Specs::new(Pool::new(execs.clone(), 1));
    let actor = std::env::var("USER").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| "cli".into());
    let imported = import_from(&specs, forges, project, request, None, CLI_PACING, &format!("cli:{actor}"))
        .await
        .map_err(|e| match e {
            ImportError::Forge(f) => cli_error(f),
            ImportError::Spec(SpecError::NotFound(m)) => BadInput(m).into(),
            ImportError::Spec(s) => anyhow::Error::new(s),
        })?;
    // CLI_PACING waits rate limits out: nothing stops here but an error.
    let outcomes = imported.outcomes;
    if json {
        let items: Vec<_> = outcomes.iter().map(crate::runtime::forge::ImportedItem::of).collect();
        outln!("{}", serde_json::json!({ "imported": items.len(), "items": items }));
        return Ok(ExitCode::SUCCESS);
    }
    if outcomes.is_empty() {
        outln!("nothing to import: {reference} selected no items");
    }
    for o in &outcomes {
        let spec = o.spec();
        let what = match o {
            ImportOutcome::Updated { changed, .. } => format!("updated ({} changed)", changed.join(" and ")),
            ImportOutcome::Ignored { reason, .. } => format!("flagged for the lead: {reason}"),
            o => o.as_str().to_string(),
        };
        outln!("spec {} {what}: {} ({})", spec.spec_id, spec.title, spec.source_url);
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `baton merge TASK_ID`: push the feature branch and find or open the pull request.
///
/// Errors: no such execution, or not mergeable (exit 2, with the local git commands when the
/// project has no forge link); a push or forge failure (exit 1).
pub(super) async fn merge_command(data_dir: &Path, task_id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let data = DataDir::open(data_dir)?;
    let forges = forges(&data)?;
    with_executions(data, async |execs| merge_with(execs, &forges, task_id, json).await).await
}

/// `baton merge TASK_ID` over `execs`.
async fn merge_with(execs: &Executions, forges: &Forges, task_id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let actor = std::env::var("USER").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| "cli".into());
    let row =
        crate::runtime::merge::merge(execs, forges, task_id, &format!("cli:{actor}")).await.map_err(|e| match e {
            MergeError::NotFound(m) | MergeError::Refused(m) => BadInput(m).into(),
            MergeError::Forge(f) => cli_error(f),
            e => anyhow::Error::new(e),
        })?;
    if json {
        outln!("{}", serde_json::to_string(&row)?);
    } else {
        outln!("pull request {} ({} pushed at {})", row.pr_url, row.branch, row.pushed_sha);
    }
    Ok(ExitCode::SUCCESS)
}
