//! End-to-end browser tests: a real headless Chromium, driven over WebDriver (chromedriver)
//! through the board that `baton serve --demo` serves.
//!
//! Every test starts its own server (fresh data dir, port 0), its own chromedriver (a free
//! port) and its own browser profile; all are stopped when the harness drops. The tests need
//! `/usr/bin/chromium` and `/usr/bin/chromedriver` and fail (never skip) without them. Waits
//! poll with a bound and fail with the page's URL and text and the server's log. nextest runs
//! them one at a time (`.config/nextest.toml`, test group `browser`).

use std::collections::VecDeque;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use baton::clock::Stopwatch;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The demo's specs (`baton serve --demo`), by id.
const DEMO_TITLES: [&str; 3] = [
    "Add a farewell message to the greeting service",
    "Fix the greeting when the name is empty",
    "Document the greeting service",
];

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A child process in its own process group: the whole group is killed on drop (chromedriver
/// takes its Chromium processes with it).
struct Group {
    child: Child,
}

impl Group {
    fn spawn(mut cmd: Command, name: &'static str) -> Group {
        cmd.process_group(0);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Group { child }
    }

    fn pgid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap())
    }

    /// SIGTERM to the group, a bounded wait, then SIGKILL to the group.
    fn stop(&mut self, grace: Duration) {
        use nix::sys::signal::{killpg, Signal};
        if let Ok(None) = self.child.try_wait() {
            let _ = killpg(self.pgid(), Signal::SIGTERM);
            let clock = Stopwatch::start();
            while clock.elapsed() < grace {
                if !matches!(self.child.try_wait(), Ok(None)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // Also whatever the leader left behind in its group.
        let _ = killpg(self.pgid(), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.stop(secs(5));
    }
}

/// The last lines a process wrote, kept for failure messages.
#[derive(Clone, Default)]
struct LogTail(Arc<Mutex<VecDeque<String>>>);

impl LogTail {
    const LINES: usize = 60;

    fn push(&self, line: String) {
        let mut lines = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if lines.len() == Self::LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    fn text(&self) -> String {
        let lines = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        lines.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

/// `baton --data-dir <tmp>/data serve --demo --bind 127.0.0.1:0`.
struct Server {
    // Dropped first: the process stops before its data dir is removed.
    _process: Group,
    log: LogTail,
    addr: SocketAddr,
    _tmp: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        Server::start_in(tempfile::tempdir().unwrap(), &["--demo"])
    }

    /// `baton --data-dir <tmp>/data serve <args> --bind 127.0.0.1:0` over what `tmp` holds.
    fn start_in(tmp: tempfile::TempDir, args: &[&str]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_baton"));
        cmd.arg("--data-dir")
            .arg(tmp.path().join("data"))
            .arg("serve")
            .args(args)
            .args(["--bind", "127.0.0.1:0"])
            .env_remove("BATON_TASK_ID")
            .env_remove("BATON_CRASH_AT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut process = Group::spawn(cmd, "baton serve");
        let stderr = process.child.stderr.take().unwrap();
        let log = LogTail::default();
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread_log = log.clone();
        // Drains stderr for the server's lifetime (a full pipe would block it).
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("baton serving http://") {
                    let addr = rest.split('/').next().unwrap_or_default().to_string();
                    let _ = ready_tx.send(addr);
                }
                thread_log.push(line);
            }
        });
        let addr = match ready_rx.recv_timeout(secs(60)) {
            Ok(addr) => addr.parse().unwrap_or_else(|e| panic!("baton printed address {addr:?}: {e}")),
            Err(_) => {
                let status = process.child.try_wait();
                panic!(
                    "baton serve did not print `baton serving http://…` within 60 s (exit status {status:?}):\n{}",
                    log.text()
                )
            }
        };
        let server = Server { _process: process, log, addr, _tmp: tmp };
        let (status, body) = server.http("GET", "/healthz");
        assert_eq!(status, 200, "/healthz: {body}\n{}", server.log.text());
        server
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// A plain HTTP/1.1 request without cookies (the REST API): (status, body).
    fn http(&self, method: &str, path: &str) -> (u16, String) {
        http(self.addr, method, path).unwrap_or_else(|e| panic!("{method} {path}: {e}\n{}", self.log.text()))
    }

    fn json(&self, method: &str, path: &str) -> Value {
        let (status, body) = self.http(method, path);
        assert!((200..300).contains(&status), "{method} {path}: {status} {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{method} {path}: {e}: {body}"))
    }
}

/// A plain HTTP/1.1 request with an empty body, without cookies: (status, body). The answer
/// must have a `Content-Length` (not be chunked); every read and write is bounded.
fn http(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let stream = TcpStream::connect_timeout(&addr, secs(10))?;
    stream.set_read_timeout(Some(secs(30)))?;
    stream.set_write_timeout(Some(secs(10)))?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\nContent-Length: 0\r\n\
         Connection: close\r\n\r\n"
    );
    (&stream).write_all(request.as_bytes())?;
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line)?;
    let status = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut length = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse::<usize>().ok();
        }
        if lower.starts_with("transfer-encoding:") {
            return Err(std::io::Error::other(format!("{method} {path}: a {} answer is not read here", line.trim())));
        }
    }
    let mut body = Vec::new();
    match length {
        Some(n) => {
            body.resize(n, 0);
            reader.read_exact(&mut body)?;
        }
        None => {
            reader.read_to_end(&mut body)?;
        }
    }
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// A port nobody listens on right now (chromedriver cannot be asked for port 0).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `chromedriver --port=<free>`, retried on another port if it cannot listen.
struct Driver {
    process: Group,
    port: u16,
}

impl Driver {
    fn start(log_dir: &Path) -> Driver {
        let mut last = String::new();
        for _ in 0..3 {
            let port = free_port();
            let log_path = log_dir.join(format!("chromedriver-{port}.log"));
            let mut cmd = Command::new(CHROMEDRIVER);
            cmd.arg(format!("--port={port}"))
                .arg(format!("--log-path={}", log_path.display()))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let mut process = Group::spawn(cmd, "chromedriver");
            let clock = Stopwatch::start();
            loop {
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Driver { process, port };
                }
                if !matches!(process.child.try_wait(), Ok(None)) || clock.elapsed() > secs(30) {
                    last = std::fs::read_to_string(&log_path).unwrap_or_default();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("chromedriver did not start listening (3 tries); its log:\n{last}");
    }
}

/// Fails (never skips) when Chromium or chromedriver is missing.
fn require_browser() {
    for (path, what) in [(CHROMIUM, "Chromium"), (CHROMEDRIVER, "chromedriver")] {
        assert!(
            Path::new(path).exists(),
            "the browser tests need {what} at {path}, which is missing: install them with \
             `scripts/test`, or `apt-get install chromium chromium-driver` (Debian)"
        );
    }
}

/// How a wait re-reads the page.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reload {
    /// Reload the page between looks (server-side progress, not relying on live updates).
    Yes,
    /// Only look again (the page must change by itself, or already has).
    No,
}

/// A server, a chromedriver and a WebDriver session on a fresh profile.
struct Harness {
    // After `Drop::drop` ends the session, fields drop in this order: chromedriver, the
    // server, the profile.
    client: Option<Client>,
    session_id: String,
    driver: Driver,
    server: Server,
    _profile: tempfile::TempDir,
}

impl Harness {
    async fn start() -> Harness {
        Harness::start_on(Server::start()).await
    }

    /// A harness over `server`.
    async fn start_on(server: Server) -> Harness {
        require_browser();
        let profile = tempfile::tempdir().unwrap();
        let driver = Driver::start(profile.path());
        let user_data = profile.path().join("chromium-profile");
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update", "--no-first-run",
                    "--disable-sync", "--disable-quic", "--window-size=1400,1000",
                    format!("--user-data-dir={}", user_data.display()),
                ],
            },
            // Leave alerts open so a test can see them (the default dismisses them silently).
            "unhandledPromptBehavior": "ignore",
            "timeouts": {"pageLoad": 30_000, "script": 10_000, "implicit": 0},
        });
        let Value::Object(caps) = caps else { unreachable!() };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let webdriver = format!("http://127.0.0.1:{}", driver.port);
        let mut last = None;
        let mut client = None;
        // Starting a browser can fail transiently (chromedriver just started): a few tries.
        for _ in 0..3 {
            match ClientBuilder::new(connector.clone()).capabilities(caps.clone()).connect(&webdriver).await {
                Ok(c) => {
                    client = Some(c);
                    break;
                }
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let Some(client) = client else {
            panic!("no WebDriver session from chromedriver with {CHROMIUM}: {last:?}");
        };
        let session_id = client.session_id().await.ok().flatten().unwrap_or_default();
        Harness { client: Some(client), session_id, driver, server, _profile: profile }
    }

    fn c(&self) -> &Client {
        self.client.as_ref().unwrap()
    }

    /// Ends the session cleanly (the drop kills whatever is left either way).
    async fn finish(mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.close().await;
        }
        self.driver.process.stop(secs(5));
    }

    async fn goto(&self, path: &str) {
        let url = self.server.url(path);
        self.c().goto(&url).await.unwrap_or_else(|e| panic!("goto {url}: {e}"));
    }

    /// Runs `script` (arguments in `arguments`) in the page.
    async fn js(&self, script: &str, args: Vec<Value>) -> Result<Value, String> {
        self.c().execute(script, args).await.map_err(|e| e.to_string())
    }

    /// The rendered text (`innerText`) of the first element matching `css`, read at once.
    async fn text(&self, css: &str) -> Option<String> {
        let v = self
            .js(
                "const e = document.querySelector(arguments[0]); return e === null ? null : e.innerText;",
                vec![json!(css)],
            )
            .await
            .ok()?;
        v.as_str().map(str::to_string)
    }

    /// The texts of every element matching `css`.
    async fn texts(&self, css: &str) -> Vec<String> {
        let v = self
            .js("return Array.from(document.querySelectorAll(arguments[0])).map(e => e.innerText);", vec![json!(css)])
            .await
            .unwrap_or_default();
        v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect()).unwrap_or_default()
    }

    async fn count(&self, css: &str) -> u64 {
        self.js("return document.querySelectorAll(arguments[0]).length;", vec![json!(css)])
            .await
            .ok()
            .and_then(|v| v.as_u64())
            .unwrap_or(0)
    }

    async fn exists(&self, css: &str) -> bool {
        self.count(css).await > 0
    }

    async fn attr(&self, css: &str, name: &str) -> Option<String> {
        let v = self
            .js(
                "const e = document.querySelector(arguments[0]); return e === null ? null : e.getAttribute(arguments[1]);",
                vec![json!(css), json!(name)],
            )
            .await
            .ok()?;
        v.as_str().map(str::to_string)
    }

    /// The page's URL, its text and the server's log: what a failure message shows.
    async fn describe(&self) -> String {
        let url = self.c().current_url().await.map(|u| u.to_string()).unwrap_or_else(|e| format!("(no url: {e})"));
        let mut body = self.text("body").await.unwrap_or_else(|| "(no body)".into());
        if body.len() > 4000 {
            let mut cut = 4000;
            while !body.is_char_boundary(cut) {
                cut -= 1;
            }
            body.truncate(cut);
            body.push_str("\n…");
        }
        format!("page {url}:\n{body}\n--- server log (tail) ---\n{}", self.server.log.text())
    }

    /// Polls `probe` every 250 ms (reloading first when `reload` is [`Reload::Yes`]) until it
    /// gives a value, fails, or `timeout` passes; fails with the page and the server's log.
    async fn wait_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        reload: Reload,
        mut probe: impl AsyncFnMut(&Harness) -> Result<Option<T>, String>,
    ) -> T {
        let start = Stopwatch::start();
        let mut first = true;
        loop {
            if reload == Reload::Yes && !first {
                // A failed reload (e.g. racing a live update's navigation) is retried next time.
                let _ = self.c().refresh().await;
            }
            first = false;
            match probe(self).await {
                Ok(Some(v)) => return v,
                Ok(None) => {}
                Err(why) => panic!("while waiting for {what}: {why}\n{}", self.describe().await),
            }
            if start.elapsed() > timeout {
                panic!("timed out after {timeout:?} waiting for {what}\n{}", self.describe().await);
            }
            let pause = if reload == Reload::Yes { 1000 } else { 250 };
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }

    /// Waits until `css` has the text `want`.
    async fn wait_text(&self, css: &str, want: &str, timeout: Duration, reload: Reload) {
        let what = format!("{css} to read {want:?}");
        self.wait_until(&what, timeout, reload, async |h| Ok(h.text(css).await.filter(|t| t == want).map(|_| ())))
            .await;
    }

    /// Clicks the element matching `css`, looking again when a live update replaced it.
    async fn click(&self, css: &str) {
        let clock = Stopwatch::start();
        loop {
            let result = match self.c().find(Locator::Css(css)).await {
                Ok(e) => e.click().await,
                Err(e) => Err(e),
            };
            match result {
                Ok(()) => return,
                Err(e) if clock.elapsed() > secs(10) => {
                    panic!("clicking {css}: {e}\n{}", self.describe().await)
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Focuses the field matching `css` and types `text` into it.
    async fn type_into(&self, css: &str, text: &str) {
        let clock = Stopwatch::start();
        loop {
            let result = async {
                let e = self.c().find(Locator::Css(css)).await?;
                e.click().await?;
                e.clear().await?;
                e.send_keys(text).await
            }
            .await;
            match result {
                Ok(()) => return,
                Err(e) if clock.elapsed() > secs(10) => {
                    panic!("typing into {css}: {e}\n{}", self.describe().await)
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    async fn path(&self) -> String {
        self.c().current_url().await.map(|u| u.path().to_string()).unwrap_or_default()
    }

    /// Fails when a JavaScript dialog (alert, confirm, prompt) is open.
    async fn assert_no_dialog(&self) {
        if let Ok(text) = self.c().get_alert_text().await {
            panic!("a JavaScript dialog is open saying {text:?}: the page ran injected script");
        }
    }
}

impl Drop for Harness {
    /// A test that failed did not [`finish`](Harness::finish): end its session with a plain
    /// request (the async client's runtime is going away), so chromedriver stops Chromium
    /// before it is killed itself.
    fn drop(&mut self) {
        if self.client.take().is_some() && !self.session_id.is_empty() {
            let addr = SocketAddr::from(([127, 0, 0, 1], self.driver.port));
            let _ = http(addr, "DELETE", &format!("/session/{}", self.session_id));
        }
    }
}

/// The execution status shown on an execution page; fails when it is final but not complete.
async fn exec_status(h: &Harness) -> Result<Option<String>, String> {
    match h.text("#exec-status").await {
        Some(s) if s == "failed" || s == "cancelled" => Err(format!("the execution is {s}")),
        other => Ok(other),
    }
}

#[tokio::test]
async fn board_to_changelist_flow() {
    let h = Harness::start().await;

    // The board shows the three demo specs.
    h.goto("/").await;
    for (i, title) in DEMO_TITLES.iter().enumerate() {
        let css = format!("#spec-{} a.title", i + 1);
        h.wait_text(&css, title, secs(10), Reload::No).await;
    }
    assert!(h.exists("#col-queued #spec-1").await, "a draft is queued\n{}", h.describe().await);

    // Spec 1 (a draft): enrich it.
    h.click("#spec-1 a.title").await;
    h.wait_text("#spec-title", DEMO_TITLES[0], secs(10), Reload::No).await;
    assert_eq!(h.path().await, "/specs/1");
    assert_eq!(h.text("#spec-status").await.as_deref(), Some("draft"));
    h.click("button#enrich").await;
    h.wait_text("#spec-status", "enriched", secs(15), Reload::No).await;
    h.wait_until("the forecast and its table", secs(10), Reload::No, async |h| {
        let rows = h
            .js(
                "const f = document.querySelector('#forecast'); \
                 return f === null ? 0 : f.closest('section').querySelectorAll('table tr').length;",
                vec![],
            )
            .await?;
        // A header row and at least one step.
        Ok((rows.as_u64().unwrap_or(0) >= 2).then_some(()))
    })
    .await;
    let forecast = h.text("#forecast").await.unwrap_or_default();
    assert!(forecast.contains('$'), "forecast {forecast:?}");
    // The history names the enrichment as such: action, then from → to.
    let history = h.texts("#spec-events tr").await;
    assert!(
        history.iter().any(|row| row.contains("enrich") && row.contains("draft → enriched")),
        "the history has no `enrich  draft → enriched` row: {history:#?}"
    );

    // Review: approve.
    h.click("#review-form input[name=decision][value=approve]").await;
    h.type_into("#review-form input[name=reason]", "Looks right to me").await;
    h.click("button#review").await;
    h.wait_text("#spec-status", "approved", secs(15), Reload::No).await;

    // Fire: it goes on to the execution it started.
    h.click("button#fire").await;
    h.wait_until("the execution page", secs(15), Reload::No, async |h| {
        Ok(h.exists("#exec-status").await.then_some(()))
    })
    .await;
    let href = h.path().await;
    let task_id = href.strip_prefix("/executions/").unwrap_or_else(|| panic!("fire went to {href:?}")).to_string();
    let spec = h.server.json("GET", "/api/v1/specs/1");
    assert_eq!(spec["task_id"], json!(task_id), "{spec:#}");
    assert!(spec.get("plan_json").is_none() && spec["plan"].is_object(), "one plan in the spec JSON: {spec:#}");

    // Phase 1 (Design) ends in an approval.
    h.wait_until("the approval form of phase 1", secs(60), Reload::Yes, async |h| {
        exec_status(h).await?;
        Ok(h.exists("form#approval-form").await.then_some(()))
    })
    .await;
    let heading = h.text("#approval h2").await.unwrap_or_default();
    assert!(heading.contains("phase 1"), "approval heading {heading:?}");
    let comment = "Design approved from the browser test";
    h.click("form#approval-form input[name=result][value=approve]").await;
    h.type_into("form#approval-form textarea[name=feedback]", comment).await;
    h.click("button#decide").await;

    // Build (with its gate) and Review run; the execution completes.
    h.wait_until("the execution to complete", secs(90), Reload::Yes, async |h| {
        Ok(exec_status(h).await?.filter(|s| s == "complete"))
    })
    .await;
    assert!(!h.exists("form#approval-form").await, "a complete execution asks nothing\n{}", h.describe().await);
    // The decision the form posted, with its comment, is in the journal.
    let journal = h.server.json("GET", &format!("/api/v1/executions/{task_id}/journal"));
    let approvals: Vec<&Value> =
        journal.as_array().unwrap().iter().filter(|e| e["kind"] == "approval_recorded").collect();
    assert_eq!(approvals.len(), 1, "{journal:#}");
    assert_eq!(approvals[0]["payload"]["result"], "approve", "{journal:#}");
    assert_eq!(approvals[0]["payload"]["feedback"], comment, "{journal:#}");
    assert_eq!(approvals[0]["payload"]["actor"], "board", "{journal:#}");

    // The changelist lists the work.
    h.click("a#changelist-link").await;
    h.wait_until("the changelist page", secs(10), Reload::No, async |h| Ok(h.exists("#diff").await.then_some(())))
        .await;
    assert_eq!(h.path().await, format!("/executions/{task_id}/changelist"));
    let files = h.texts("ul#files li code").await;
    assert!(
        files.iter().any(|f| ["docs/", "src/", "tests/"].iter().any(|dir| f.starts_with(dir))),
        "no file under docs/, src/ or tests/ in {files:?}\n{}",
        h.describe().await
    );
    let diff = h.text("pre#diff").await.unwrap_or_default();
    assert!(!diff.trim().is_empty(), "the diff is empty\n{}", h.describe().await);

    // The card waits for the changelist's review.
    h.goto("/").await;
    h.wait_until("spec 1 in the changelist review column", secs(15), Reload::Yes, async |h| {
        Ok(h.exists("#col-changelist_review #spec-1").await.then_some(()))
    })
    .await;
    h.assert_no_dialog().await;
    h.finish().await;
}

#[tokio::test]
async fn hostile_titles_render_as_text() {
    let h = Harness::start().await;
    let hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>";

    h.goto("/specs/new").await;
    h.wait_until("the new-spec form", secs(10), Reload::No, async |h| {
        Ok(h.exists("form#new-spec").await.then_some(()))
    })
    .await;
    h.type_into("form#new-spec input[name=title]", hostile).await;
    h.type_into("form#new-spec textarea[name=body]", "A body with <b>markup</b> & an \"ampersand\".").await;
    h.click("form#new-spec button[type=submit]").await;
    let spec_path = h
        .wait_until("the new spec's page", secs(15), Reload::No, async |h| {
            let path = h.path().await;
            let id = path.strip_prefix("/specs/").filter(|id| id.parse::<u64>().is_ok());
            Ok(id.is_some().then_some(path))
        })
        .await;
    let id = spec_path.trim_start_matches("/specs/").to_string();
    assert!(id.parse::<u64>().unwrap() > 3, "a new spec after the demo's three: {spec_path}");

    // The spec page: the title is text, nothing was injected, no dialog.
    h.assert_no_dialog().await;
    h.wait_until("the spec title", secs(10), Reload::No, async |h| Ok(h.text("#spec-title").await)).await;
    assert_eq!(h.text("#spec-title").await.as_deref(), Some(hostile), "{}", h.describe().await);
    assert_eq!(h.count("img").await, 0, "an <img> was injected\n{}", h.describe().await);
    let scripts =
        h.js("return Array.from(document.scripts).map(s => s.getAttribute('src') || s.text);", vec![]).await.unwrap();
    assert_eq!(scripts, json!(["/static/live.js"]), "only the page's own script runs");
    assert_eq!(
        h.js("return document.querySelector('form[action$=\"/edit\"] input[name=title]').value;", vec![])
            .await
            .unwrap(),
        json!(hostile),
        "the edit form's title attribute holds the exact title"
    );
    assert_eq!(h.text("pre.body").await.as_deref(), Some("A body with <b>markup</b> & an \"ampersand\"."));
    h.assert_no_dialog().await;

    // The board card.
    h.goto("/").await;
    h.assert_no_dialog().await;
    let css = format!("#spec-{id} a.title");
    h.wait_until("the new card", secs(10), Reload::No, async |h| Ok(h.exists(&css).await.then_some(()))).await;
    assert_eq!(h.text(&css).await.as_deref(), Some(hostile), "{}", h.describe().await);
    assert_eq!(h.count("img").await, 0, "an <img> was injected on the board\n{}", h.describe().await);
    h.assert_no_dialog().await;
    h.finish().await;
}

#[tokio::test]
async fn a_form_without_the_csrf_cookie_is_refused() {
    let h = Harness::start().await;

    // The page sets the cookie; its forms carry the same token.
    h.goto("/specs/2").await;
    h.wait_text("#spec-status", "enriched", secs(10), Reload::No).await;
    let cookie = h.c().get_named_cookie("baton_csrf").await;
    assert!(cookie.is_ok(), "the page set no baton_csrf cookie: {cookie:?}");
    let token = h.attr("#review-form input[name=csrf]", "value").await.unwrap_or_default();
    assert_eq!(token.len(), 32, "the form's token {token:?}");

    // Without the cookie the same form is refused, and nothing changes.
    h.c().delete_all_cookies().await.unwrap();
    assert!(h.c().get_all_cookies().await.unwrap().is_empty());
    h.click("#review-form input[name=decision][value=approve]").await;
    h.click("button#review").await;
    h.wait_until("the 403 page", secs(10), Reload::No, async |h| {
        Ok(h.text("section.error h1").await.filter(|t| t.contains("403")).map(|_| ()))
    })
    .await;
    let message = h.text("#error-message").await.unwrap_or_default();
    assert!(message.contains("CSRF"), "the refusal names CSRF: {message:?}");
    assert_eq!(h.path().await, "/specs/2/review");
    let spec = h.server.json("GET", "/api/v1/specs/2");
    assert_eq!(spec["status"], "enriched", "a refused review changed the spec: {spec:#}");

    // The same form with the cookie back (a reload sets a new one) goes through.
    h.goto("/specs/2").await;
    h.wait_text("#spec-status", "enriched", secs(10), Reload::No).await;
    h.click("#review-form input[name=decision][value=approve]").await;
    h.click("button#review").await;
    h.wait_text("#spec-status", "approved", secs(10), Reload::No).await;
    h.finish().await;
}

#[tokio::test]
async fn live_update_moves_a_card_without_reload() {
    let h = Harness::start().await;
    h.goto("/").await;
    h.wait_until("spec 3 queued", secs(10), Reload::No, async |h| {
        Ok(h.exists("#col-queued #spec-3").await.then_some(()))
    })
    .await;
    assert_eq!(h.text("body").await.map(|b| b.contains("Waits for fire")), Some(true));
    // A marker that a navigation or reload would lose.
    h.js("window.batonMarker = 'still here';", vec![]).await.unwrap();
    // live.js subscribes once the page loaded; wait until a subscription of ours is open
    // too, so the change below is not made before the page listens. (Later changes of the
    // running execution would move the card anyway.)
    h.js(
        "return new Promise((ok, fail) => { \
           const s = new EventSource('/api/v1/stream'); \
           s.onopen = () => { s.close(); ok(true); }; \
           setTimeout(() => { s.close(); fail(new Error('the stream did not open')); }, 8000); });",
        vec![],
    )
    .await
    .unwrap();

    // Fire spec 3 over the REST API, outside the browser.
    let (status, body) = h.server.http("POST", "/api/v1/specs/3/fire");
    assert_eq!(status, 200, "{body}");

    h.wait_until("spec 3 to leave the queued column by itself", secs(30), Reload::No, async |h| {
        let moved = h.exists("#spec-3").await && !h.exists("#col-queued #spec-3").await;
        Ok(moved.then_some(()))
    })
    .await;
    let column = h.js("return document.querySelector('#spec-3').closest('section.column').id;", vec![]).await.unwrap();
    assert_ne!(column, json!("col-queued"));
    assert_eq!(
        h.js("return window.batonMarker;", vec![]).await.unwrap(),
        json!("still here"),
        "the page was reloaded or navigated: the card must move by a live update"
    );
    h.finish().await;
}

/// Where the browser tests' screenshots go (CI keeps them as artifacts):
/// `$CARGO_TARGET_DIR/screenshots`, else `target/screenshots`.
fn screenshot_dir() -> std::path::PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("screenshots")
}

impl Harness {
    /// Sets the viewport to `width` × `height` CSS pixels (the window's outer size is
    /// adjusted until the inner width matches, within a few tries).
    async fn viewport(&self, width: u32, height: u32) {
        let mut outer = width;
        for _ in 0..4 {
            self.c().set_window_size(outer, height).await.unwrap();
            let inner = self.js("return window.innerWidth;", vec![]).await.unwrap().as_u64().unwrap_or(0);
            if inner == u64::from(width) {
                return;
            }
            outer = (i64::from(outer) + i64::from(width) - i64::try_from(inner).unwrap_or(0)).max(1) as u32;
        }
        let inner = self.js("return window.innerWidth;", vec![]).await.unwrap();
        panic!("could not make the viewport {width} px wide (it is {inner})");
    }

    /// Fails when the page is wider than the viewport (`scrollWidth > innerWidth`), naming the
    /// widest elements.
    async fn assert_fits(&self, what: &str) {
        let v = self
            .js(
                "const w = window.innerWidth; \
                 const wide = Array.from(document.querySelectorAll('body *')) \
                   .filter(e => e.getBoundingClientRect().right > w + 0.5) \
                   .slice(0, 5).map(e => e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className); \
                 return [document.documentElement.scrollWidth, w, wide];",
                vec![],
            )
            .await
            .unwrap();
        let (scroll, inner) = (v[0].as_u64().unwrap_or(0), v[1].as_u64().unwrap_or(0));
        assert!(scroll <= inner, "{what}: the page is {scroll} px wide in a {inner} px viewport; too wide: {}", v[2]);
    }

    /// Saves a screenshot as `<screenshot_dir>/<name>.png`.
    async fn screenshot(&self, name: &str) {
        let png = self.c().screenshot().await.unwrap_or_else(|e| panic!("screenshot {name}: {e}"));
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// `fetch`es `path` from the page (same origin) with a JSON body; the answer's JSON.
    async fn fetch_json(&self, method: &str, path: &str, body: Value) -> Value {
        self.js(
            "return fetch(arguments[1], {method: arguments[0], headers: {'content-type': 'application/json', \
               'accept': 'application/json'}, body: arguments[2] === null ? undefined : JSON.stringify(arguments[2])}) \
               .then(r => r.json().then(j => ({status: r.status, body: j})));",
            vec![json!(method), json!(path), body],
        )
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// The spend bar's `data-spent` and the done pips of card `spec_id`.
    async fn card_progress(&self, spec_id: u64) -> Option<(u64, u64)> {
        let v = self
            .js(
                "const c = document.getElementById('spec-' + arguments[0]); if (c === null) return null; \
                 const bar = c.querySelector('.bar'); \
                 return [bar === null ? -1 : Number(bar.dataset.spent), c.querySelectorAll('.pips i.done').length];",
                vec![json!(spec_id)],
            )
            .await
            .ok()?;
        let a = v.as_array()?;
        Some((a[0].as_u64()?, a[1].as_u64()?))
    }
}

/// A page at 1280 and at 390 px: nothing overflows sideways; a screenshot of each.
async fn check_widths(h: &Harness, path: &str, name: &str) {
    for (width, height) in [(1280, 900), (390, 844)] {
        h.viewport(width, height).await;
        h.goto(path).await;
        h.wait_until("the page", secs(10), Reload::No, async |h| Ok(h.exists("main#main").await.then_some(()))).await;
        h.assert_fits(&format!("{path} at {width} px")).await;
        h.screenshot(&format!("{name}-{width}")).await;
    }
    h.viewport(1280, 900).await;
}

#[tokio::test]
async fn the_approval_box_shows_what_is_approved_and_pages_fit() {
    let h = Harness::start().await;
    h.goto("/").await;
    h.wait_until("the board", secs(10), Reload::No, async |h| Ok(h.exists("#spec-1").await.then_some(()))).await;

    // Spec 1 with an approval at the end of its last phase (Review), after Build's gate.
    let r = h.fetch_json("POST", "/api/v1/specs/1/enrich", Value::Null).await;
    assert!(r["status"].as_u64().is_some_and(|s| (200..300).contains(&s)), "{r:#}");
    let mut plan = r["body"]["plan"].clone();
    let phases = plan["phases"].as_array_mut().unwrap();
    assert!(phases.len() == 3 && phases[1]["gate"].is_object(), "the demo's plan changed: {plan:#}");
    phases[2]["approval_required"] = json!(true);
    phases[2]["approval_description"] = json!("Review the Review phase's notes.");
    let r = h.fetch_json("PUT", "/api/v1/specs/1/plan", plan).await;
    assert!(r["status"].as_u64().is_some_and(|s| (200..300).contains(&s)), "{r:#}");
    let r = h.fetch_json("POST", "/api/v1/specs/1/review", json!({"decision": "approve", "reason": "ok"})).await;
    assert!(r["status"].as_u64().is_some_and(|s| (200..300).contains(&s)), "{r:#}");
    let r = h.fetch_json("POST", "/api/v1/specs/1/fire", Value::Null).await;
    assert!(r["status"].as_u64().is_some_and(|s| (200..300).contains(&s)), "{r:#}");
    let task_id = r["body"]["task_id"].as_str().unwrap().to_string();

    // The card at the Design approval: a spend bar and one step done.
    h.goto("/").await;
    let before = h
        .wait_until("spec 1 waiting for the Design approval", secs(60), Reload::Yes, async |h| {
            let waiting = h.exists("#col-awaiting_human #spec-1").await;
            Ok(if waiting { h.card_progress(1).await } else { None })
        })
        .await;
    assert_eq!(before.1, 1, "one step done at the Design approval\n{}", h.describe().await);
    let waits = h.text("#spec-1 .waits").await.unwrap_or_default();
    assert!(waits.contains("approval of phase 1") && waits.contains("since"), "{waits:?}");
    assert!(h.exists("#spec-1 .waits time[datetime]").await, "the wait's start is a <time>\n{}", h.describe().await);
    check_widths(&h, "/", "board").await;

    // Approve Design over the API; the card's bar and pips move by themselves (live update).
    h.goto("/").await;
    h.wait_until("the card", secs(10), Reload::No, async |h| Ok(h.card_progress(1).await)).await;
    // A marker that a navigation or reload would lose: the bar must move by the live update.
    h.js("window.batonMarker = 'still here';", vec![]).await.unwrap();
    // As in `live_update_moves_a_card_without_reload`: the change is made once the stream is open.
    h.js(
        "return new Promise((ok, fail) => { const s = new EventSource('/api/v1/stream'); \
           s.onopen = () => { s.close(); ok(true); }; \
           setTimeout(() => { s.close(); fail(new Error('the stream did not open')); }, 8000); });",
        vec![],
    )
    .await
    .unwrap();
    let r = h
        .fetch_json(
            "POST",
            &format!("/api/v1/executions/{task_id}/approve"),
            json!({"phase_id": 1, "result": "approve", "feedback": "Design is fine"}),
        )
        .await;
    assert!(r["status"].as_u64().is_some_and(|s| (200..300).contains(&s)), "{r:#}");
    let after = h
        .wait_until("the card's progress to move without a reload", secs(60), Reload::No, async |h| {
            Ok(h.card_progress(1).await.filter(|p| p.0 > before.0 && p.1 > before.1))
        })
        .await;
    assert!(after.1 >= 2, "{after:?}");
    assert_eq!(
        h.js("return window.batonMarker;", vec![]).await.unwrap(),
        json!("still here"),
        "the page was reloaded or navigated: the spend bar must move by a live update"
    );

    // The Review approval shows the phase's steps, a diff per file and Build's gate output.
    h.goto(&format!("/executions/{task_id}")).await;
    h.wait_until("the approval of phase 3", secs(60), Reload::Yes, async |h| {
        exec_status(h).await?;
        Ok(h.text("#approval h2").await.filter(|t| t.contains("phase 3")))
    })
    .await;
    let step = h.text("#approval .review-step h4").await.unwrap_or_default();
    assert!(step.contains("3.1") && step.contains("code-reviewer"), "{step:?}");
    assert!(h.exists("#approval .agent-summary").await, "the agent's summary\n{}", h.describe().await);
    assert!(h.count("#approval details.file-diff").await >= 1, "a diff per file\n{}", h.describe().await);
    h.click("#approval details.file-diff summary").await;
    let added = h.text("#approval details.file-diff pre.diff .add").await.unwrap_or_default();
    assert!(added.starts_with('+'), "an added line, coloured: {added:?}\n{}", h.describe().await);
    let gate = h.text("#approval details.gate summary").await.unwrap_or_default();
    assert!(gate.contains("Phase 2") && gate.contains("passed"), "{gate:?}");
    h.click("#approval details.gate summary").await;
    let output = h.text("#approval details.gate pre.gate-output").await.unwrap_or_default();
    assert!(!output.trim().is_empty(), "the gate's output\n{}", h.describe().await);
    let decisions = h.text("#approval ul.decisions").await.unwrap_or_default();
    assert!(decisions.contains("approval of phase 1") && decisions.contains("Design is fine"), "{decisions:?}");
    let spend = h.text("#approval .review-spend").await.unwrap_or_default();
    assert!(spend.contains("forecast"), "{spend:?}");
    // Durations are real (the demo agent takes milliseconds: never `0.0 s`).
    let durations = h.texts("table.steps td.duration").await;
    assert!(durations.iter().all(|d| d.ends_with(" ms") || d.ends_with(" s")), "{durations:?}");
    check_widths(&h, &format!("/executions/{task_id}"), "approval").await;

    // The approvals page shows the same, with a decision form.
    h.goto("/approvals").await;
    let css = format!("#waiting-{task_id} details.file-diff");
    h.wait_until("the approval's diff on /approvals", secs(10), Reload::No, async |h| {
        Ok(h.exists(&css).await.then_some(()))
    })
    .await;
    assert!(h.exists(&format!("#waiting-{task_id} form.approvals-form")).await, "{}", h.describe().await);
    check_widths(&h, "/approvals", "approvals").await;
    check_widths(&h, "/specs/1", "spec").await;
    h.assert_no_dialog().await;
    h.finish().await;
}

#[tokio::test]
async fn the_metrics_page_plots_seeded_figures_and_fits() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let data = baton::runtime::config::DataDir::open(&tmp.path().join("data")).unwrap();
        let execs = baton::runtime::executions::Executions::open(data).await.unwrap();
        crate::portfolio::seed(execs.store()).await;
    }
    let h = Harness::start_on(Server::start_in(tmp, &[])).await;
    h.goto("/").await;
    h.click("header nav a[href='/portfolio']").await;
    h.wait_until("the metrics page", secs(10), Reload::No, async |h| {
        Ok(h.text("h1").await.filter(|t| t.contains("Portfolio metrics")))
    })
    .await;
    let path = format!("/portfolio?project=web&{}", crate::portfolio::RANGE);
    h.goto(&path).await;
    h.wait_until("five plots", secs(10), Reload::No, async |h| {
        Ok((h.count(".plot figure svg").await == 5).then_some(()))
    })
    .await;
    // The plots' labels carry the seeded figures.
    for (plot, expected) in [
        ("#plot-flow", "Merged (2)"),
        ("#plot-cycle", "30.0 h"),
        ("#plot-cycle", "6.0 h"),
        ("#plot-forecast", "$1.60"),
        ("#plot-forecast", "$2.00"),
        ("#plot-spend", "beta · opus ($1.25)"),
        ("#plot-spend", "$1.65"),
        ("#plot-gates", "1/3 (33%)"),
    ] {
        let labels = h
            .js(
                "return Array.from(document.querySelectorAll(arguments[0] + ' svg text')).map(t => t.textContent.trim());",
                vec![json!(plot)],
            )
            .await
            .unwrap();
        assert!(
            labels.as_array().unwrap().iter().any(|l| l.as_str() == Some(expected)),
            "{plot} has no label {expected:?}: {labels}"
        );
    }
    // The filter: the other project's figures.
    h.goto(&format!("/portfolio?project=other&{}", crate::portfolio::RANGE)).await;
    h.wait_until("project other", secs(10), Reload::No, async |h| {
        Ok(h.text("#plot-cycle").await.filter(|t| t.contains("2.0 h")))
    })
    .await;
    check_widths(&h, &path, "metrics").await;
    // Every plot in one picture, for a person to look at.
    h.viewport(1280, 3000).await;
    h.goto(&path).await;
    h.screenshot("metrics-all-1280").await;
    h.assert_no_dialog().await;
    h.finish().await;
}
