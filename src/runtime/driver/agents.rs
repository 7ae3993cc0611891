//! How an agent name runs: its profile (`baton.toml`'s `[agents.<name>]`, else the run's
//! default), model, permission mode, tools, timeout and the MCP servers of the step, from the
//! configuration and the repository's roster. It only reads configuration.

use crate::engine;
use crate::model::plan::PlanStep;
use crate::runtime::agent::mcp::StepServers;
use crate::runtime::agent::profile::AgentProfile;
use crate::runtime::config::Config;
use crate::runtime::BadInput;

use super::options::PROFILES;
use super::Driver;

/// The parts of an agent invocation that come from configuration and the roster.
#[derive(Debug)]
pub(super) struct AgentInvocationParts {
    pub(super) model: Option<String>,
    pub(super) permission_mode: Option<String>,
    pub(super) allowed_tools: Vec<String>,
}

/// The profile an agent runs with: its `[agents.<name>]` entry in baton.toml, else `default`.
///
/// Errors ([`BadInput`]): an unknown profile, or `command` without a command template.
pub(super) fn profile_of(config: &Config, default: &str, agent: &str) -> anyhow::Result<AgentProfile> {
    let cfg = config.agents.get(agent);
    let name = cfg.and_then(|c| c.profile.as_deref()).unwrap_or(default);
    Ok(match name {
        "claude" => AgentProfile::Claude,
        "codex" => AgentProfile::Codex,
        "gemini" => AgentProfile::Gemini,
        "demo" => AgentProfile::Demo,
        "command" => {
            let template = cfg.and_then(|c| c.command.clone()).filter(|t| !t.is_empty()).ok_or_else(|| {
                BadInput(format!(
                    "agent {agent}: profile `command` needs a non-empty `command = [...]` in [agents.{agent}] of baton.toml"
                ))
            })?;
            AgentProfile::Command { argv_template: template }
        }
        other => {
            return Err(BadInput(format!(
                "agent {agent}: unknown profile {other:?} (expected {})",
                PROFILES.join(", ")
            ))
            .into())
        }
    })
}

/// The MCP servers `step` names, from `baton.toml`'s `[mcp_servers]`.
///
/// Errors ([`BadInput`], naming the step): an unknown server name, two servers setting one
/// variable from different sources.
pub(super) fn step_servers(config: &Config, step: &PlanStep) -> anyhow::Result<StepServers> {
    StepServers::select(&config.mcp_servers, &step.mcp_servers, &step.step_id).map_err(|e| BadInput(e).into())
}

/// The plan check of a step's `mcp_servers` ([`step_servers`]), and that each agent that runs
/// the step can be given them: a `command` profile needs `{mcp_config}` in its template, and
/// a gemini agent cannot be given per-step servers (refused).
/// Automation steps run no agent and are not checked.
///
/// Errors ([`BadInput`]) name the step (and the agent).
pub(super) fn check_step_servers(config: &Config, default: &str, step: &PlanStep) -> anyhow::Result<()> {
    if step.mcp_servers.is_empty() || step.is_automation() {
        return Ok(());
    }
    step_servers(config, step)?;
    for agent in std::iter::once(step.agent_name.as_str()).chain(engine::team::agents(step)) {
        let profile = profile_of(config, default, agent)?;
        if profile == AgentProfile::Gemini {
            // gemini reads MCP servers from its settings.json only: no flag gives a run its own.
            return Err(BadInput(format!(
                "step {}: names MCP servers, but agent {agent} runs gemini, which Baton cannot give \
                 per-step MCP servers (gemini reads them from its settings.json); run the step on \
                 claude or codex, or configure the servers in gemini's settings",
                step.step_id
            ))
            .into());
        }
        if let AgentProfile::Command { argv_template } = profile {
            if !argv_template.iter().any(|a| a.contains("{mcp_config}")) {
                return Err(BadInput(format!(
                    "step {}: names MCP servers, but agent {agent} runs a `command` template without \
                     `{{mcp_config}}` (add it to [agents.{agent}] command in baton.toml to pass the servers)",
                    step.step_id
                ))
                .into());
            }
        }
    }
    Ok(())
}

impl Driver {
    /// Resolves how an agent name runs: (profile, model, permission mode, tools, timeout).
    pub(super) fn resolve_agent(
        &self,
        agent: &str,
        step_model: &str,
    ) -> anyhow::Result<(AgentProfile, AgentInvocationParts, u64)> {
        let cfg = self.config.agents.get(agent);
        let def = self.roster.get(agent);
        let profile = profile_of(&self.config, &self.default_profile, agent)?;
        let model = cfg
            .and_then(|c| c.model.clone())
            .or_else(|| def.and_then(|d| d.model.clone()))
            .or_else(|| Some(step_model.to_string()).filter(|m| !m.is_empty()));
        let parts = AgentInvocationParts {
            model,
            permission_mode: def.and_then(|d| d.permission_mode.clone()),
            allowed_tools: def.map(|d| d.tools.clone()).unwrap_or_default(),
        };
        let timeout = cfg.and_then(|c| c.timeout_secs).unwrap_or(self.config.runtime.default_timeout_secs);
        Ok((profile, parts, timeout))
    }
}
