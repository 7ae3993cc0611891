//! Git across machines (issue 17.3) on a real PostgreSQL: a project whose remote is a local
//! bare repository, two data dirs ("replica A" and "replica B") on one database, the real
//! `baton` binary driving, and a command agent that counts its invocations.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use baton::runtime::app::{App, AppConfig};
use baton::runtime::specs::{NewProject, SpecInput};

use crate::common::*;

/// Two replicas' data dirs on one PostgreSQL database, a project repository and its bare remote.
struct Replicas {
    ws: Workspace,
    url: String,
    bare: PathBuf,
    counter: PathBuf,
}

impl Replicas {
    /// `agent_body` is the command agent's script after the line that counts its invocation.
    fn new(agent_body: &str) -> Option<Replicas> {
        let url = postgres_database()?;
        let ws = Workspace::with_repo(&[("README.md", "x\n")]);
        let bare = ws.tmp.path().join("remote.git");
        git_ok(Command::new("git").args(["clone", "-q", "--bare"]).arg(ws.repo()).arg(&bare));
        let counter = ws.tmp.path().join("invocations");
        let agent = ws.tmp.path().join("agent.sh");
        std::fs::write(&agent, format!("#!/bin/sh\necho \"$PWD\" >> {}\n{agent_body}", counter.display())).unwrap();
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
        let r = Replicas { ws, url, bare, counter };
        let toml = format!(
            "[database]\nurl = '{}'\n[agents.dev]\nprofile = 'command'\ncommand = ['{}']\n",
            r.url,
            agent.display()
        );
        for data in [r.data_a(), r.data_b()] {
            std::fs::create_dir_all(&data).unwrap();
            std::fs::write(data.join("baton.toml"), &toml).unwrap();
        }
        Some(r)
    }

    fn data_a(&self) -> PathBuf {
        self.ws.data()
    }

    fn data_b(&self) -> PathBuf {
        self.ws.tmp.path().join("data-b")
    }

    /// Registers the project (with its remote) and fires a spec of a two-phase plan on replica
    /// A, whose pool is closed so that only `baton execute run` drives; returns the task id.
    fn fire(&self) -> String {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async {
            let app = App::build(AppConfig::new(self.data_a())).await.unwrap();
            app.pool.shutdown(std::time::Duration::ZERO).await;
            let project = NewProject {
                name: "lantern".into(),
                repo_path: self.ws.repo(),
                agent_profile: Some("demo".into()),
                repo_url: Some(self.bare.display().to_string()),
                ..NewProject::default()
            };
            app.specs.register_project(project).await.unwrap();
            let input = SpecInput { project: "lantern".into(), title: "Two steps".into(), ..SpecInput::default() };
            let id = app.specs.create(input, "board", "", "tester").await.unwrap().spec_id;
            let plan = serde_json::json!({"task_id": "x", "task_summary": "two steps", "phases": [
                {"phase_id": 1, "name": "One", "steps": [
                    {"step_id": "1.1", "agent_name": "dev", "task_description": "First."}]},
                {"phase_id": 2, "name": "Two", "steps": [
                    {"step_id": "2.1", "agent_name": "dev", "task_description": "Second."}]}]});
            app.specs.upload_plan(id, plan, "tester").await.unwrap();
            app.specs.submit(id, "tester").await.unwrap();
            app.specs.review(id, true, "", "reviewer", None).await.unwrap();
            let fired = app.specs.fire(id, "tester").await.unwrap();
            app.execs.store().close().await;
            fired.task_id.unwrap()
        })
    }

    /// `baton --data-dir <data> execute run --task-id <task_id>` with `env`.
    fn run(&self, data: &Path, task_id: &str, env: &[(&str, &str)]) -> Output {
        baton(data).args(["execute", "run", "--task-id", task_id]).envs(env.iter().copied()).output().unwrap()
    }

    fn invocations(&self) -> usize {
        std::fs::read_to_string(&self.counter).map(|t| t.lines().count()).unwrap_or(0)
    }

    /// `git --git-dir=<bare> <args>`.
    fn remote_git(&self, args: &[&str]) -> String {
        git_ok(Command::new("git").arg(format!("--git-dir={}", self.bare.display())).args(args))
    }

    /// The journal's `step_recorded` payloads, read from the database.
    fn recorded(&self, task_id: &str) -> Vec<serde_json::Value> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let store = baton::store::Store::connect(&self.url).await.unwrap();
            let events = store.events(task_id, 0).await.unwrap();
            store.close().await;
            events
                .into_iter()
                .filter(|e| e.kind == "step_recorded")
                .map(|e| serde_json::from_str(&e.payload).unwrap())
                .collect()
        })
    }

    fn park_reason(&self, task_id: &str) -> Option<String> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let store = baton::store::Store::connect(&self.url).await.unwrap();
            let reason = store.park_reason(task_id).await.unwrap();
            store.close().await;
            reason
        })
    }
}

/// `baton --data-dir <data>`, with no test-hook or database variable inherited.
fn baton(data: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_baton"));
    cmd.arg("--data-dir").arg(data);
    for var in ["BATON_TASK_ID", "BATON_DATABASE_URL", "BATON_CRASH_AT", "BATON_RUN_BUDGET_USD"] {
        cmd.env_remove(var);
    }
    cmd
}

fn git_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs per data dir of a step: launches this replica made.
fn launches(data: &Path, task_id: &str, step_id: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(data.join("runs").join(task_id).join(step_id)) else { return 0 };
    entries.filter_map(Result::ok).filter(|e| e.path().join("started.json").exists()).count()
}

#[test]
fn replica_b_takes_over_from_the_remote_after_replica_a_died_between_push_and_record() {
    let Some(r) = Replicas::new("f=out-$$.md\necho $$ > \"$f\"\n") else { return };
    let task_id = r.fire();
    let branch = format!("baton/{task_id}");
    assert!(!r.remote_git(&["rev-parse", &branch]).is_empty(), "the fired execution's branch is on the remote at once");

    // Replica A consolidates step 1.1, pushes it, and dies before journaling its result.
    let out = r.run(&r.data_a(), &task_id, &[("BATON_CRASH_AT", "after-consolidate")]);
    assert!(!out.status.success(), "A was meant to die: {}", stderr(&out));
    assert_eq!(r.invocations(), 1, "{}", stderr(&out));
    assert!(r.recorded(&task_id).is_empty(), "A died before recording anything");
    let log = r.remote_git(&["log", "--format=%B", &branch]);
    assert!(log.contains("Baton-Step: 1.1"), "the remote holds step 1.1's commit: {log}");

    // Replica B has no clone and no run directory: it clones, fetches, records 1.1 from the
    // remote without running it, and runs 2.1.
    assert!(!r.data_b().join("repos").exists());
    let out = r.run(&r.data_b(), &task_id, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(r.data_b().join("repos/lantern/.git").exists(), "B made its own clone");
    assert_eq!(r.invocations(), 2, "step 1.1 was not run again; 2.1 ran once: {}", stderr(&out));
    assert_eq!(launches(&r.data_b(), &task_id, "1.1"), 0, "B never launched 1.1");
    assert_eq!(launches(&r.data_b(), &task_id, "2.1"), 1);
    assert!(stderr(&out).contains("is on the remote; recording it"), "{}", stderr(&out));

    // Every finished step's commit is on the remote, which holds B's tip.
    let recorded = r.recorded(&task_id);
    assert_eq!(recorded.len(), 2, "{recorded:?}");
    for rec in &recorded {
        let sha = rec["commit_hash"].as_str().unwrap();
        assert_eq!(sha.len(), 40, "{rec}");
        git_ok(Command::new("git").arg(format!("--git-dir={}", r.bare.display())).args([
            "merge-base",
            "--is-ancestor",
            sha,
            &branch,
        ]));
    }
    let b_tip =
        git_ok(Command::new("git").arg("-C").arg(r.data_b().join("repos/lantern")).args(["rev-parse", &branch]));
    assert_eq!(r.remote_git(&["rev-parse", &branch]), b_tip);

    let audit = baton(&r.data_b()).args(["audit", "verify", &task_id]).output().unwrap();
    assert_eq!(code(&audit), 0, "{}", stdout(&audit));
    // The user's own checkout never got the branch: replicas work in their clones.
    assert!(r.ws.git(&["branch", "--list", &branch]).trim().is_empty());
}

#[test]
fn a_push_the_remote_rejects_parks_the_execution_with_the_reason_and_loses_nothing() {
    // The agent moves the remote's feature branch to a commit of its own while it works, as
    // another writer would: the push after consolidation is not a fast-forward.
    let Some(r) = Replicas::new("") else { return };
    let bare = r.bare.display().to_string();
    let body = format!(
        "f=out-$$.md\necho $$ > \"$f\"\n\
         for ref in $(git --git-dir={bare} for-each-ref --format='%(refname)' refs/heads/baton/); do\n\
           c=$(git --git-dir={bare} -c user.name=x -c user.email=x@x.invalid commit-tree -p \"$ref\" -m foreign \"$ref^{{tree}}\")\n\
           git --git-dir={bare} update-ref \"$ref\" \"$c\"\n\
         done\n"
    );
    let agent = r.ws.tmp.path().join("agent.sh");
    let old = std::fs::read_to_string(&agent).unwrap();
    std::fs::write(&agent, format!("{old}{body}")).unwrap();
    let task_id = r.fire();
    let branch = format!("baton/{task_id}");

    let out = r.run(&r.data_a(), &task_id, &[]);
    assert_eq!(code(&out), 3, "parked (waiting for a human): {}", stderr(&out));
    let reason = r.park_reason(&task_id).expect("parked with a reason");
    assert!(reason.contains("rejected") && reason.contains(&branch), "{reason}");
    assert!(reason.contains("never force-pushes"), "{reason}");
    assert!(r.recorded(&task_id).is_empty(), "nothing recorded that the remote lacks");
    let foreign = r.remote_git(&["log", "-1", "--format=%s", &branch]);
    assert_eq!(foreign.trim(), "foreign", "the other writer's commit was not overwritten");
    let clone = r.data_a().join("repos/lantern");
    let local = git_ok(Command::new("git").arg("-C").arg(&clone).args(["log", "-1", "--format=%B", &branch]));
    assert!(local.contains("Baton-Step: 1.1"), "the step's commit is kept on A's branch: {local}");
}
