//! Dispatching and launching attempts: a dispatch is journaled first, then the attempt gets a
//! fresh worktree at the feature branch tip, its ref (`refs/baton/<task>/<step>/<attempt>`),
//! its prompt, `baton.json` ([`LaunchMeta`]) and, when the step names MCP servers, `mcp.json`
//! (their Claude-format config, variable names only) in its run dir, and is launched under the
//! detached `baton __attempt` shim, which copies the servers' secrets from Baton's environment
//! into the agent's. An attempt that cannot even start fails its step with the reason. It never
//! records an attempt's result: `harvest` does.

use std::path::PathBuf;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::engine;
use crate::git;
use crate::model::action::DispatchAction;
use crate::model::event::{AttemptUsage, EventKind, RecordStatus};
use crate::model::state::ExecutionState;
use crate::runtime::agent::profile::{build_argv, AgentInvocation, AgentProfile, AGENT_SECRET_VARS};
use crate::runtime::agent::shim::{self, AttemptSpec};
use crate::runtime::runs::{latest_launch, launch_dir};
use crate::runtime::BadInput;
use crate::runtime::{blocking, write_atomic};

use super::agents::step_servers;
use super::{crash_point, Driver, Finished, LiveAttempt};

/// What a run directory remembers about its attempt (`baton.json` beside `attempt.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct LaunchMeta {
    pub(super) step_id: String,
    pub(super) attempt: u32,
    pub(super) agent_name: String,
    pub(super) profile: AgentProfile,
    pub(super) worktree: PathBuf,
    pub(super) base_sha: String,
    pub(super) automation: bool,
    /// Model asked for (the spend ledger's `model`); empty in run dirs written before it.
    #[serde(default)]
    pub(super) model: String,
    /// Worktree environment files copied into its worktree (`.worktreeinclude`): kept out of
    /// its commit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) env_files: Vec<String>,
}

pub(super) const META_FILE: &str = "baton.json";
/// The generated MCP config of an attempt whose step names MCP servers (in its run dir).
pub(super) const MCP_FILE: &str = "mcp.json";

impl Driver {
    /// Journals the dispatch, prepares a fresh worktree and run dir, and launches the shim.
    pub(super) async fn dispatch(&mut self, state: &mut ExecutionState, d: &DispatchAction) -> anyhow::Result<()> {
        if d.command.is_empty() {
            // A misconfigured agent, an unknown MCP server are refused before anything is journaled.
            self.resolve_agent(&d.agent_name, &d.agent_model)?;
            if let Some(step) = engine::team::work_step(state, &d.step_id) {
                step_servers(&self.config, &step)?;
            }
        }
        let kind = EventKind::StepDispatched { step_id: d.step_id.clone(), agent_name: d.agent_name.clone() };
        let key = crate::runtime::runs::dispatch_key(&state.task_id, &d.step_id, d.attempt);
        self.record(state, kind, key).await?;
        errln!("dispatched {} to {} (attempt {})", d.step_id, d.agent_name, d.attempt);
        crash_point("after-dispatch");
        self.launch_or_fail(state, &d.step_id, d.attempt, 1).await
    }

    /// Launches an attempt; when it cannot even start (no worktree, an unwritable run dir, …)
    /// the step fails with the reason instead of stopping the driver, so a rerun cannot loop.
    pub(super) async fn launch_or_fail(
        &mut self,
        state: &mut ExecutionState,
        step_id: &str,
        attempt: u32,
        launch: u32,
    ) -> anyhow::Result<()> {
        let Err(e) = self.launch(state, step_id, attempt, launch).await else { return Ok(()) };
        if e.chain().any(|c| c.is::<BadInput>() || c.is::<crate::engine::EngineError>()) {
            return Err(e);
        }
        let error = format!("the attempt could not be started: {e:#}");
        errln!("{step_id} failed: {error}");
        let agent_name = state.result(step_id).map(|r| r.agent_name.clone()).unwrap_or_default();
        let kind = EventKind::StepRecorded {
            step_id: step_id.to_string(),
            agent_name,
            status: RecordStatus::Failed,
            outcome: String::new(),
            files_changed: Vec::new(),
            commit_hash: String::new(),
            tokens: 0,
            cost_usd: 0.0,
            duration_seconds: 0.0,
            error,
            usage: Some(AttemptUsage { attempt, ..AttemptUsage::default() }),
        };
        let key = format!("record:{}:{step_id}:{attempt}", state.task_id);
        self.record(state, kind, key).await
    }

    /// Launches (launch number `launch` ≥ 1) attempt `attempt` of a dispatched step.
    pub(super) async fn launch(
        &mut self,
        state: &ExecutionState,
        step_id: &str,
        attempt: u32,
        launch: u32,
    ) -> anyhow::Result<()> {
        let Some(step) = engine::team::work_step(state, step_id) else {
            anyhow::bail!("step {step_id} is not in the plan");
        };
        let step = step.as_ref();
        // The agent its dispatch names: the step's own, or a fallback while its account is out
        // of quota (`driver::quota`).
        let agent_name = state
            .result(step_id)
            .map(|r| r.agent_name.clone())
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| step.agent_name.clone());
        let run_dir = launch_dir(&self.data.run_dir(&state.task_id, step_id, attempt), launch);
        let worktree = self.data.attempt_worktree(&state.task_id, step_id, attempt);
        let tip = {
            let (repo, branch) = (self.repo.clone(), self.meta.branch.clone());
            blocking(move || repo.branch_tip(&branch))
                .await??
                .ok_or_else(|| anyhow::anyhow!("branch {} is gone", self.meta.branch))?
        };
        let env_copy = {
            // The attempt's ref names its starting point now and its commit after success; a
            // failed attempt keeps it (and its worktree) for inspection until `baton gc`.
            let (repo, wt, sha) = (self.repo.clone(), worktree.clone(), tip.clone());
            let attempt_ref = git::attempt_ref(&state.task_id, step_id, attempt);
            let include = self.env_include.clone();
            blocking(move || {
                // The attempt's own path: a checkout a driver killed inside `git worktree add`
                // left there is not a worktree git knows, and the attempt starts clean anyway.
                if repo.clear_half_made_worktree(&wt, &sha)? {
                    tracing::info!(worktree.path = %wt.display(), "removed the leftover of an interrupted worktree creation");
                }
                repo.add_worktree(&wt, &sha)?;
                repo.set_ref(&attempt_ref, &sha)?;
                repo.copy_worktree_env(&wt, &include)
            })
            .await?
            .with_context(|| format!("creating worktree for {step_id}"))?
        };
        report_env_copy(step_id, &env_copy);
        std::fs::create_dir_all(&run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
        let prompt_path = run_dir.join("prompt.md");
        write_atomic(
            &prompt_path,
            engine::prompt::delegation_prompt(state, step, engine::prompt::Runner::Baton).as_bytes(),
        )?;
        let automation = step.is_automation();
        let mut model = String::new();
        let mut env_from = Vec::new();
        let (profile, argv, prompt_on_stdin, timeout) = if automation {
            let argv = vec!["sh".to_string(), "-c".to_string(), step.command.clone()];
            (
                AgentProfile::Command { argv_template: argv.clone() },
                argv,
                false,
                self.config.runtime.default_timeout_secs,
            )
        } else {
            let (profile, parts, timeout) = self.resolve_agent(&agent_name, &step.model)?;
            model = parts.model.clone().unwrap_or_else(|| step.model.clone());
            let mcp = step_servers(&self.config, step)?;
            let mcp_config = if mcp.is_empty() {
                None
            } else {
                env_from = self.mcp_env(step_id, &mcp)?;
                let path = run_dir.join(MCP_FILE);
                write_atomic(&path, serde_json::to_string_pretty(&mcp.claude_config())?.as_bytes())?;
                Some(path)
            };
            let inv = AgentInvocation {
                model: parts.model,
                permission_mode: parts.permission_mode,
                allowed_tools: parts.allowed_tools,
                baton_exe: self.baton_exe.clone(),
                prompt_path: prompt_path.clone(),
                cwd: worktree.clone(),
                mcp,
                mcp_config,
            };
            let cmd = build_argv(&profile, &inv);
            (profile, cmd.argv, cmd.prompt_on_stdin, timeout)
        };
        let timeout = if step.timeout_seconds > 0 { step.timeout_seconds } else { timeout };
        // Credentials travel by name (the shim copies them from Baton's environment), never
        // by value into attempt.json.
        let (secrets, mut env): (Vec<_>, Vec<_>) =
            self.env.iter().cloned().partition(|(name, _)| AGENT_SECRET_VARS.contains(&name.as_str()));
        env_from.extend(secrets.into_iter().map(|(name, _)| (name.clone(), name)));
        env.push(("BATON_TASK_ID".into(), state.task_id.clone()));
        env.push(("BATON_STEP_ID".into(), step_id.to_string()));
        let spec = AttemptSpec {
            argv,
            cwd: worktree.clone(),
            env,
            env_from,
            prompt_file: prompt_on_stdin.then(|| prompt_path.clone()),
            timeout_secs: timeout,
            final_event: crate::runtime::agent::final_watch(&profile, self.config.runtime.result_grace_secs),
            cgroup: self.config.runtime.attempt_cgroups,
        };
        let meta = LaunchMeta {
            step_id: step_id.to_string(),
            attempt,
            agent_name,
            profile,
            worktree,
            base_sha: tip,
            automation,
            model: model.clone(),
            env_files: env_copy.copied,
        };
        write_atomic(&run_dir.join(META_FILE), serde_json::to_string_pretty(&meta)?.as_bytes())?;
        shim::prepare_run_dir(&run_dir, &spec)?;
        let mut launched = shim::launch(&self.baton_exe, &run_dir)?;
        launched.locked().await?;
        crash_point("after-launch");
        let (step_id, dir) = (step_id.to_string(), run_dir.clone());
        if !automation {
            let usage = crate::runtime::spend::UsageStream::default();
            self.live.push(LiveAttempt {
                step_id: step_id.clone(),
                run_dir: dir.clone(),
                model,
                usage,
                unpriced: false,
            });
        }
        self.started_one();
        self.inflight.spawn(async move { Finished { step_id, attempt, run_dir: dir, result: launched.wait().await } });
        Ok(())
    }

    /// The variables the shim copies into the agent's environment for the step's MCP servers
    /// ([`StepServers::env_from`](crate::runtime::agent::mcp::StepServers::env_from)).
    ///
    /// Errors (the attempt cannot start; names the step and the variable): a variable that is
    /// not set in Baton's environment, or one that would replace a different variable the agent
    /// already gets (`PATH`, `HOME`, …).
    fn mcp_env(
        &self,
        step_id: &str,
        mcp: &crate::runtime::agent::mcp::StepServers,
    ) -> anyhow::Result<Vec<(String, String)>> {
        let pairs = mcp.env_from();
        for (name, source) in &pairs {
            // Read at launch, as the shim reads it: only whether it is set, never its value.
            if std::env::var_os(source).is_none() {
                anyhow::bail!(
                    "step {step_id}: an MCP server needs environment variable {source}, which is not set for baton"
                );
            }
            if name != source && self.env.iter().any(|(k, _)| k == name) {
                anyhow::bail!(
                    "step {step_id}: an MCP server's {name} = \"${{{source}}}\" would replace the agent's own {name}"
                );
            }
        }
        Ok(pairs)
    }

    /// Prepares the integration worktree at `tip` (gates run there), with the worktree
    /// environment copied in like an attempt's.
    pub(super) async fn integration_worktree(&self, wt: std::path::PathBuf, tip: String) -> anyhow::Result<()> {
        let (repo, include) = (self.repo.clone(), self.env_include.clone());
        let copy = blocking(move || {
            repo.remove_worktree(&wt)?;
            repo.add_worktree(&wt, &tip)?;
            repo.copy_worktree_env(&wt, &include)
        })
        .await?
        .context("preparing the integration worktree")?;
        report_env_copy("the gate", &copy);
        Ok(())
    }

    pub(super) async fn relaunch(
        &mut self,
        state: &mut ExecutionState,
        step_id: &str,
        attempt: u32,
    ) -> anyhow::Result<()> {
        let base = self.data.run_dir(&state.task_id, step_id, attempt);
        let next = latest_launch(&base).map_or(1, |(n, _)| n + 1);
        self.launch_or_fail(state, step_id, attempt, next).await
    }
}

/// Tells the user of a run what the worktree environment copy did for `whom`, on one line.
fn report_env_copy(whom: &str, copy: &git::EnvCopy) {
    if !copy.copied.is_empty() {
        errln!("{whom}: copied {} from the project checkout (worktree environment)", copy.copied.join(", "));
    }
    if !copy.skipped.is_empty() {
        errln!("{whom}: worktree environment not copied: {}", copy.skipped.join("; "));
    }
}
