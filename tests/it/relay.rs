//! The CLI relay (issue 14.8): `baton execute …` calls on a data directory that `baton serve`
//! serves run in the server, and mean exactly what they mean in a process of their own.

use std::process::Output;

use crate::common::Workspace;
use crate::serve::Server;

/// A one-phase plan of `n` steps for worker.
fn plan(ws: &Workspace, n: usize) -> std::path::PathBuf {
    let steps: Vec<_> = (1..=n)
        .map(|i| serde_json::json!({"step_id": format!("1.{i}"), "agent_name": "worker", "task_description": "do it"}))
        .collect();
    let plan = serde_json::json!({"task_id": "relay", "task_summary": "relay", "phases": [{"phase_id": 1, "name": "All", "steps": steps}]});
    ws.write("plan.json", &plan.to_string())
}

/// Runs `args` with the client's debug log on: (output, whether the server ran it).
fn call(ws: &Workspace, args: &[&str], env: &[(&str, &str)]) -> (Output, bool) {
    let out = ws.baton().env("BATON_LOG", "baton=debug").envs(env.iter().copied()).args(args).output().unwrap();
    let relayed = String::from_utf8_lossy(&out.stderr).contains("ran the call (CLI relay)");
    (out, relayed)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).lines().filter(|l| !l.contains("DEBUG")).collect::<Vec<_>>().join("\n")
}

#[test]
fn calls_on_a_served_data_dir_run_in_the_server_and_print_what_a_process_of_their_own_prints() {
    let relayed_ws = Workspace::with_repo(&[("a.txt", "a\n")]);
    let local_ws = Workspace::with_repo(&[("a.txt", "a\n")]);
    for ws in [&relayed_ws, &local_ws] {
        let out = ws.run(&["execute", "start", "--plan", plan(ws, 3).to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let _server = Server::start_env(&relayed_ws.data(), &[], &[]);
    assert!(relayed_ws.data().join("cli.sock").exists(), "the server listens on <data>/cli.sock");
    let calls: Vec<Vec<&str>> = vec![
        vec!["execute", "next", "--task-id", "relay"],
        vec!["execute", "dispatched", "--task-id", "relay", "--step-id", "1.1", "--agent", "worker"],
        vec!["execute", "record", "--task-id", "relay", "--step-id", "1.1", "--agent", "worker", "--outcome", "done"],
        // A client's mistake: exit 2 and the same message.
        vec!["execute", "record", "--task-id", "relay", "--step-id", "9.9", "--agent", "worker"],
        vec!["--json", "execute", "record", "--task-id", "relay", "--step-id", "9.9", "--agent", "worker"],
        vec!["--json", "execute", "next", "--task-id", "relay"],
        vec!["execute", "status", "--task-id", "relay"],
    ];
    for args in &calls {
        let (served, relayed) = call(&relayed_ws, args, &[]);
        assert!(relayed, "{args:?} was not run by the server: {}", String::from_utf8_lossy(&served.stderr));
        let (alone, relayed) = call(&local_ws, args, &[]);
        assert!(!relayed, "no server serves the second data dir");
        assert_eq!(served.status.code(), alone.status.code(), "{args:?}");
        assert_eq!(text(&served.stdout), text(&alone.stdout), "{args:?}");
        assert_eq!(text(&served.stderr), text(&alone.stderr), "{args:?}");
    }
    // The journal the server wrote is whole.
    let verify = relayed_ws.run(&["audit", "verify", "relay"]);
    assert!(verify.status.success(), "{}", text(&verify.stdout));
}

#[test]
fn a_call_whose_environment_differs_from_the_servers_runs_in_its_own_process() {
    let ws = Workspace::with_repo(&[("a.txt", "a\n")]);
    assert!(ws.run(&["execute", "start", "--plan", plan(&ws, 2).to_str().unwrap()]).status.success());
    let _server = Server::start_env(&ws.data(), &[], &[]);
    let next = ["execute", "next", "--task-id", "relay"];
    let (_, relayed) = call(&ws, &next, &[]);
    assert!(relayed);
    // A BATON_* variable the server does not have (it could change what the command does).
    let (out, relayed) = call(&ws, &next, &[("BATON_RUN_BUDGET_USD", "5")]);
    assert!(!relayed, "a different environment is declined");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (out, relayed) = call(&ws, &next, &[("BATON_RELAY", "0")]);
    assert!(!relayed && out.status.success(), "BATON_RELAY=0 turns the relay off");
}

#[test]
fn a_socket_left_by_a_killed_server_is_ignored_and_the_next_server_replaces_it() {
    let ws = Workspace::with_repo(&[("a.txt", "a\n")]);
    assert!(ws.run(&["execute", "start", "--plan", plan(&ws, 2).to_str().unwrap()]).status.success());
    let mut server = Server::start_env(&ws.data(), &[], &[]);
    server.kill9();
    assert!(ws.data().join("cli.sock").exists(), "kill -9 leaves the socket behind");
    let (out, relayed) = call(&ws, &["execute", "next", "--task-id", "relay"], &[]);
    assert!(!relayed && out.status.success(), "{}", text(&out.stderr));
    let _again = Server::start_env(&ws.data(), &[], &[]);
    let (out, relayed) = call(&ws, &["execute", "next", "--task-id", "relay"], &[]);
    assert!(relayed && out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn the_servers_cached_state_follows_events_another_process_journaled() {
    let ws = Workspace::with_repo(&[("a.txt", "a\n")]);
    assert!(ws.run(&["execute", "start", "--plan", plan(&ws, 3).to_str().unwrap()]).status.success());
    let _server = Server::start_env(&ws.data(), &[], &[]);
    // The server loads (and caches) the execution…
    assert!(call(&ws, &["execute", "status", "--task-id", "relay"], &[]).1);
    // …then a process of its own records step 1.1…
    let local = [("BATON_RELAY", "0")];
    for args in [
        ["execute", "dispatched", "--task-id", "relay", "--step-id", "1.1", "--agent", "worker"],
        ["execute", "record", "--task-id", "relay", "--step-id", "1.1", "--agent", "worker"],
    ] {
        let (out, relayed) = call(&ws, &args, &local);
        assert!(!relayed && out.status.success(), "{}", text(&out.stderr));
    }
    // …and the server's next answer has it.
    let (out, relayed) = call(&ws, &["--json", "execute", "next", "--task-id", "relay"], &[]);
    assert!(relayed);
    let action: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(action["step_id"], "1.2", "{action}");
}

#[test]
fn a_malformed_request_on_the_socket_is_declined_and_the_server_goes_on() {
    use std::io::{Read as _, Write as _};
    let ws = Workspace::with_repo(&[("a.txt", "a\n")]);
    assert!(ws.run(&["execute", "start", "--plan", plan(&ws, 2).to_str().unwrap()]).status.success());
    let _server = Server::start_env(&ws.data(), &[], &[]);
    for junk in [&b"not json"[..], br#"{"argv": ["baton", "execute", "start", "--plan", "/etc/passwd"]}"#, b""] {
        let mut s = std::os::unix::net::UnixStream::connect(ws.data().join("cli.sock")).unwrap();
        s.write_all(junk).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        assert!(reply.contains("Declined"), "{junk:?} → {reply}");
    }
    let (out, relayed) = call(&ws, &["execute", "next", "--task-id", "relay"], &[]);
    assert!(relayed && out.status.success(), "{}", text(&out.stderr));
}
