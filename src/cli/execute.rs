//! The `baton execute` family: start, next, status, pause, resume, list and run, and the
//! recording commands (dispatched, record, gate, approve, feedback, interact, amend, complete,
//! cancel, budget, retry, skip) turned into journal events and handed to the operator service.
//! It validates flags and prints; every decision goes through `runtime::ops`, every read
//! through the execution service, never the store.

use std::process::ExitCode;

use super::args::ExecuteCommand;
use super::output::{self, print_action, print_outcome};
use super::plan_file::{check_plan, read_plan};
use super::service::with_operator_service;
use super::{goal, team_record, wire};
use crate::engine;
use crate::model::event::{AddedStep, Event, EventKind, RecordStatus};
use crate::model::plan::{PlanPhase, PlanStep};
use crate::model::state::{ApprovalDecision, ExecutionState};
use crate::runtime;
use crate::runtime::config::DataDir;
use crate::runtime::ops::{BudgetDecision, Ops};
use crate::runtime::BadInput;

pub(super) async fn execute(
    data: DataDir,
    command: ExecuteCommand,
    json: bool,
    as_user: Option<&str>,
) -> anyhow::Result<ExitCode> {
    if let ExecuteCommand::Run(args) = command {
        let plan = match &args.plan {
            Some(path) => {
                let plan = read_plan(path)?;
                check_plan(path, &plan)?;
                // The driver creates the execution: who may start one is asked first.
                let may_start = async |ops: &Ops| Ok(Ops::may_start(&ops.cli_operator(as_user).await?)?);
                with_operator_service(data.clone(), may_start).await?;
                Some(plan)
            }
            None => None,
        };
        // An empty BATON_TASK_ID is unset, as for every other command (`--task-id ""` is refused
        // when parsed); it had been taken for the task id "".
        let task_id = args.task_id.filter(|t| !t.is_empty());
        let options = runtime::driver::RunOptions { plan, task_id, ..args.flags.options()? };
        let outcome = runtime::driver::run(data, options).await?;
        return Ok(print_outcome(&outcome, json));
    }
    with_operator_service(data, async |ops| execute_with(ops, command, json, as_user).await).await
}

/// Runs one `baton execute` command other than `run` over `ops`: a fresh operator service in
/// a one-shot process, or the server's when the call came through the CLI relay.
pub(super) async fn execute_with(
    ops: &Ops,
    command: ExecuteCommand,
    json: bool,
    as_user: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let execs = ops.execs().clone();
    match command {
        ExecuteCommand::Start { plan } => {
            let path = match plan {
                Some(p) => p,
                None => {
                    let saved = execs.data().plans_dir().join("current.json");
                    if !saved.exists() {
                        return Err(BadInput(
                            "no plan: pass --plan FILE or save one with `baton plan --from FILE`".into(),
                        )
                        .into());
                    }
                    saved
                }
            };
            let plan = read_plan(&path)?;
            check_plan(&path, &plan)?;
            let op = ops.cli_operator(as_user).await?;
            let state = ops.start(plan, &op).await?;
            Ok(print_action(&engine::next_action(&state), &state.task_id, json))
        }
        ExecuteCommand::Next { task, all } => {
            let task_id = execs.resolve_task_id(task.task_id.as_deref()).await?;
            if all {
                // Every dispatchable step, or the one next action (`Ops::next_actions`); the
                // exit code is that action's, as `next` without `--all` gives.
                let actions = ops.next_actions(&task_id).await?;
                let code = match actions.as_slice() {
                    [one] => output::exit_for(one),
                    _ => ExitCode::SUCCESS,
                };
                if json {
                    outln!("{}", serde_json::to_string_pretty(&actions)?);
                } else {
                    for a in &actions {
                        out!("{}", wire::render(a, &task_id));
                    }
                }
                Ok(code)
            } else {
                Ok(print_action(&ops.next_action(&task_id).await?, &task_id, json))
            }
        }
        ExecuteCommand::Status { task } => {
            let task_id = execs.resolve_task_id(task.task_id.as_deref()).await?;
            let state = execs.get_shared(&task_id).await?;
            let paused = execs.is_paused(&task_id).await?;
            let parked = execs.park_reason(&task_id).await?;
            // What `execute next` would answer: after the last record an execution still reads
            // `running` until `execute complete`, which the next action says.
            let next = if state.status.is_terminal() { None } else { Some(ops.peek_next_action(&state).await?) };
            print_status(&state, paused, parked.as_deref(), next.as_ref(), json)?;
            Ok(ExitCode::SUCCESS)
        }
        ExecuteCommand::Pause { task } => {
            let task_id = execs.resolve_task_id(task.task_id.as_deref()).await?;
            let op = ops.cli_operator(as_user).await?;
            let paused = ops.set_paused(&task_id, true, &op).await?;
            let was = if paused.changed { "" } else { "was already " };
            errln!("execution {task_id} {was}paused: no new dispatches until `baton execute resume`");
            if json {
                // What the API's pause answers (found by a tester: `--json` printed nothing).
                outln!("{}", serde_json::to_string_pretty(&paused)?);
            }
            Ok(ExitCode::SUCCESS)
        }
        ExecuteCommand::Resume { task } => {
            let task_id = execs.resolve_task_id(task.task_id.as_deref()).await?;
            let op = ops.cli_operator(as_user).await?;
            let runtime::ops::Resumed { decided: resumed, unpaused, recovery } = ops.resume(&task_id, &op).await?;
            if unpaused {
                errln!("execution {task_id} resumed from its pause");
            }
            // Only a live execution has attempts to recover (a cancelled one printed this and
            // then FAILED, found by a tester); one the server drives is recovered by it (a
            // relayed resume had said to run `baton execute run` again).
            const HOW: &str = "running ones are re-adopted, finished ones harvested, dead ones re-run";
            match recovery {
                Some(runtime::ops::Recovery::ThisServer) => {
                    errln!("execution {task_id} is driven by this server, whose driver recovers its attempts ({HOW})");
                }
                Some(runtime::ops::Recovery::Driver) => errln!(
                    "execution {task_id} was driven by a driver that is not running here: run `baton execute run` \
                     again to recover its attempts ({HOW}), unless a `baton serve` on this data dir drives it (it \
                     goes on by itself)"
                ),
                Some(runtime::ops::Recovery::Running) => {
                    errln!("execution {task_id} is driven by another process, which goes on");
                }
                None => {}
            }
            for step_id in &resumed.requeued {
                errln!("step {step_id} was dispatched when the driver stopped; it is offered again");
            }
            if !resumed.idempotency_key.is_empty() {
                errln!("checkpoint acknowledged; the execution goes on");
            }
            Ok(print_action(&resumed.next_action, &task_id, json))
        }
        ExecuteCommand::List => {
            let rows = execs.list().await?;
            if json {
                let list: Vec<serde_json::Value> = rows
                    .iter()
                    .map(|r| {
                        serde_json::json!({
                            "task_id": r.task_id, "status": r.summary.status, "current_phase": r.summary.current_phase,
                            "steps_done": r.summary.steps_done, "steps_total": r.summary.steps_total,
                            "spend_usd": r.summary.spend_usd, "created_at": r.created_at, "updated_at": r.updated_at,
                        })
                    })
                    .collect();
                outln!("{}", serde_json::to_string_pretty(&list)?);
            } else if rows.is_empty() {
                outln!("no executions");
            } else {
                for r in rows {
                    outln!(
                        "{}  {:<16} {}/{} steps  ${:.2}  {}",
                        r.task_id,
                        r.summary.status,
                        r.summary.steps_done,
                        r.summary.steps_total,
                        r.summary.spend_usd,
                        wire::line(&r.summary.current_phase)
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        other => record_command(ops, other, json, as_user).await,
    }
}

fn split_n<'a>(value: &'a str, n: usize, flag: &str, shape: &str) -> anyhow::Result<Vec<&'a str>> {
    let parts: Vec<&str> = value.splitn(n, ':').collect();
    if parts.len() != n || parts.iter().any(|p| p.trim().is_empty()) {
        return Err(BadInput(format!("{flag} {value:?}: expected {shape}")).into());
    }
    Ok(parts)
}

/// Builds the event of a recording command (validating its flags).
fn event_of(command: ExecuteCommand) -> anyhow::Result<(Option<String>, Event)> {
    let (task, key, kind) = match command {
        ExecuteCommand::Dispatched { task, key, step_id, agent } => {
            (task, key.idempotency_key, EventKind::StepDispatched { step_id, agent_name: agent })
        }
        ExecuteCommand::Record {
            task,
            key,
            step_id,
            member_id,
            agent,
            status,
            outcome,
            files,
            commit,
            tokens,
            cost,
            duration,
            error,
        } => {
            let status = RecordStatus::parse(&status).ok_or_else(|| {
                BadInput(format!("--status {status:?}: expected complete, failed, interacting or budget_stopped"))
            })?;
            if !cost.is_finite() || cost < 0.0 {
                return Err(BadInput(format!("--cost {cost}: expected a non-negative number")).into());
            }
            if !duration.is_finite() || duration < 0.0 {
                return Err(BadInput(format!("--duration {duration}: expected a non-negative number")).into());
            }
            let files = files.into_iter().map(|f| f.trim().to_string()).filter(|f| !f.is_empty()).collect();
            let step_id = member_id.unwrap_or(step_id);
            (
                task,
                key.idempotency_key,
                EventKind::StepRecorded {
                    step_id,
                    agent_name: agent,
                    status,
                    outcome,
                    files_changed: files,
                    commit_hash: commit,
                    tokens,
                    cost_usd: cost,
                    duration_seconds: duration,
                    error,
                    usage: None,
                },
            )
        }
        ExecuteCommand::Gate { task, key, phase_id, result, output } => {
            let kind = match result.as_str() {
                "pass" | "fail" => EventKind::GateRecorded {
                    phase_id,
                    passed: result == "pass",
                    output,
                    command: None,
                    exit_code: None,
                },
                "skip" => EventKind::GateSkipped { phase_id, reason: output },
                other => return Err(BadInput(format!("--result {other:?}: expected pass, fail or skip")).into()),
            };
            (task, key.idempotency_key, kind)
        }
        ExecuteCommand::Approve { task, key, phase_id, result, feedback } => {
            let decision = ApprovalDecision::parse(&result).ok_or_else(|| {
                BadInput(format!("--result {result:?}: expected approve, reject or approve-with-feedback"))
            })?;
            (task, key.idempotency_key, EventKind::ApprovalRecorded { phase_id, result: decision, feedback })
        }
        ExecuteCommand::Feedback { task, key, phase_id, question_id, chosen_index } => {
            (task, key.idempotency_key, EventKind::FeedbackRecorded { phase_id, question_id, chosen_index })
        }
        ExecuteCommand::Interact { task, key, step_id, input, complete } => {
            let kind = match (input, complete) {
                (_, true) => EventKind::InteractCompleted { step_id },
                (Some(input), false) => EventKind::InteractInput { step_id, input },
                (None, false) => return Err(BadInput("interact needs --input TEXT or --complete".into()).into()),
            };
            (task, key.idempotency_key, kind)
        }
        ExecuteCommand::Amend { task, key, description, add_phase, after_phase, add_step } => {
            let mut phases = Vec::new();
            for spec in &add_phase {
                let parts = split_n(spec, 2, "--add-phase", "NAME:AGENT")?;
                let mut phase = PlanPhase::new(0, parts[0].trim());
                phase.steps.push(Box::new(PlanStep::new("", parts[1].trim(), description.clone())));
                phases.push(phase);
            }
            let mut steps = Vec::new();
            for spec in &add_step {
                let parts = split_n(spec, 3, "--add-step", "PHASE:AGENT:DESC")?;
                let phase_id: i64 = parts[0]
                    .trim()
                    .parse()
                    .map_err(|_| BadInput(format!("--add-step {spec:?}: PHASE must be a phase id")))?;
                steps.push(AddedStep { phase_id, step: PlanStep::new("", parts[1].trim(), parts[2].trim()) });
            }
            if description.trim().is_empty() {
                return Err(BadInput("--description must not be empty".into()).into());
            }
            (
                task,
                key.idempotency_key,
                EventKind::Amended { description, trigger: "manual".into(), phases, after_phase, steps },
            )
        }
        ExecuteCommand::Complete { task } => (task, None, EventKind::Completed),
        ExecuteCommand::Cancel { task, reason } => (task, None, EventKind::Cancelled { reason }),
        ExecuteCommand::Budget { task, key, raise, stop } => match raise {
            Some(raw) if !stop => {
                let by_usd = runtime::spend::parse_usd(&raw)
                    .ok_or_else(|| BadInput(format!("--raise {raw:?}: {}", runtime::spend::USD_EXPECTED)))?;
                (task, key.idempotency_key, EventKind::BudgetRaised { by_usd })
            }
            _ => (task, key.idempotency_key, EventKind::Cancelled { reason: runtime::ops::STOPPED_AT_CEILING.into() }),
        },
        ExecuteCommand::RetryStep { task, step_id } => (task, None, EventKind::StepRetried { step_id }),
        ExecuteCommand::RetryGate { task, phase_id } => (task, None, EventKind::GateRetried { phase_id }),
        ExecuteCommand::Skip { task, step_id, reason } => (task, None, EventKind::StepSkipped { step_id, reason }),
        ExecuteCommand::Start { .. }
        | ExecuteCommand::Next { .. }
        | ExecuteCommand::Resume { .. }
        | ExecuteCommand::Pause { .. }
        | ExecuteCommand::Status { .. }
        | ExecuteCommand::List
        | ExecuteCommand::Run(_) => return Err(anyhow::anyhow!("not a recording command")),
    };
    Ok((task.task_id, runtime::ops::keyed(kind, key)))
}

async fn record_command(
    ops: &Ops,
    command: ExecuteCommand,
    json: bool,
    as_user: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let execs = ops.execs();
    let member = match &command {
        ExecuteCommand::Record { step_id, member_id: Some(m), .. } => Some((step_id.clone(), m.clone())),
        _ => None,
    };
    let (task_id, event) = event_of(command)?;
    let task_id = execs.resolve_task_id(task_id.as_deref()).await?;
    // An unknown task id is one line naming it, for every command (found by a tester: it
    // surfaced as the lease's "acquiring the lease: execution … not found"): the operator
    // service checks it before the lease. Only a member's record loads the state here.
    if let Some((step_id, member_id)) = member {
        let state = execs.get_shared(&task_id).await?;
        team_record::check_member(&state, &step_id, &member_id)?;
    }
    let op = ops.cli_operator(as_user).await?;
    let kind = event.kind.name();
    let budget = match &event.kind {
        EventKind::BudgetRaised { by_usd } => Some(BudgetDecision::Raise(*by_usd)),
        EventKind::Cancelled { reason } if reason == runtime::ops::STOPPED_AT_CEILING => Some(BudgetDecision::Stop),
        _ => None,
    };
    let done = match budget {
        // `execute budget` answers a BUDGET action; cancelling anything else is `execute
        // cancel`'s job.
        Some(decision) => ops.budget(&task_id, decision, event.idempotency_key, &op).await?,
        None => ops.record(&task_id, event, &op).await?,
    };
    if done.stopped_attempts > 0 {
        errln!("stopped {} running agent attempts of {task_id}", done.stopped_attempts);
    }
    if done.recorded {
        errln!("recorded {kind} for {task_id}");
    } else {
        errln!("{kind} for {task_id} was already applied (idempotency key {}): nothing changed", done.idempotency_key);
    }
    Ok(print_action(&done.next_action, &task_id, json))
}

fn print_status(
    state: &ExecutionState,
    paused: bool,
    parked: Option<&str>,
    next: Option<&crate::model::action::Action>,
    json: bool,
) -> anyhow::Result<()> {
    if json {
        let mut value = serde_json::to_value(state)?;
        if let Some(fields) = value.as_object_mut() {
            fields.insert("paused".into(), serde_json::Value::Bool(paused));
            if let Some(why) = parked {
                fields.insert("parked".into(), serde_json::Value::String(why.to_string()));
            }
        }
        outln!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    let (done, total) = state.progress();
    let pause = if paused { " (paused: no new dispatches until resumed)" } else { "" };
    outln!(
        "{}: {}{pause} — {done}/{total} steps done, ${:.2} spent",
        state.task_id,
        state.status,
        state.counters.spend_usd
    );
    if let Some(why) = &state.failure {
        outln!("  reason: {}", wire::line(why));
    }
    if let Some(next) = next {
        outln!("  next: {} — {}", next.action_type().upper(), wire::line(next.message()));
    }
    if let Some(why) = parked {
        outln!("  parked: {}", wire::line(why));
    }
    for w in &state.quota_waits {
        outln!("  step {}: {} ({}: {})", w.step_id, w.note(), w.agent_name, wire::line(&w.reason));
    }
    if let Some(w) = &state.ci_wait {
        outln!("  gate ci of phase {}: {} on {} (times out at {})", w.phase_id, w.note(), w.sha, w.until);
    }
    if let Some(ceiling) = state.budget.ceiling_usd {
        outln!(
            "  budget: ${:.2} spent + ${:.2} reserved of the ${ceiling:.2} ceiling ({})",
            state.counters.spend_usd,
            state.budget.reserved_usd(),
            state.budget.source
        );
    }
    if let Some(s) = &state.budget.shortfall {
        outln!("  budget decision: {} (raise by at least ${:.2}, or stop)", wire::line(&s.reason), s.needed_usd);
    }
    for w in &state.budget.warnings {
        outln!("  warning: {}", wire::line(w));
    }
    goal::print_goal(state);
    for (i, phase) in state.plan.phases.iter().enumerate() {
        let marker = if i == state.current_phase { ">" } else { " " };
        outln!("{marker} phase {} {}", phase.phase_id, wire::line(&phase.name));
        for step in &phase.steps {
            let r = state.result(&step.step_id);
            let status = r.map_or("pending", |r| r.status.as_str());
            let attempt = r.map_or(0, |r| r.attempt);
            let spend = match (state.budget.forecasts.get(&step.step_id), r.map_or(0.0, |r| r.cost_usd)) {
                (Some(f), spent) => format!("  ${spent:.2} of ${:.2} forecast", f.mid_usd),
                (None, spent) if spent > 0.0 => format!("  ${spent:.2}"),
                (None, _) => String::new(),
            };
            outln!("    {:<10} {:<20} {:<12} attempt {attempt}{spend}", step.step_id, step.agent_name, status);
            for id in engine::team::unit_ids(step) {
                let r = state.result(&id);
                let agent = engine::team::work_step(state, &id).map(|w| w.agent_name.clone()).unwrap_or_default();
                let status = r.map_or("pending", |r| r.status.as_str());
                let attempt = r.map_or(0, |r| r.attempt);
                outln!("      {:<10} {:<18} {:<12} attempt {attempt}", id, agent, status);
            }
        }
        if let Some(gate) = &phase.gate {
            let runs = state.gate_runs(phase.phase_id);
            let verdict = if state.gate_passed(phase.phase_id) {
                ", passed".to_string()
            } else if let Some(reason) = state.gate_skipped(phase.phase_id) {
                format!(", skipped: {}", wire::line(reason))
            } else {
                String::new()
            };
            outln!("    gate {} ({} runs{verdict})", wire::line(&gate.gate_type), runs);
        }
    }
    Ok(())
}
