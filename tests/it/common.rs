//! Shared helpers: a temp workspace with a data dir and a git repository, and the binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A scratch workspace: `<tmp>/data` (the data dir) and `<tmp>/repo` (a git repository).
pub(crate) struct Workspace {
    pub(crate) tmp: tempfile::TempDir,
}

impl Workspace {
    /// A workspace with a repository holding `files` in one commit.
    pub(crate) fn with_repo(files: &[(&str, &str)]) -> Workspace {
        let tmp = tempfile::tempdir().unwrap();
        baton::git::init_repository(&tmp.path().join("repo"), files, "initial").unwrap();
        Workspace { tmp }
    }

    pub(crate) fn data(&self) -> PathBuf {
        self.tmp.path().join("data")
    }

    pub(crate) fn repo(&self) -> PathBuf {
        self.tmp.path().join("repo")
    }

    /// Writes a file in the workspace and returns its path.
    pub(crate) fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.tmp.path().join(name);
        std::fs::write(&path, content).unwrap();
        path
    }

    /// `baton --data-dir <data> <args>`.
    pub(crate) fn baton(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_baton"));
        cmd.arg("--data-dir")
            .arg(self.data())
            .env_remove("BATON_TASK_ID")
            .env_remove("BATON_DATABASE_URL")
            .env_remove("BATON_CRASH_AT")
            .env_remove("BATON_CRASH_AFTER_COMMIT")
            .env_remove("BATON_CRASH_BEFORE_EFFECT")
            .env_remove("BATON_RUN_BUDGET_USD")
            .env_remove("BATON_RUN_TOKEN_CEILING");
        cmd
    }

    /// Runs baton with `args`.
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.baton().args(args).output().unwrap()
    }

    /// Writes [`small_plan`] for `task_id` and starts it with `execute start` (no driver: the
    /// test records the steps itself); panics with baton's stderr unless that exits 0.
    pub(crate) fn start_small_plan(&self, task_id: &str) -> Output {
        let plan = self.write(&format!("{task_id}.json"), &small_plan(task_id, ""));
        let out = self.run(&["execute", "start", "--plan", plan.to_str().unwrap()]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        out
    }

    /// `execute run --plan <plan> --repo <repo> --agent demo`.
    pub(crate) fn run_plan(&self, plan: &Path) -> Output {
        self.run_plan_with(plan, &[], &[])
    }

    /// `execute run --agent demo <args> --plan <plan> --repo <repo>` with `env` set.
    pub(crate) fn run_plan_with(&self, plan: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = self.baton();
        cmd.envs(env.iter().copied()).args(["execute", "run", "--agent", "demo"]).args(args);
        cmd.arg("--plan").arg(plan).arg("--repo").arg(self.repo()).output().unwrap()
    }

    /// `execute run --agent demo --plan <plan> --repo <repo>` started in the background
    /// (stdout and stderr discarded), for tests that kill it.
    /// Starts `execute run` of `plan` and kills it (SIGKILL) once `started` exists, i.e. while
    /// the attempt that writes it runs: a driver crash with an agent in flight.
    pub(crate) fn kill_run_once_started(&self, plan: &Path, started: &Path) {
        let mut child = self.spawn_run(plan);
        wait_for(started);
        child.kill().unwrap();
        child.wait().unwrap();
    }

    pub(crate) fn spawn_run(&self, plan: &Path) -> std::process::Child {
        let mut cmd = self.baton();
        cmd.args(["execute", "run", "--agent", "demo", "--plan"]).arg(plan).arg("--repo").arg(self.repo());
        cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap()
    }

    /// `git -C repo <args>` stdout.
    pub(crate) fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git").arg("-C").arg(self.repo()).args(args).output().unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// Agent launches of a step so far: run directories whose shim started the agent.
    pub(crate) fn launches(&self, task_id: &str, step_id: &str) -> usize {
        let dir = self.data().join("runs").join(task_id).join(step_id);
        let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
        entries.filter_map(Result::ok).filter(|e| e.path().join("started.json").exists()).count()
    }

    /// `execute status --json` of a task.
    pub(crate) fn status(&self, task_id: &str) -> serde_json::Value {
        let out = self.run(&["execute", "status", "--json", "--task-id", task_id]);
        assert!(out.status.success(), "status: {}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

pub(crate) fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// The fixtures folder, `tests/fixtures` of this repository (see its README.md).
///
/// Panics when it is missing: a test never passes without its input.
pub(crate) fn fixtures() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    assert!(dir.is_dir(), "the fixtures folder {} is missing", dir.display());
    dir
}

/// The bytes of fixture `rel` (a path under [`fixtures`]); panics naming the file when it
/// cannot be read.
pub(crate) fn fixture_bytes(rel: &str) -> Vec<u8> {
    let path = fixtures().join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
}

/// Fixture `rel` as JSON; panics naming the file when it cannot be read or parsed.
pub(crate) fn fixture_json(rel: &str) -> serde_json::Value {
    let bytes = fixture_bytes(rel);
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("fixture {rel} is not JSON: {e}"))
}

/// The journal of `task_id` in `ws`'s data dir: (kind, payload) per event, in order.
pub(crate) fn journal(ws: &Workspace, task_id: &str) -> Vec<(String, serde_json::Value)> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = baton::store::Store::open(&ws.data().join("baton.db")).await.unwrap();
        let events = store.events(task_id, 0).await.unwrap();
        events.into_iter().map(|e| (e.kind, serde_json::from_str(&e.payload).unwrap())).collect()
    })
}

/// A small two-phase plan: a parallel pair, a dependant, a passing gate.
pub(crate) fn small_plan(task_id: &str, extra_task_text: &str) -> String {
    serde_json::json!({
        "task_id": task_id,
        "task_summary": "Small plan for tests",
        "phases": [
            {"phase_id": 1, "name": "Build", "steps": [
                {"step_id": "1.1", "agent_name": "alpha", "task_description": format!("Write a. {extra_task_text}"),
                 "deliverables": ["a.md"]},
                {"step_id": "1.2", "agent_name": "beta", "task_description": "Write b.", "deliverables": ["b.md"]}
             ],
             "gate": {"gate_type": "test", "command": "test -s a.md && test -s b.md"}},
            {"phase_id": 2, "name": "Finish", "steps": [
                {"step_id": "2.1", "agent_name": "gamma", "task_description": "Write c.", "deliverables": ["c.md"],
                 "depends_on": ["1.1", "1.2"]}
            ]}
        ]
    })
    .to_string()
}

/// Waits (up to 15 s, polling every 50 ms) until `path` exists; panics naming it otherwise.
pub(crate) fn wait_for(path: &Path) {
    for _ in 0..300 {
        if path.exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("{} never appeared", path.display());
}

/// The URL of a new, empty database on the PostgreSQL test cluster (`BATON_TEST_DATABASE_URL`,
/// which `scripts/test` sets), or `None` outside CI when there is none (printed loudly). Under
/// `CI=true` a missing cluster fails the test. Databases of finished test processes are swept
/// as each new one is made ([`test_cluster`]).
pub(crate) fn postgres_database() -> Option<String> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(test_cluster::fresh_database("baton_it"))
}

/// The CA certificate (PEM) that signed the PostgreSQL test cluster's server certificate:
/// `BATON_TEST_DATABASE_CA`, which `scripts/test` sets when it starts the cluster with TLS on.
/// `None` outside CI when it is unset (printed loudly); under `CI=true` a missing CA fails the
/// test, as a missing cluster does.
pub(crate) fn postgres_ca() -> Option<PathBuf> {
    let Some(ca) = std::env::var_os("BATON_TEST_DATABASE_CA").filter(|ca| !ca.is_empty()) else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "BATON_TEST_DATABASE_CA is not set: under CI the PostgreSQL TLS tests must run \
             (scripts/test starts its cluster with TLS on and sets it)"
        );
        eprintln!("SKIPPED: BATON_TEST_DATABASE_CA is not set (run scripts/test, or point it at your cluster's CA)");
        return None;
    };
    Some(PathBuf::from(ca))
}

/// `url` with `pairs` added to its query string.
pub(crate) fn with_query(url: &str, pairs: &[(&str, &str)]) -> String {
    let mut url = url::Url::parse(url).unwrap();
    url.query_pairs_mut().extend_pairs(pairs);
    url.to_string()
}

/// The store's own test-cluster helper, shared with its unit tests.
#[path = "../../src/store/pg/test_cluster.rs"]
mod test_cluster;
