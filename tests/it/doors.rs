//! The door matrix (issue 13): one operator decision gives the same answer whichever door it
//! comes through — the CLI (`baton execute …`, `baton approval link`), REST
//! (`/api/v1/executions/{id}/…`), a board form (`/executions/{id}/…`), a signed approval link
//! (`/approve/{token}`, minted by the CLI, by the board's link form, or signed with the server
//! key by hand where minting refuses), a `/baton approve` GitHub comment delivered by webhook,
//! and the driver where it applies (a checkpoint). Each row asserts, door by door, the same
//! outcome, the same journal entry and the same refusal.
//!
//! Statuses are the HTTP status, or the CLI's exit code. A webhook answers a comment that
//! decides nothing `202 {"ignored": reason}` (the forge only needs to know it arrived).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::StatusCode;
use baton::runtime::auth::LinkClaims;
use baton::runtime::specs::SpecInput;
use baton::store::SpecChange;
use serde_json::{json, Value};

use crate::app::{phases_plan, Caller, TestApp};
use crate::common::{code, stderr, stdout};

/// The project every fired spec belongs to: it requires a separate reviewer.
const PROJECT: &str = "strict";
/// The feedback every approval carries (a comment's words after `/baton approve`).
const FEEDBACK: &str = "ship it";

/// The users: name and role; each has a token and the GitHub login `<name>-gh`.
const USERS: [(&str, &str); 7] = [
    ("ada", "admin"),
    ("lee", "lead"),
    ("fred", "lead"),
    ("alice", "lead"),
    ("rita", "reviewer"),
    ("ray", "reviewer"),
    ("vic", "viewer"),
];

/// The doors an approval comes through, in the order of the tables' columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Door {
    /// `baton --as USER execute approve`.
    Cli,
    /// `POST /api/v1/executions/{id}/approve` with the user's token.
    Rest,
    /// The board's approval form `POST /executions/{id}/approve`, with the user's token.
    Form,
    /// A link `baton --as lee approval link --reviewer USER` minted, redeemed.
    CliLink,
    /// A link the board's link form (`/executions/{id}/approval-link`, as lee) minted, redeemed.
    FormLink,
    /// A link signed with the server key by hand (as one minted before a change would be),
    /// redeemed.
    SignedLink,
    /// A `/baton approve ship it` comment by the user's GitHub login, by webhook.
    Comment,
}

const DOORS: [Door; 7] =
    [Door::Cli, Door::Rest, Door::Form, Door::CliLink, Door::FormLink, Door::SignedLink, Door::Comment];

impl Door {
    fn is_link(self) -> bool {
        matches!(self, Door::CliLink | Door::FormLink | Door::SignedLink)
    }

    /// The actor journaled for `who`'s decision through this door.
    fn actor(self, who: &str) -> String {
        if self.is_link() {
            format!("{who} (approval link)")
        } else {
            who.to_string()
        }
    }
}

/// How a door answered: the HTTP status or the CLI's exit code, and what it said (the JSON
/// body's message, the page, or the CLI's stderr and stdout).
#[derive(Debug)]
struct Answer {
    status: u16,
    text: String,
    json: Value,
}

fn cli_answer(out: &std::process::Output) -> Answer {
    let status = u16::try_from(code(out)).unwrap_or(u16::MAX);
    Answer { status, text: format!("{}{}", stderr(out), stdout(out)), json: Value::Null }
}

fn json_answer(status: StatusCode, json: Value) -> Answer {
    let text =
        ["message", "ignored"].iter().find_map(|k| json[k].as_str()).map_or_else(|| json.to_string(), String::from);
    Answer { status: status.as_u16(), text, json }
}

fn page_answer(status: StatusCode, html: String) -> Answer {
    Answer { status: status.as_u16(), text: html, json: Value::Null }
}

/// `text` as a form value (`application/x-www-form-urlencoded`).
fn form_value(text: &str) -> String {
    baton::web::auth::urlencode(text).replace("%20", "+")
}

/// The link token in a text that shows `…/approve/<token>`.
fn link_token(text: &str) -> String {
    let at = text.find("/approve/").unwrap_or_else(|| panic!("no link in {text}")) + "/approve/".len();
    text[at..].chars().take_while(|c| c.is_ascii_hexdigit() || *c == '.').collect()
}

/// A fired execution waiting for the approval of its phase 1: its spec was written by alice
/// (imported from GitHub issue `url`) and fired by fred.
struct Fired {
    task_id: String,
    spec_id: i64,
    url: String,
    title: String,
}

/// The app with the users and the project, and a counter for unique names.
struct Doors {
    t: TestApp,
    tokens: HashMap<&'static str, String>,
    n: AtomicUsize,
}

impl Doors {
    async fn new() -> Doors {
        let t = TestApp::new().await;
        let tokens: HashMap<&'static str, String> =
            USERS.iter().map(|(name, role)| (*name, t.user(name, role, Some(&format!("{name}-gh"))))).collect();
        let project = json!({"name": PROJECT, "repo_path": t.ws.repo(), "agent_profile": "demo",
                             "require_separate_reviewer": true});
        let (status, body) = t.post_with("/api/v1/projects", &tokens["ada"], project).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        Doors { t, tokens, n: AtomicUsize::new(0) }
    }

    fn next(&self) -> usize {
        self.n.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// `who`'s token; a made-up one for a name that is no user.
    fn token(&self, who: &str) -> &str {
        self.tokens.get(who).map_or("baton_0000000000000000000000000000000000000000", String::as_str)
    }

    /// A new [`Fired`] execution of a two-phase plan, step 1.1 recorded.
    async fn fired(&self) -> Fired {
        self.fired_by("alice").await
    }

    /// [`Doors::fired`] with the spec's creator recorded as `author` (a webhook import
    /// records `github:<login>`).
    async fn fired_by(&self, author: &str) -> Fired {
        let n = self.next();
        let (url, title) = (format!("https://github.com/o/r/issues/{n}"), format!("Door spec {n}"));
        let input = SpecInput { project: PROJECT.into(), title: title.clone(), body: "Do it.".into(), priority: None };
        let spec = self.t.app.specs.create(input, "github", &url, author).await.unwrap();
        let task_id = self.t.execution(&phases_plan(&format!("door-{n}"), 2, true)).await;
        let step = json!({"kind": "step_recorded", "step_id": "1.1", "agent_name": "agent-1", "status": "complete",
                          "outcome": "done"});
        let uri = format!("/api/v1/executions/{task_id}/events");
        let (status, body) = self.t.post_with(&uri, &self.tokens["fred"], step).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["next_action"]["action_type"], "approval", "{body}");
        // Fired by fred, as `Specs::fire` records it (firing itself would start agents).
        let fire = SpecChange {
            action: "fire".into(),
            expected: "imported".into(),
            to: "executing".into(),
            actor: "fred".into(),
            at: self.t.app.clock.now_rfc3339(),
            ..SpecChange::default()
        };
        self.t.store().change_spec(spec.spec_id, &fire).await.unwrap();
        self.t.store().attach_execution(spec.spec_id, &task_id).await.unwrap();
        Fired { task_id, spec_id: spec.spec_id, url, title }
    }

    /// The idempotency key a door sends: `key`, else (forms) a fresh one per submission, as
    /// the rendered board does.
    fn submission(&self, key: Option<&str>) -> String {
        key.map_or_else(|| format!("form-{}", self.next()), String::from)
    }

    /// `who` approves phase 1 of `f` (feedback [`FEEDBACK`]) through `door`, with `key` where
    /// the door takes one.
    async fn approve(&self, door: Door, who: &str, f: &Fired, key: Option<&str>) -> Answer {
        let task = f.task_id.as_str();
        match door {
            Door::Cli => {
                let mut args = vec![
                    "--as",
                    who,
                    "execute",
                    "approve",
                    "--task-id",
                    task,
                    "--phase-id",
                    "1",
                    "--result",
                    "approve",
                ];
                args.extend(["--feedback", FEEDBACK]);
                if let Some(k) = key {
                    args.extend(["--idempotency-key", k]);
                }
                cli_answer(&self.t.cli(&args))
            }
            Door::Rest => {
                let mut body = json!({"phase_id": 1, "result": "approve", "feedback": FEEDBACK});
                if let Some(k) = key {
                    body["idempotency_key"] = json!(k);
                }
                let (status, body) =
                    self.t.post_with(&format!("/api/v1/executions/{task}/approve"), self.token(who), body).await;
                json_answer(status, body)
            }
            Door::Form => {
                let fields = format!(
                    "phase_id=1&result=approve&feedback={}&submission={}",
                    form_value(FEEDBACK),
                    self.submission(key)
                );
                let (status, _, html) =
                    self.t.form(&format!("/executions/{task}/approve"), Caller::Token(self.token(who)), &fields).await;
                page_answer(status, html)
            }
            Door::CliLink | Door::FormLink | Door::SignedLink => match self.mint(door, who, f).await {
                Ok(token) => self.redeem(&token, key).await,
                Err(refused) => refused,
            },
            Door::Comment => self.comment(who, f, &format!("delivery-{}", self.next())).await,
        }
    }

    /// A link for `reviewer` to decide phase 1 of `f`, minted through `door` (signed by hand
    /// for [`Door::SignedLink`]); the door's refusal when it refuses to mint one.
    async fn mint(&self, door: Door, reviewer: &str, f: &Fired) -> Result<String, Answer> {
        let task = f.task_id.as_str();
        match door {
            Door::CliLink => {
                let out = self.t.cli(&["--as", "lee", "approval", "link", "--task-id", task, "--reviewer", reviewer]);
                if code(&out) != 0 {
                    return Err(cli_answer(&out));
                }
                Ok(link_token(&stdout(&out)))
            }
            Door::FormLink => {
                let uri = format!("/executions/{task}/approval-link");
                let (status, _, html) =
                    self.t.form(&uri, Caller::Token(&self.tokens["lee"]), &format!("reviewer={reviewer}")).await;
                if status != StatusCode::OK {
                    return Err(page_answer(status, html));
                }
                Ok(link_token(&html))
            }
            _ => {
                let claims = LinkClaims {
                    link_id: format!("by-hand-{}", self.next()),
                    task_id: task.to_string(),
                    phase_id: 1,
                    expires: self.t.app.clock.now().timestamp() + 3600,
                    reviewer: reviewer.to_string(),
                };
                Ok(self.t.app.key.link(&claims))
            }
        }
    }

    /// Decides through the link `token` (approve, [`FEEDBACK`]) as its page's form does.
    async fn redeem(&self, token: &str, key: Option<&str>) -> Answer {
        let fields = format!("result=approve&feedback={}&submission={}", form_value(FEEDBACK), self.submission(key));
        let (status, _, html) = self.t.form(&format!("/approve/{token}"), Caller::Anonymous, &fields).await;
        page_answer(status, html)
    }

    /// `/baton approve ship it` on `f`'s issue by `<who>-gh`, as webhook delivery `delivery`.
    async fn comment(&self, who: &str, f: &Fired, delivery: &str) -> Answer {
        let login = format!("{who}-gh");
        let payload = json!({
            "action": "created",
            "issue": {"number": 1, "html_url": f.url},
            "comment": {"body": format!("/baton approve {FEEDBACK}"), "user": {"login": login}},
            "repository": {"full_name": "o/r"},
            "sender": {"login": login}
        });
        let (status, body) = self.t.github_webhook("issue_comment", delivery, &payload).await;
        json_answer(status, body)
    }

    /// The approval entries of `f`'s journal.
    async fn approvals(&self, f: &Fired) -> Vec<Value> {
        self.t.journal(&f.task_id).await.into_iter().filter(|e| e["kind"] == "approval_recorded").collect()
    }

    /// Asserts that `f` holds exactly one approval, `who`'s through `door` (journaled and
    /// signed as every door does), and goes on with step 2.1.
    async fn assert_approved_once(&self, f: &Fired, door: Door, who: &str, ctx: &str) {
        let approvals = self.approvals(f).await;
        assert_eq!(approvals.len(), 1, "{ctx}: {approvals:?}");
        let p = &approvals[0]["payload"];
        assert_eq!(p["actor"], door.actor(who), "{ctx}: {p}");
        assert_eq!((p["phase_id"].as_i64(), p["result"].as_str()), (Some(1), Some("approve")), "{ctx}: {p}");
        assert_eq!(p["feedback"], FEEDBACK, "{ctx}: {p}");
        assert_eq!(self.t.store().decision_signatures(&f.task_id).await.unwrap().len(), 1, "{ctx}: signed");
        let state = self.t.app.ops.get(&f.task_id).await.unwrap();
        let next = serde_json::to_value(baton::engine::next_action(&state)).unwrap();
        assert_eq!((next["action_type"].as_str(), next["step_id"].as_str()), (Some("dispatch"), Some("2.1")), "{ctx}");
    }

    /// Asserts that nothing was decided on `f`: no approval, no signature, still pending.
    async fn assert_undecided(&self, f: &Fired, ctx: &str) {
        assert!(self.approvals(f).await.is_empty(), "{ctx}: nothing is journaled");
        assert!(self.t.store().decision_signatures(&f.task_id).await.unwrap().is_empty(), "{ctx}: nothing signed");
        let state = self.t.app.ops.get(&f.task_id).await.unwrap();
        assert_eq!(state.pending_approval_request.map(|r| r.phase_id), Some(1), "{ctx}: still waiting");
    }
}

/// What a row expects of every door.
enum Outcome {
    /// Recorded: the answers of [`RECORDED`], one approval journaled (its actor per door).
    Recorded,
    /// Refused with these statuses, saying these words at every door; nothing journaled.
    Refused([u16; 7], &'static [&'static str]),
    /// Refused with these statuses, each door saying its own words; nothing journaled.
    RefusedSaying([u16; 7], [&'static str; 7]),
}

//                            CLI  REST  form  CLI link  form link  signed link  comment
const RECORDED: [u16; 7] = [0, 201, 303, 200, 200, 200, 200];
const FORBIDDEN: [u16; 7] = [2, 403, 403, 2, 403, 403, 202];
const UNKNOWN: [u16; 7] = [2, 401, 401, 2, 422, 403, 202];

/// One decision through every door.
struct Row {
    decision: &'static str,
    who: &'static str,
    outcome: Outcome,
}

/// The separate-reviewer rule's words.
const SEPARATE: &str = "project strict requires a separate reviewer";

fn approval_rows() -> Vec<Row> {
    vec![
        Row { decision: "a reviewer approves", who: "rita", outcome: Outcome::Recorded },
        Row {
            decision: "the lead who fired it approves",
            who: "fred",
            outcome: Outcome::Refused(FORBIDDEN, &["fred fired this execution", SEPARATE]),
        },
        Row {
            decision: "the spec's author approves",
            who: "alice",
            outcome: Outcome::Refused(FORBIDDEN, &["alice wrote its spec", SEPARATE]),
        },
        Row {
            decision: "a viewer approves",
            who: "vic",
            outcome: Outcome::Refused(FORBIDDEN, &["vic is a viewer", "reviewer role"]),
        },
        Row {
            decision: "someone Baton does not know approves",
            who: "ghost",
            outcome: Outcome::RefusedSaying(
                UNKNOWN,
                [
                    "--as ghost: no Baton user of that name",
                    "unknown or revoked API token",
                    "unknown or revoked API token",
                    "ghost is not a Baton user",
                    "ghost is not a Baton user",
                    "ghost is not a Baton user",
                    "GitHub user ghost-gh is not mapped to a Baton user",
                ],
            ),
        },
    ]
}

#[tokio::test]
async fn an_approval_is_recorded_or_refused_alike_through_every_door() {
    let d = Doors::new().await;
    for row in approval_rows() {
        for (i, door) in DOORS.into_iter().enumerate() {
            let f = d.fired().await;
            let answer = d.approve(door, row.who, &f, None).await;
            let ctx = format!("{} through {door:?}: {} {}", row.decision, answer.status, answer.text);
            match &row.outcome {
                Outcome::Recorded => {
                    assert_eq!(answer.status, RECORDED[i], "{ctx}");
                    d.assert_approved_once(&f, door, row.who, &ctx).await;
                }
                Outcome::Refused(statuses, says) => {
                    assert_eq!(answer.status, statuses[i], "{ctx}");
                    for s in *says {
                        assert!(answer.text.contains(s), "{ctx}\n  does not say {s:?}");
                    }
                    d.assert_undecided(&f, &ctx).await;
                }
                Outcome::RefusedSaying(statuses, says) => {
                    assert_eq!(answer.status, statuses[i], "{ctx}");
                    assert!(answer.text.contains(says[i]), "{ctx}\n  does not say {:?}", says[i]);
                    d.assert_undecided(&f, &ctx).await;
                }
            }
        }
    }
}

/// A spec imported by webhook records its creator as `github:<login>`: the separate-reviewer
/// rule still knows it as the Baton user that login maps to (it once compared the raw text
/// and let the issue's author approve their own work).
#[tokio::test]
async fn the_author_of_an_imported_spec_is_refused_through_every_door() {
    let d = Doors::new().await;
    for (i, door) in DOORS.into_iter().enumerate() {
        let f = d.fired_by("github:alice-gh").await;
        let answer = d.approve(door, "alice", &f, None).await;
        let ctx = format!("alice (github:alice-gh) through {door:?}: {} {}", answer.status, answer.text);
        assert_eq!(answer.status, FORBIDDEN[i], "{ctx}");
        assert!(answer.text.contains("alice wrote its spec") && answer.text.contains(SEPARATE), "{ctx}");
        d.assert_undecided(&f, &ctx).await;
    }
}

#[tokio::test]
async fn the_cli_needs_a_baton_user_to_decide_once_users_exist() {
    let d = Doors::new().await;
    let f = d.fired().await;
    let approve = ["execute", "approve", "--task-id", &f.task_id, "--phase-id", "1", "--result", "approve"];
    // (`--as` given, BATON_USER given, what is said)
    let cases = [
        (Some("nobody"), None, "--as nobody: no Baton user of that name"),
        (None, Some("nobody"), "--as nobody: no Baton user of that name"),
        (None, None, "Baton has users: say who you are with --as USER (or BATON_USER)"),
    ];
    for (as_user, env_user, says) in cases {
        let flags = as_user.map(|u| ["--as", u]);
        let args: Vec<&str> = flags.iter().flatten().chain(approve.iter()).copied().collect();
        let env: Vec<(&str, &str)> = env_user.map(|u| ("BATON_USER", u)).into_iter().collect();
        let out = d.t.cli_env(&args, &env);
        assert_eq!(code(&out), 2, "{args:?} {env:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?} {env:?}: {}", stderr(&out));
        d.assert_undecided(&f, &format!("{args:?} {env:?}")).await;
    }
    // The same user through BATON_USER decides.
    let out = d.t.cli_env(&approve, &[("BATON_USER", "rita")]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let approvals = d.approvals(&f).await;
    assert_eq!(approvals[0]["payload"]["actor"], "rita");
}

/// Found by a tester: with no users, `--as ""` ran as the default operator (`$USER@host`)
/// while the `--as` error text says a name is 1 to 200 characters. It is refused (exit 2,
/// nothing journaled); an empty `BATON_USER` is no name, as an empty variable is unset.
#[tokio::test]
async fn an_empty_as_is_refused_and_an_empty_baton_user_is_unset() {
    let t = TestApp::with_repo(&[("README.md", "hello\n")]).await;
    let plan = t.ws.write("named.json", &phases_plan("named-1", 1, false).to_string());
    t.cli_ok(&["execute", "start", "--plan", plan.to_str().unwrap()]);
    for name in ["", "  "] {
        let out = t.cli(&["--as", name, "execute", "pause"]);
        assert_eq!(code(&out), 2, "{name:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("--as"), "{name:?}: {}", stderr(&out));
    }
    let (_, body) = t.get("/api/v1/executions/named-1").await;
    assert_eq!(body["paused"], false, "refused: nothing changed: {body}");
    let out = t.cli_env(&["execute", "pause"], &[("BATON_USER", "")]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (_, body) = t.get("/api/v1/executions/named-1").await;
    assert_eq!(body["paused"], true, "{body}");
}

/// A fresh-user tester found `execute start` skipped who-are-you and the role once users
/// existed: without `--as`, as a viewer, and as a name that is no user, it started the plan.
/// Starting is a lead's (as firing is), decided by `Ops::start`, for `execute run --plan` too.
#[tokio::test]
async fn the_cli_needs_a_lead_to_start_an_execution_once_users_exist() {
    let d = Doors::new().await;
    let plan = d.t.ws.write("started.json", &phases_plan("started-1", 1, false).to_string());
    let start = ["execute", "start", "--plan", plan.to_str().unwrap()];
    let cases = [
        (None, "Baton has users: say who you are with --as USER (or BATON_USER)"),
        (Some("nobody"), "--as nobody: no Baton user of that name"),
        (Some("vic"), "vic is a viewer; starting an execution needs the lead role"),
        (Some("rita"), "rita is a reviewer; starting an execution needs the lead role"),
    ];
    for (as_user, says) in cases {
        let flags = as_user.map(|u| ["--as", u]);
        let args: Vec<&str> = flags.iter().flatten().chain(start.iter()).copied().collect();
        let out = d.t.cli(&args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
        let status = d.t.cli(&["execute", "status", "--task-id", "started-1"]);
        assert_ne!(code(&status), 0, "{args:?} started it: {}", stdout(&status));
    }
    // `execute run --plan` starts one too (its driver creates it): the same rule.
    let repo = d.t.ws.repo();
    let run = ["--as", "vic", "execute", "run", "--plan", plan.to_str().unwrap(), "--repo", repo.to_str().unwrap()];
    let out = d.t.cli(&[&run[..], &["--agent", "demo"]].concat());
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("vic is a viewer; starting an execution needs the lead role"), "{}", stderr(&out));
    assert_ne!(code(&d.t.cli(&["execute", "status", "--task-id", "started-1"])), 0, "run started it");
    let out = d.t.cli(&["--as", "lee", "execute", "start", "--plan", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(field(&stdout(&out), "ACTION:"), "DISPATCH");
}

#[tokio::test]
async fn a_link_is_refused_for_a_user_who_cannot_decide_and_at_use_once_its_reviewer_was_demoted() {
    let d = Doors::new().await;
    // Minting for a user who does not exist is refused, by the CLI and by the board's form.
    let f = d.fired().await;
    for door in [Door::CliLink, Door::FormLink] {
        let refused = d.mint(door, "ghost", &f).await.expect_err("no link for a user who does not exist");
        assert_eq!(refused.status, if door == Door::CliLink { 2 } else { 422 }, "{door:?}: {refused:?}");
        assert!(refused.text.contains("ghost is not a Baton user"), "{door:?}: {refused:?}");
    }
    // Links minted for rita while she is a reviewer; then she is made a viewer.
    let links = [d.mint(Door::CliLink, "rita", &f).await.unwrap(), d.mint(Door::FormLink, "rita", &f).await.unwrap()];
    d.t.cli_ok(&["token", "create", "--user", "rita", "--role", "viewer", "--change-role"]);
    for token in &links {
        let (status, page) = d.t.page(&format!("/approve/{token}"), Caller::Anonymous).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
        let answer = d.redeem(token, None).await;
        assert_eq!(answer.status, 403, "{answer:?}");
        assert!(answer.text.contains("this approval link can no longer be used: rita is a viewer now"), "{answer:?}");
        d.assert_undecided(&f, "a demoted reviewer's link").await;
    }
    // Nor does a link outlive its hours: made for ray, used a day and an hour later (the clock
    // is moved, not waited for), it has expired.
    let token = d.mint(Door::CliLink, "ray", &f).await.unwrap();
    d.t.advance(chrono::Duration::hours(25));
    let answer = d.redeem(&token, None).await;
    assert_eq!(answer.status, 410, "{answer:?}");
    assert!(answer.text.contains("this approval link has expired"), "{answer:?}");
    d.assert_undecided(&f, "an expired link").await;
}

#[tokio::test]
async fn the_link_page_shows_what_is_approved_without_signing_in() {
    let d = Doors::new().await;
    let f = d.fired().await;
    // Without a sign-in, the board's approvals are closed to this caller…
    let (status, page) = d.t.page("/approvals", Caller::Anonymous).await;
    assert_ne!(status, StatusCode::OK, "{page}");
    // …but the link opens the review of phase 1: its step with the agent's summary, the
    // gates so far, the spend and the earlier decisions, and the form that decides it.
    for door in [Door::CliLink, Door::FormLink] {
        let token = d.mint(door, "rita", &f).await.unwrap();
        let (status, page) = d.t.page(&format!("/approve/{token}"), Caller::Anonymous).await;
        assert_eq!(status, StatusCode::OK, "{door:?}: {page}");
        for expected in [
            "Approval requested from rita",
            "id=\"review-1\"",
            "class=\"review-spend\"",
            "Step 1.1 · agent-1",
            "<blockquote class=\"agent-summary\">done</blockquote>",
            "No gate has run on this execution yet.",
            "Earlier decisions",
            "id=\"link-approval-form\"",
            "name=\"result\" value=\"approve\"",
        ] {
            assert!(page.contains(expected), "{door:?}: the link page lacks {expected:?}:\n{page}");
        }
        assert!(!page.contains("id=\"signed-in\""), "{door:?}: nobody is signed in");
    }
    d.assert_undecided(&f, "opening a link decides nothing").await;
}

/// The first decision of the idempotency rows: rita, through REST, with key `first`.
async fn rita_approves_first(d: &Doors, f: &Fired) -> Value {
    let answer = d.approve(Door::Rest, "rita", f, Some("first")).await;
    assert_eq!(answer.status, 201, "{answer:?}");
    d.approvals(f).await.remove(0)
}

#[tokio::test]
async fn a_resend_answers_the_first_outcome_through_every_door() {
    let d = Doors::new().await;
    //                          CLI  REST  form  CLI link  form link  signed link  comment
    const RESENT: [u16; 7] = [0, 200, 303, 200, 200, 200, 200];
    for (i, door) in DOORS.into_iter().enumerate() {
        let f = d.fired().await;
        let (first, token) = match door {
            Door::CliLink | Door::FormLink | Door::SignedLink => {
                let token = d.mint(door, "rita", &f).await.unwrap();
                (d.redeem(&token, Some("k1")).await, Some(token))
            }
            Door::Comment => (d.comment("rita", &f, "resent-delivery").await, None),
            _ => (d.approve(door, "rita", &f, Some("k1")).await, None),
        };
        assert_eq!(first.status, RECORDED[i], "{door:?}: {first:?}");
        let again = match (door, &token) {
            (Door::Comment, _) => d.comment("rita", &f, "resent-delivery").await,
            (_, Some(token)) => d.redeem(token, Some("k1")).await,
            _ => d.approve(door, "rita", &f, Some("k1")).await,
        };
        let ctx = format!("{door:?} resent: {} {}", again.status, again.text);
        assert_eq!(again.status, RESENT[i], "{ctx}");
        match door {
            Door::Cli => {
                assert!(again.text.contains("was already applied (idempotency key k1): nothing changed"), "{ctx}");
                assert_eq!(first.text.lines().last(), again.text.lines().last(), "{ctx}: the same next action");
            }
            Door::Rest => {
                assert_eq!(again.json["recorded"], false, "{ctx}");
                assert_eq!(again.json["idempotency_key"], first.json["idempotency_key"], "{ctx}");
                assert_eq!(again.json["next_action"], first.json["next_action"], "{ctx}: the first outcome");
            }
            Door::Comment => assert_eq!(again.json, json!({"duplicate": true}), "{ctx}"),
            Door::CliLink | Door::FormLink | Door::SignedLink => {
                assert!(again.text.contains("Decision recorded"), "{ctx}: the confirmation again");
            }
            Door::Form => {}
        }
        d.assert_approved_once(&f, door, "rita", &ctx).await;
    }
}

#[tokio::test]
async fn a_second_decision_on_a_decided_approval_is_409_naming_the_one_that_stands() {
    let d = Doors::new().await;
    //                          CLI  REST  form  CLI link  form link  signed link  comment
    const DECIDED: [u16; 7] = [2, 409, 409, 409, 409, 409, 202];
    // Another reviewer's identical approval (no key), and rita's own under another key.
    for (who, key) in [("ray", None), ("rita", Some("second"))] {
        for (i, door) in DOORS.into_iter().enumerate() {
            let f = d.fired().await;
            // A link is minted while the approval is pending, and used after it was decided.
            let token = if door.is_link() { Some(d.mint(door, who, &f).await.unwrap()) } else { None };
            let standing = rita_approves_first(&d, &f).await;
            let answer = match &token {
                Some(token) => d.redeem(token, key).await,
                None => d.approve(door, who, &f, key).await,
            };
            let ctx = format!("{who} with key {key:?} through {door:?}: {} {}", answer.status, answer.text);
            assert_eq!(answer.status, DECIDED[i], "{ctx}");
            let at = standing["at"].as_str().unwrap();
            let says = format!("already decided: approve by rita at {at}");
            assert!(answer.text.contains(&says), "{ctx}\n  does not say {says:?}");
            if door == Door::Rest {
                assert_eq!(answer.json["details"]["reason"], "already_decided", "{ctx}");
                assert_eq!(
                    answer.json["details"]["standing"],
                    json!({"by": "rita", "at": at, "what": "approve"}),
                    "{ctx}"
                );
            }
            d.assert_approved_once(&f, Door::Rest, "rita", &ctx).await;
        }
    }
}

/// The doors of a budget decision, and of cancel: the CLI as lee, REST and the board's form
/// with lee's token.
const LEAD_DOORS: [Door; 3] = [Door::Cli, Door::Rest, Door::Form];

/// An execution of a two-phase plan parked at its $1.00 ceiling before step 2.1 ($0.95 spent,
/// $0.20 forecast: a raise of at least $0.15 is needed).
async fn parked(d: &Doors) -> String {
    let task_id = d.t.execution(&phases_plan(&format!("budget-{}", d.next()), 2, false)).await;
    let uri = format!("/api/v1/executions/{task_id}/events");
    let forecast = json!({"kind": "forecasted", "steps": {
        "1.1": {"low_usd": 0.1, "mid_usd": 0.2, "high_usd": 0.4}, "2.1": {"low_usd": 0.1, "mid_usd": 0.2, "high_usd": 0.4}},
        "default_usd": 0.2});
    let ceiling = json!({"kind": "budget_set", "ceiling_usd": 1.0, "source": "spec"});
    let step = json!({"kind": "step_recorded", "step_id": "1.1", "agent_name": "agent-1", "status": "complete",
                      "outcome": "done", "cost_usd": 0.95});
    for event in [forecast, ceiling, step] {
        let (status, body) = d.t.post_with(&uri, &d.tokens["lee"], event).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let state = d.t.app.ops.get(&task_id).await.unwrap();
    let next = serde_json::to_value(baton::engine::next_action(&state)).unwrap();
    assert_eq!((next["action_type"].as_str(), next["needed_usd"].as_f64()), (Some("budget"), Some(0.15)), "{next}");
    task_id
}

/// lee raises `task_id`'s ceiling by $0.10 through `door` with idempotency key `key`.
async fn raise(d: &Doors, door: Door, task_id: &str, key: &str) -> Answer {
    match door {
        Door::Cli => cli_answer(&d.t.cli(&[
            "--as",
            "lee",
            "execute",
            "budget",
            "--task-id",
            task_id,
            "--raise",
            "0.10",
            "--idempotency-key",
            key,
        ])),
        Door::Rest => {
            let body = json!({"decision": "raise", "by_usd": 0.1, "idempotency_key": key});
            let (status, body) =
                d.t.post_with(&format!("/api/v1/executions/{task_id}/budget"), &d.tokens["lee"], body).await;
            json_answer(status, body)
        }
        _ => {
            let fields = format!("result=raise&by_usd=0.10&submission={key}");
            let uri = format!("/executions/{task_id}/budget");
            let (status, _, html) = d.t.form(&uri, Caller::Token(&d.tokens["lee"]), &fields).await;
            page_answer(status, html)
        }
    }
}

#[tokio::test]
async fn two_raises_of_one_amount_under_two_keys_on_an_execution_parked_twice_are_both_applied() {
    let d = Doors::new().await;
    // The CLI exits with the code of the action it prints: 3 while a decision is awaited.
    //                                CLI  REST  form
    const PARKED_AGAIN: [u16; 3] = [3, 201, 303];
    const RAISED: [u16; 3] = [0, 201, 303];
    for (i, door) in LEAD_DOORS.into_iter().enumerate() {
        let task_id = parked(&d).await;
        // $0.10 is too little: parked again, now needing $0.05.
        let first = raise(&d, door, &task_id, "raise-1").await;
        assert_eq!(first.status, PARKED_AGAIN[i], "{door:?}: {first:?}");
        let state = d.t.app.ops.get(&task_id).await.unwrap();
        let next = serde_json::to_value(baton::engine::next_action(&state)).unwrap();
        assert_eq!(next["action_type"], "budget", "{door:?}: parked again: {next}");
        // The same amount again, deliberately (another key): applied too.
        let second = raise(&d, door, &task_id, "raise-2").await;
        assert_eq!(second.status, RAISED[i], "{door:?}: {second:?}");
        let raises: Vec<Value> =
            d.t.journal(&task_id).await.into_iter().filter(|e| e["kind"] == "budget_raised").collect();
        assert_eq!(raises.len(), 2, "{door:?}: {raises:?}");
        for r in &raises {
            assert_eq!((r["payload"]["actor"].as_str(), r["payload"]["by_usd"].as_f64()), (Some("lee"), Some(0.1)));
        }
        let state = d.t.app.ops.get(&task_id).await.unwrap();
        assert!((state.budget.ceiling_usd.unwrap() - 1.2).abs() < 1e-9, "{door:?}: {:?}", state.budget.ceiling_usd);
        let next = serde_json::to_value(baton::engine::next_action(&state)).unwrap();
        assert_eq!((next["action_type"].as_str(), next["step_id"].as_str()), (Some("dispatch"), Some("2.1")));
    }
}

/// How the API (spec status and stage, the board's column, the execution's summary) and
/// `execute status` show `f` now: (spec status, spec stage, board column, execution status,
/// `execute status` status).
async fn shown(d: &Doors, f: &Fired) -> (String, String, String, String, String) {
    let ada = &d.tokens["ada"];
    let (status, spec) = d.t.get_with(&format!("/api/v1/specs/{}", f.spec_id), ada).await;
    assert_eq!(status, StatusCode::OK, "{spec}");
    let (_, list) = d.t.get_with("/api/v1/executions", ada).await;
    let summary = list.as_array().unwrap().iter().find(|e| e["task_id"] == f.task_id.as_str()).unwrap().clone();
    let mut column = String::new();
    for (uri, archive) in [("/api/v1/board", false), ("/api/v1/board?archived=true", true)] {
        let (_, board) = d.t.get_with(uri, ada).await;
        for c in board["columns"].as_array().unwrap() {
            if c["cards"].as_array().unwrap().iter().any(|card| card["spec_id"] == f.spec_id) {
                assert!(column.is_empty(), "spec {} is in two columns: {board}", f.spec_id);
                column = if archive { "archive".into() } else { c["stage"].as_str().unwrap().to_string() };
            }
        }
    }
    let cli = d.t.cli_ok(&["--json", "execute", "status", "--task-id", &f.task_id]);
    let cli: Value = serde_json::from_str(&cli).unwrap();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (text(&spec["status"]), text(&spec["stage"]), column, text(&summary["status"]), text(&cli["status"]))
}

#[tokio::test]
async fn a_cancel_through_any_door_leaves_the_spec_its_card_and_the_execution_cancelled() {
    let d = Doors::new().await;
    let lee = d.tokens["lee"].clone();
    // The CLI exits with the code of the action it prints: 4 for FAILED ("was cancelled").
    //                          CLI  REST  form  REST (spec)
    const CANCELLED: [u16; 4] = [4, 201, 303, 200];
    for (i, door) in ["cli", "rest", "form", "spec"].into_iter().enumerate() {
        let f = d.fired().await;
        let task = f.task_id.as_str();
        let answer = match door {
            "cli" => {
                cli_answer(&d.t.cli(&["--as", "lee", "execute", "cancel", "--task-id", task, "--reason", "not needed"]))
            }
            "rest" => {
                let (status, body) =
                    d.t.post_with(&format!("/api/v1/executions/{task}/cancel"), &lee, json!({"reason": "not needed"}))
                        .await;
                json_answer(status, body)
            }
            "form" => {
                let (status, _, html) =
                    d.t.form(&format!("/executions/{task}/cancel"), Caller::Token(&lee), "reason=not+needed").await;
                page_answer(status, html)
            }
            _ => {
                let uri = format!("/api/v1/specs/{}/cancel", f.spec_id);
                let (status, body) = d.t.post_with(&uri, &lee, json!({"reason": "not needed"})).await;
                json_answer(status, body)
            }
        };
        let ctx = format!("cancel through {door}: {} {}", answer.status, answer.text);
        assert_eq!(answer.status, CANCELLED[i], "{ctx}");
        let journal = d.t.journal(task).await;
        let last = journal.last().unwrap();
        assert_eq!(last["kind"], "cancelled", "{ctx}: {journal:?}");
        assert_eq!(
            (last["payload"]["actor"].as_str(), last["payload"]["reason"].as_str()),
            (Some("lee"), Some("not needed"))
        );
        let want = ("cancelled", "cancelled", "archive", "cancelled", "cancelled");
        let got = shown(&d, &f).await;
        assert_eq!((&*got.0, &*got.1, &*got.2, &*got.3, &*got.4), want, "{ctx}");
        let (_, archive) = d.t.page("/archive", Caller::Token(&d.tokens["ada"])).await;
        assert!(archive.contains(&f.title), "{ctx}: the card is in the Archive");
        let (_, board) = d.t.page("/", Caller::Token(&d.tokens["ada"])).await;
        assert!(!board.contains(&f.title), "{ctx}: and not on the board");
    }
}

#[tokio::test]
async fn the_api_the_board_and_execute_status_agree_after_pause_resume_complete_and_fail() {
    let d = Doors::new().await;
    let lee = d.tokens["lee"].clone();
    let f = d.fired().await;
    let task = f.task_id.clone();
    let waiting = ("executing", "awaiting_human", "awaiting_human", "approval_pending", "approval_pending");
    let agrees = |got: &(String, String, String, String, String), want: (&str, &str, &str, &str, &str), ctx: &str| {
        assert_eq!((&*got.0, &*got.1, &*got.2, &*got.3, &*got.4), want, "{ctx}");
    };
    let (status, body) = d.t.post_with(&format!("/api/v1/executions/{task}/pause"), &lee, json!({})).await;
    assert_eq!((status, body["paused"].as_bool()), (StatusCode::OK, Some(true)), "{body}");
    assert_eq!(body["changed"], true, "{body}");
    // Idempotent, and says it changed nothing the second time.
    let (status, body) = d.t.post_with(&format!("/api/v1/executions/{task}/pause"), &lee, json!({})).await;
    assert_eq!(
        (status, body["paused"].as_bool(), body["changed"].as_bool()),
        (StatusCode::OK, Some(true), Some(false))
    );
    agrees(&shown(&d, &f).await, waiting, "paused through REST");
    let (status, _, html) = d.t.form(&format!("/executions/{task}/resume"), Caller::Token(&lee), "").await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{html}");
    agrees(&shown(&d, &f).await, waiting, "resumed through the form");
    assert_eq!(d.approve(Door::Rest, "rita", &f, None).await.status, 201);
    agrees(&shown(&d, &f).await, ("executing", "executing", "executing", "running", "running"), "approved");
    let step = json!({"kind": "step_recorded", "step_id": "2.1", "agent_name": "agent-2", "status": "complete",
                      "outcome": "done"});
    assert_eq!(d.t.post_with(&format!("/api/v1/executions/{task}/events"), &lee, step).await.0, StatusCode::CREATED);
    d.t.cli_ok(&["--as", "lee", "execute", "complete", "--task-id", &task]);
    let done = ("executing", "changelist_review", "changelist_review", "complete", "complete");
    agrees(&shown(&d, &f).await, done, "completed through the CLI");

    let f = d.fired().await;
    let task = f.task_id.clone();
    assert_eq!(d.approve(Door::Rest, "rita", &f, None).await.status, 201);
    let step = json!({"kind": "step_recorded", "step_id": "2.1", "agent_name": "agent-2", "status": "failed",
                      "outcome": "", "error": "it broke"});
    assert_eq!(d.t.post_with(&format!("/api/v1/executions/{task}/events"), &lee, step).await.0, StatusCode::CREATED);
    agrees(&shown(&d, &f).await, ("executing", "failed", "failed", "failed", "failed"), "failed");
}

/// Records steps 1.1 to 3.1 of a five-phase execution (open mode, as `orchestrator`): a
/// checkpoint is due before phase 4.
async fn at_checkpoint(t: &TestApp, task_id: &str) {
    t.execution(&phases_plan(task_id, 5, false)).await;
    for n in 1..=3 {
        let step = json!({"kind": "step_recorded", "step_id": format!("{n}.1"), "agent_name": format!("agent-{n}"),
                          "status": "complete", "outcome": format!("part {n} done")});
        let (status, body) = t.post_as(&format!("/api/v1/executions/{task_id}/events"), "orchestrator", step).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let (_, next) = t.get(&format!("/api/v1/executions/{task_id}/next")).await;
    assert_eq!((next["action_type"].as_str(), next["phase_id"].as_i64()), (Some("checkpoint"), Some(4)), "{next}");
}

#[tokio::test]
async fn a_checkpoint_is_acknowledged_alike_by_the_cli_the_api_and_the_driver() {
    let t = TestApp::with_repo(&[("README.md", "hello\n")]).await;
    // The CLI: `execute resume`, which the checkpoint's handoff names.
    at_checkpoint(&t, "ack-cli").await;
    let out = t.cli(&["--as", "lee", "execute", "resume", "--task-id", "ack-cli"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("checkpoint acknowledged"), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("ACTION: DISPATCH") && stdout(&out).contains("Step: 4.1"), "{}", stdout(&out));
    // REST: the event.
    at_checkpoint(&t, "ack-api").await;
    let uri = "/api/v1/executions/ack-api/events";
    let (status, body) = t.post_as(uri, "lee", json!({"kind": "checkpoint_acknowledged"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        (body["next_action"]["action_type"].as_str(), body["next_action"]["step_id"].as_str()),
        (Some("dispatch"), Some("4.1"))
    );
    // The driver: `execute run` passes it on its own.
    let plan = t.ws.write("five.json", &phases_plan("ack-run", 5, false).to_string());
    let out = t.ws.run_plan(&plan);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("ACTION: COMPLETE"), "{}", stdout(&out));

    for (task_id, actor) in [("ack-cli", "lee"), ("ack-api", "lee"), ("ack-run", "baton")] {
        let acks: Vec<Value> =
            t.journal(task_id).await.into_iter().filter(|e| e["kind"] == "checkpoint_acknowledged").collect();
        assert_eq!(acks.len(), 1, "{task_id}: one checkpoint, acknowledged once: {acks:?}");
        assert_eq!(acks[0]["payload"]["actor"], actor, "{task_id}: {acks:?}");
        let state = t.app.ops.get(task_id).await.unwrap();
        assert_eq!((state.checkpoint.count, state.checkpoint.due), (1, false), "{task_id}");
        // The entry follows step 3.1's, before anything of phase 4.
        let kinds: Vec<String> =
            t.journal(task_id).await.iter().map(|e| e["kind"].as_str().unwrap().to_string()).collect();
        let ack = kinds.iter().position(|k| k == "checkpoint_acknowledged").unwrap();
        let recorded_before = kinds[..ack].iter().filter(|k| *k == "step_recorded").count();
        assert_eq!(recorded_before, 3, "{task_id}: {kinds:?}");
    }
}

/// The first line of an action block (`ACTION: DISPATCH`) and the value of its `key:` line.
fn field<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines().find_map(|l| l.trim().strip_prefix(key)).map_or("", str::trim)
}

#[tokio::test]
async fn the_cli_loop_of_an_orchestrator_passes_a_checkpoint_with_resume_and_reaches_complete() {
    // Found as issue 13: `next` → `dispatched` → `record` stalled at CHECKPOINT on any plan of
    // four phases or more: `resume` answered the same CHECKPOINT, and `record` was refused.
    let t = TestApp::with_repo(&[("README.md", "hello\n")]).await;
    let plan = t.ws.write("five.json", &phases_plan("loop-5", 5, false).to_string());
    t.cli_ok(&["execute", "start", "--plan", plan.to_str().unwrap()]);
    let mut seen = Vec::new();
    for _ in 0..20 {
        let next = t.cli_ok(&["execute", "next"]);
        let action = field(&next, "ACTION:").to_string();
        seen.push(action.clone());
        match action.as_str() {
            "DISPATCH" => {
                let (step, agent) = (field(&next, "Step:"), field(&next, "Agent:"));
                t.cli_ok(&["execute", "dispatched", "--step-id", step, "--agent", agent]);
                t.cli_ok(&["execute", "record", "--step-id", step, "--agent", agent, "--outcome", "done"]);
            }
            "CHECKPOINT" => {
                assert_eq!(field(&next, "Phase:"), "4", "due after three phases: {next}");
                assert!(next.contains("--- Handoff ---") && next.contains("Progress: 3 of 5 steps done"), "{next}");
                assert!(next.contains("Resume with: baton execute resume --task-id loop-5"), "{next}");
                let refused = t.cli(&["execute", "record", "--step-id", "4.1", "--agent", "agent-4"]);
                assert_eq!(code(&refused), 2, "nothing is recorded past a due checkpoint");
                assert!(stderr(&refused).contains("a checkpoint is due"), "{}", stderr(&refused));
                let resumed = t.cli(&["execute", "resume"]);
                assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
                assert!(stderr(&resumed).contains("checkpoint acknowledged"), "{}", stderr(&resumed));
                assert_eq!(field(&stdout(&resumed), "ACTION:"), "DISPATCH", "resume prints the next action");
                assert_eq!(field(&stdout(&resumed), "Step:"), "4.1", "{}", stdout(&resumed));
            }
            "COMPLETE" => {
                t.cli_ok(&["execute", "complete"]);
                break;
            }
            other => panic!("unexpected action {other}: {next}"),
        }
    }
    let checkpoints = seen.iter().filter(|a| *a == "CHECKPOINT").count();
    assert_eq!(checkpoints, 1, "one checkpoint, passed: {seen:?}");
    assert_eq!(seen.last().map(String::as_str), Some("COMPLETE"), "{seen:?}");
    assert_eq!(t.ws.status("loop-5")["status"], "complete");
}

/// A pause meant "no new dispatches" only for the server's own driver: an external
/// orchestrator's `execute next` still printed DISPATCH and its `dispatched` was recorded.
#[tokio::test]
async fn a_pause_stops_an_orchestrators_dispatches_through_the_cli_and_the_api_until_resume() {
    let t = TestApp::with_repo(&[("README.md", "hello\n")]).await;
    let plan = t.ws.write("paused.json", &phases_plan("paused-1", 2, false).to_string());
    t.cli_ok(&["execute", "start", "--plan", plan.to_str().unwrap()]);
    assert_eq!(field(&t.cli_ok(&["execute", "next"]), "ACTION:"), "DISPATCH");
    t.cli_ok(&["execute", "pause"]);

    let next = t.cli_ok(&["execute", "next"]);
    assert_eq!(field(&next, "ACTION:"), "WAIT", "{next}");
    assert!(next.contains("paused by an operator") && next.contains("baton execute resume"), "{next}");
    assert_eq!(field(&t.cli_ok(&["execute", "next", "--all"]), "ACTION:"), "WAIT");
    let (status, body) = t.get("/api/v1/executions/paused-1/next").await;
    assert_eq!((status, body["action_type"].as_str()), (StatusCode::OK, Some("wait")), "{body}");
    // The execution's own view agrees (it had answered the engine's DISPATCH).
    let (status, view) = t.get("/api/v1/executions/paused-1").await;
    assert_eq!((status, view["next_action"]["action_type"].as_str()), (StatusCode::OK, Some("wait")), "{view}");
    // Nothing to dispatch while paused: `--all` answers the one WAIT, never `[]` (a loop over
    // `--json next --all` could not tell paused from done, found by a tester).
    let (_, all) = t.get("/api/v1/executions/paused-1/next?all=true").await;
    assert_eq!(all.as_array().map(|a| a.len()), Some(1), "{all}");
    assert_eq!(all[0]["action_type"], "wait", "{all}");
    assert!(all[0]["message"].as_str().unwrap().contains("paused by an operator"), "{all}");
    let cli_all: Value = serde_json::from_str(&t.cli_ok(&["--json", "execute", "next", "--all"])).unwrap();
    assert_eq!(cli_all, all, "the CLI and the API answer alike");
    let refused = t.cli(&["execute", "dispatched", "--step-id", "1.1", "--agent", "agent-1"]);
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
    assert!(stderr(&refused).contains("is paused: no new dispatches"), "{}", stderr(&refused));
    let (status, body) = t
        .post(
            "/api/v1/executions/paused-1/events",
            json!({"kind": "step_dispatched", "step_id": "1.1", "agent_name": "agent-1"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    // A result of a step never dispatched would dispatch it: held back too (a fresh-user
    // tester recorded 1.1 while paused and it ran as attempt 1), through the CLI and the API.
    let refused = t.cli(&["execute", "record", "--step-id", "1.1", "--agent", "agent-1", "--outcome", "while paused"]);
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("is paused: step 1.1 was never dispatched, and recording it would dispatch it"),
        "{}",
        stderr(&refused)
    );
    let (status, body) = t
        .post(
            "/api/v1/executions/paused-1/events",
            json!({"kind": "step_recorded", "step_id": "1.1", "agent_name": "agent-1", "status": "complete"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let journal = t.journal("paused-1").await;
    assert!(
        journal.iter().all(|e| e["kind"] != "step_dispatched" && e["kind"] != "step_recorded"),
        "nothing dispatched"
    );

    let resumed = t.cli(&["execute", "resume"]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    let next = t.cli_ok(&["execute", "next"]);
    assert_eq!((field(&next, "ACTION:"), field(&next, "Step:")), ("DISPATCH", "1.1"), "{next}");
    t.cli_ok(&["execute", "dispatched", "--step-id", "1.1", "--agent", "agent-1"]);
    // The result of an attempt in flight is taken while paused: it dispatches nothing.
    t.cli_ok(&["execute", "pause"]);
    t.cli_ok(&["execute", "record", "--step-id", "1.1", "--agent", "agent-1", "--outcome", "ran before the pause"]);
    assert_eq!(t.journal("paused-1").await.iter().filter(|e| e["kind"] == "step_recorded").count(), 1);
}

/// A tester minted a link valid for 490,000 years (`--hours 4294967295`) and one printed under
/// `javascript:alert(1)`: both are refused, and no link is printed.
#[tokio::test]
async fn an_approval_link_is_refused_for_a_lifetime_over_30_days_or_a_base_url_that_is_not_http() {
    let d = Doors::new().await;
    let f = d.fired().await;
    let link = |extra: &[&str]| {
        let mut args = vec!["--as", "lee", "approval", "link", "--task-id", f.task_id.as_str(), "--reviewer", "rita"];
        args.extend_from_slice(extra);
        d.t.cli(&args)
    };
    // 0 said "0 is not in 1..=4294967295" (clap's range, found by a tester): the one rule
    // (`Ops`) answers every out-of-range value alike.
    for hours in ["0", "721", "4294967295", "-1", "99999999999", "9223372036854775807"] {
        let out = link(&["--hours", hours]);
        assert_eq!(code(&out), 2, "--hours {hours}: {}", stderr(&out));
        assert!(stderr(&out).contains("1 to 720 hours"), "--hours {hours}: {}", stderr(&out));
        assert!(!stdout(&out).contains("/approve/"), "{}", stdout(&out));
    }
    // A query made the link `http://h:1/x?y/approve/…` (found by a tester).
    for base in ["javascript:alert(1)", "file:///etc", "not a url", "http://h:1/x?y", "https://h/#frag"] {
        let out = link(&["--base-url", base]);
        assert_eq!(code(&out), 2, "--base-url {base}: {}", stderr(&out));
        assert!(stderr(&out).contains("--base-url"), "{}", stderr(&out));
        assert!(!stdout(&out).contains("/approve/"), "{}", stdout(&out));
    }
    // Credentials were accepted and printed in the link (found by a tester), for every
    // reviewer it was sent to.
    for base in ["http://u:hunter2@h/", "https://u@h/", "http://:hunter2@h/"] {
        let out = link(&["--base-url", base]);
        assert_eq!(code(&out), 2, "--base-url {base}: {}", stderr(&out));
        assert!(stderr(&out).contains("without a user name or password"), "{}", stderr(&out));
        assert!(!stdout(&out).contains("/approve/"), "{}", stdout(&out));
    }
    let out = link(&["--hours", "720", "--base-url", "https://baton.example.com/"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).starts_with("https://baton.example.com/approve/"), "{}", stdout(&out));
    // The address as parsed: a space had reached the link as it was typed (found by a tester).
    for (base, printed) in [("http://h/ space", "http://h/%20space/approve/"), ("HTTP://H:1/", "http://h:1/approve/")] {
        let out = link(&["--base-url", base]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(stdout(&out).starts_with(printed), "{base}: {}", stdout(&out));
    }
}
