//! `baton demo`: Baton's main job on embedded defaults, with no API key.
//!
//! Creates (once) a small git repository under the data dir, writes an example plan (three
//! phases: a design step behind an approval, a parallel pair behind a real test gate, a
//! review), runs it with the bundled demo agent — approving the approval automatically with a
//! printed notice — and ends by printing the feature branch and its `git log`.
//!
//! [`seed_board`] is `baton serve --demo`: a demo project on its own small repository, with a
//! few specs at different points of their lifecycle.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::cli::print_outcome;
use crate::clock;
use crate::git::{self, GitRepo};
use crate::model::plan::MachinePlan;
use crate::runtime::config::DataDir;
use crate::runtime::driver::{self, RunOptions};
use crate::runtime::{blocking, write_atomic};

const CHECK_SCRIPT: &str = "#!/bin/sh\n\
# The demo's test gate: every deliverable of the build phase must exist and be non-empty.\n\
set -e\n\
for f in docs/design.md src/greeting.md tests/greeting_check.md; do\n\
  test -s \"$f\" || { echo \"missing $f\"; exit 1; }\n\
done\n\
echo \"all deliverables present\"\n";

const README: &str = "# Greeting service\n\nA tiny repository that `baton demo` works on.\n";

const ARCHITECT: &str = "---\nname: architect\ndescription: Designs the change before anyone builds it.\nmodel: opus\ntools: Read, Write\n---\nYou design changes: write the design note the others build from.\n";

/// The demo's example plan for `task_id` (agent-baton `plan.json` format).
pub fn demo_plan(task_id: &str) -> serde_json::Value {
    serde_json::json!({
        "task_id": task_id,
        "task_summary": "Add a greeting to the greeting service, designed, built, tested and reviewed.",
        "risk_level": "MEDIUM",
        "phases": [
            {
                "phase_id": 1,
                "name": "Design",
                "steps": [{
                    "step_id": "1.1", "agent_name": "architect", "model": "opus",
                    "task_description": "Write the design note for the greeting.",
                    "deliverables": ["docs/design.md"], "allowed_paths": ["docs/"],
                    "step_type": "planning", "expected_outcome": "A design note the build phase can follow."
                }],
                "approval_required": true,
                "approval_description": "Review the design note (docs/design.md) before the build starts."
            },
            {
                "phase_id": 2,
                "name": "Build",
                "steps": [
                    {
                        "step_id": "2.1", "agent_name": "backend-engineer",
                        "task_description": "Implement the greeting as described in the design note.",
                        "depends_on": ["1.1"], "deliverables": ["src/greeting.md"], "allowed_paths": ["src/"]
                    },
                    {
                        "step_id": "2.2", "agent_name": "test-engineer",
                        "task_description": "Write the check that the greeting exists.",
                        "depends_on": ["1.1"], "deliverables": ["tests/greeting_check.md"], "allowed_paths": ["tests/"],
                        "step_type": "testing"
                    }
                ],
                "gate": { "gate_type": "test", "command": "sh scripts/check.sh", "description": "Every deliverable exists." }
            },
            {
                "phase_id": 3,
                "name": "Review",
                "steps": [{
                    "step_id": "3.1", "agent_name": "code-reviewer", "step_type": "reviewing",
                    "task_description": "Review the change and write the review notes.",
                    "depends_on": ["2.1", "2.2"], "deliverables": ["docs/review.md"], "allowed_paths": ["docs/"]
                }]
            }
        ]
    })
}

/// Runs the demo in `data_dir`; exit code 0 when the execution completes.
pub async fn run_demo(data_dir: &Path) -> anyhow::Result<ExitCode> {
    let data = DataDir::open(data_dir)?;
    let repo_path = data.root().join("demo").join("repo");
    let repo = if repo_path.join(".git").exists() {
        let p = repo_path.clone();
        blocking(move || GitRepo::open(&p)).await??
    } else {
        outln!("Creating the demo repository at {}", repo_path.display());
        let p = repo_path.clone();
        blocking(move || {
            git::init_repository(
                &p,
                &[("README.md", README), ("scripts/check.sh", CHECK_SCRIPT), ("agents/architect.md", ARCHITECT)],
                "Initial commit of the demo repository",
            )
        })
        .await??
    };
    let task_id = format!("demo-{}", clock::now().format("%Y%m%d-%H%M%S-%3f"));
    let plan_path = data.root().join("demo").join(format!("{task_id}.plan.json"));
    write_atomic(&plan_path, serde_json::to_string_pretty(&demo_plan(&task_id))?.as_bytes())?;
    outln!("Running plan {} with the demo agent (no API key needed)\n", plan_path.display());
    let plan = MachinePlan::from_value(demo_plan(&task_id)).map_err(|e| anyhow::anyhow!("the demo plan: {e}"))?;
    let options = RunOptions {
        plan: Some(plan),
        repo: Some(repo.root().to_path_buf()),
        agent: Some("demo".into()),
        auto_approve: true,
        ..RunOptions::default()
    };
    let outcome = driver::run(data.clone(), options).await.context("running the demo plan")?;
    let code = print_outcome(&outcome, false);
    outln!();
    outln!("git log {}:", outcome.branch);
    for c in driver::branch_log(&outcome.repo, &outcome.branch, 20).await? {
        outln!("  {} {} <{}> {}", c.sha.get(..10).unwrap_or(&c.sha), c.author_name, c.author_email, c.summary);
        for line in c.message.lines().filter(|l| l.starts_with("Baton-")) {
            outln!("             {line}");
        }
    }
    outln!("\nInspect it with: git -C {} log --stat {}", repo.root().display(), outcome.branch);
    Ok(code)
}

/// The board demo's gate: every Markdown file the agents wrote is non-empty.
const BOARD_CHECK_SCRIPT: &str = "#!/bin/sh\n\
# The board demo's test gate: every file under docs/, src/ and tests/ is non-empty.\n\
set -e\n\
for f in $(find docs src tests -type f 2>/dev/null); do\n\
  test -s \"$f\" || { echo \"empty: $f\"; exit 1; }\n\
done\n\
echo \"every file has content\"\n";

/// The demo specs: (title, body, how far along: 0 draft, 1 enriched, 2 approved).
const DEMO_SPECS: &[(&str, &str, u8)] = &[
    (
        "Add a farewell message to the greeting service",
        "The service greets people but never says goodbye. Add a farewell message next to the greeting, with a test.",
        0,
    ),
    (
        "Fix the greeting when the name is empty",
        "An empty name produces \"Hello, !\". Greet \"Hello, stranger!\" instead, and cover it with a test.",
        1,
    ),
    ("Document the greeting service", "Write a short guide to the greeting service for new contributors.", 2),
];

/// Name of the demo project `baton serve --demo` registers.
pub const DEMO_PROJECT: &str = "demo";

/// `baton serve --demo`: creates (once) a small repository under `<data>/demo/board-repo`,
/// registers it as project `demo` on the demo agent, and adds the demo specs. Does nothing
/// when the project exists.
///
/// Errors: the repository cannot be created; the database.
pub async fn seed_board(data: &DataDir, specs: &crate::runtime::specs::Specs) -> anyhow::Result<()> {
    if specs.projects().await?.iter().any(|p| p.name == DEMO_PROJECT) {
        return Ok(());
    }
    let repo_path = data.root().join("demo").join("board-repo");
    let repo = if repo_path.join(".git").exists() {
        let p = repo_path.clone();
        blocking(move || GitRepo::open(&p)).await??
    } else {
        let p = repo_path.clone();
        blocking(move || {
            git::init_repository(
                &p,
                &[("README.md", README), ("scripts/check.sh", BOARD_CHECK_SCRIPT), ("agents/architect.md", ARCHITECT)],
                "Initial commit of the demo repository",
            )
        })
        .await??
    };
    let project = crate::runtime::specs::NewProject {
        name: DEMO_PROJECT.into(),
        repo_path: repo.root().to_path_buf(),
        agent_profile: Some("demo".into()),
        test_command: Some("sh scripts/check.sh".into()),
        ..Default::default()
    };
    specs.register_project(project).await.map_err(|e| anyhow::anyhow!("registering the demo project: {e}"))?;
    for (title, body, stage) in DEMO_SPECS {
        let input = crate::runtime::specs::SpecInput {
            project: DEMO_PROJECT.into(),
            title: (*title).into(),
            body: (*body).into(),
            priority: Some(2),
        };
        let row = specs.create(input, "board", "", "baton demo").await.map_err(|e| anyhow::anyhow!("{e}"))?;
        if *stage >= 1 {
            specs.enrich(row.spec_id, "baton demo").await.map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        if *stage >= 2 {
            specs.review(row.spec_id, true, "", "baton demo", None).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        }
    }
    outln!("Registered the demo project (repository {}) with {} specs", repo.root().display(), DEMO_SPECS.len());
    Ok(())
}
