//! A forge item as Baton sees it ([`ForgeItem`], [`ItemMeta`]) and the text helper imports
//! need ([`html_to_text`]: Azure DevOps HTML as readable text). Pure data and text; no IO.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A forge item as a spec: where it lives, its text, and what else the forge says of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForgeItem {
    /// `github` or `ado`.
    pub source: String,
    /// Its web address (the spec's `source_url`; one spec per address).
    pub url: String,
    /// Its title.
    pub title: String,
    /// Its description, as markdown or plain text.
    pub body: String,
    /// Labels, author, type, state and its reference.
    pub meta: ItemMeta,
}

/// What else a forge says of an item (stored as the spec's `source_meta` JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemMeta {
    /// `github:OWNER/REPO#N` or `ado:ORG/PROJECT#ID`: where report-back comments go.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub item_ref: String,
    /// GitHub labels, or Azure DevOps tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// Who opened it (GitHub login, Azure DevOps display name).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub author: String,
    /// `issue`, or the work item type (`User Story`, `Bug`, …).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub item_type: String,
    /// `open` / `closed`, or the work item state (`New`, `Active`, …).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
}

fn text<'v>(v: &'v Value, pointer: &str) -> &'v str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

/// The fields that make a work item's spec text.
pub const ADO_TEXT_FIELDS: [&str; 3] =
    ["System.Title", "System.Description", "Microsoft.VSTS.Common.AcceptanceCriteria"];

impl ForgeItem {
    /// A GitHub issue (the REST `issue` object, or a webhook's `issue`) of repository
    /// `full_name` (`OWNER/REPO`): `html_url`, `title`, `body` (markdown; `null` is empty),
    /// label names, `user.login`, `state`. Missing fields are empty; the caller checks `url`.
    pub fn from_github_issue(issue: &Value, full_name: &str) -> ForgeItem {
        let number = issue.get("number").and_then(Value::as_u64).unwrap_or_default();
        ForgeItem {
            source: "github".into(),
            url: text(issue, "/html_url").into(),
            title: text(issue, "/title").into(),
            body: text(issue, "/body").into(),
            meta: ItemMeta {
                item_ref: if full_name.is_empty() { String::new() } else { format!("github:{full_name}#{number}") },
                labels: issue
                    .get("labels")
                    .and_then(Value::as_array)
                    .map(|ls| {
                        ls.iter().filter_map(|l| l.get("name").and_then(Value::as_str)).map(str::to_string).collect()
                    })
                    .unwrap_or_default(),
                author: text(issue, "/user/login").into(),
                item_type: "issue".into(),
                state: text(issue, "/state").into(),
            },
        }
    }

    /// An Azure DevOps work item from its `fields` (`System.Title`; `System.Description` and
    /// `Microsoft.VSTS.Common.AcceptanceCriteria` as HTML, converted to text, the criteria under
    /// their own heading; `System.WorkItemType`, `System.State`, `System.Tags` split on `;`,
    /// `System.CreatedBy.displayName`), living at `url`, referenced as `item_ref`.
    pub fn from_ado_fields(fields: &Value, url: String, item_ref: String) -> ForgeItem {
        let description = html_to_text(text(fields, "/System.Description"));
        let criteria = html_to_text(text(fields, "/Microsoft.VSTS.Common.AcceptanceCriteria"));
        let mut body = description;
        if !criteria.is_empty() {
            if !body.is_empty() {
                body.push_str("\n\n");
            }
            body.push_str("## Acceptance criteria\n\n");
            body.push_str(&criteria);
        }
        let author = fields
            .get("System.CreatedBy")
            .and_then(|v| v.get("displayName").and_then(Value::as_str).or_else(|| v.as_str()))
            .unwrap_or_default();
        ForgeItem {
            source: "ado".into(),
            url,
            title: text(fields, "/System.Title").into(),
            body,
            meta: ItemMeta {
                item_ref,
                labels: text(fields, "/System.Tags")
                    .split(';')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_string)
                    .collect(),
                author: author.into(),
                item_type: text(fields, "/System.WorkItemType").into(),
                state: text(fields, "/System.State").into(),
            },
        }
    }
}

/// The identity of the forge item at `url` on forge `source` (`github`, `ado`): the key that
/// makes it one spec (the unique `specs.source_key`, migration 0010), the same whichever
/// address of the item a webhook or an import brings.
///
/// - GitHub: `github:<host>/<owner>/<repo>#<number>` from an issue's address
///   (`https://<host>/<owner>/<repo>/issues/<number>`), lowercased (GitHub names ignore
///   case).
/// - Azure DevOps: work item ids are unique in an organization (a server's collection), so
///   `ado:<organization>#<id>` for `dev.azure.com/<org>/…` and `<org>.visualstudio.com/…`
///   addresses, `ado:<host>/<collection>#<id>` for a server's (`https://<host>/<collection>/…`,
///   or `…/tfs/<collection>/…`); the id is read from the web address (`…/_workitems/edit/<id>`)
///   or the API address (`…/_apis/wit/workItems/<id>`, with or without a project), so a
///   webhook's API address and an import's web address give the same key.
/// - Anything else: `<source>:` and the address without its scheme, query, fragment and
///   trailing `/`, lowercased.
///
/// Empty for an empty address (a spec written on the board has no item).
pub fn item_key(source: &str, url: &str) -> String {
    let url = url.trim();
    if url.is_empty() {
        return String::new();
    }
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split(['?', '#']).next().unwrap_or_default().trim_end_matches('/');
    let lower = rest.to_lowercase();
    let mut parts = lower.split('/').filter(|s| !s.is_empty());
    let host = parts.next().unwrap_or_default().to_string();
    let path: Vec<&str> = parts.collect();
    let digits = |s: &str| !s.is_empty() && s.len() <= 12 && s.bytes().all(|b| b.is_ascii_digit());
    match source {
        "github" => {
            if let [owner, repo, "issues", number] = path.as_slice() {
                if digits(number) {
                    return format!("github:{host}/{owner}/{repo}#{number}");
                }
            }
        }
        "ado" => {
            // The id: after `_workitems/edit/`, or `_apis/wit/workitems/`; what comes before
            // `_workitems` / `_apis` is the organization or collection, then maybe a project.
            let found = path.iter().enumerate().find_map(|(i, seg)| match (*seg, path.get(i + 1), path.get(i + 2)) {
                ("_workitems", Some(&"edit"), Some(id)) if digits(id) => Some((i, *id)),
                ("_apis", Some(&"wit"), _) => match (path.get(i + 2), path.get(i + 3)) {
                    (Some(&"workitems"), Some(id)) if digits(id) => Some((i, *id)),
                    _ => None,
                },
                _ => None,
            });
            if let Some((at, id)) = found {
                let before = &path[..at];
                if host == "dev.azure.com" {
                    if let Some(org) = before.first() {
                        return format!("ado:{org}#{id}");
                    }
                } else if let Some(org) = host.strip_suffix(".visualstudio.com") {
                    return format!("ado:{org}#{id}");
                } else {
                    let collection = match before {
                        ["tfs", c, ..] => format!("tfs/{c}"),
                        [c, ..] => (*c).to_string(),
                        [] => String::new(),
                    };
                    return format!("ado:{host}/{collection}#{id}");
                }
            }
        }
        _ => {}
    }
    format!("{source}:{lower}")
}

impl ForgeItem {
    /// The item's identity: [`item_key`] of its source and address.
    pub fn key(&self) -> String {
        item_key(&self.source, &self.url)
    }
}

/// Readable text of an HTML fragment (Azure DevOps descriptions): paragraphs, `div`s and
/// headings become blank-line separated blocks, `br` a line break, `li` a `- ` item; other
/// tags are dropped (the contents of `script` and `style` too); entities are decoded
/// (named: amp, lt, gt, quot, apos, nbsp; numeric: decimal and hex); runs of spaces collapse.
pub fn html_to_text(html: &str) -> String {
    let mut out = String::new();
    let mut rest = html;
    let mut skip_until: Option<&'static str> = None;
    while let Some(lt) = rest.find('<') {
        if skip_until.is_none() {
            push_text(&mut out, &rest[..lt]);
        }
        let after = &rest[lt + 1..];
        let Some(gt) = after.find('>') else {
            if skip_until.is_none() {
                push_text(&mut out, &rest[lt..]);
            }
            rest = "";
            break;
        };
        let tag = after[..gt].trim();
        rest = &after[gt + 1..];
        let closing = tag.starts_with('/');
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        if let Some(end) = skip_until {
            if closing && name == end {
                skip_until = None;
            }
            continue;
        }
        match name.as_str() {
            "script" if !closing => skip_until = Some("script"),
            "style" if !closing => skip_until = Some("style"),
            "br" => newline(&mut out, 1),
            "li" if !closing => {
                newline(&mut out, 1);
                out.push_str("- ");
            }
            "p" | "div" | "ul" | "ol" | "h1" | "h2" | "h3" | "h4" | "h5" | "h6" | "table" | "tr" | "blockquote"
            | "pre" => newline(&mut out, 2),
            "li" => newline(&mut out, 1),
            _ => {}
        }
    }
    if skip_until.is_none() {
        push_text(&mut out, rest);
    }
    let lines: Vec<&str> = out.lines().map(str::trim_end).collect();
    let mut text = String::new();
    let mut blank = 0;
    for line in lines {
        if line.trim().is_empty() {
            blank += 1;
            continue;
        }
        if !text.is_empty() {
            text.push_str(if blank > 0 { "\n\n" } else { "\n" });
        }
        blank = 0;
        text.push_str(line.trim_start());
    }
    text
}

/// Ends the current line, leaving at most `lines - 1` blank lines before the next text.
fn newline(out: &mut String, lines: usize) {
    while out.ends_with(' ') {
        out.pop();
    }
    let have = out.chars().rev().take_while(|c| *c == '\n').count();
    for _ in have..lines {
        out.push('\n');
    }
}

/// Appends decoded text, collapsing whitespace runs to one space.
fn push_text(out: &mut String, raw: &str) {
    let decoded = decode_entities(raw);
    for c in decoded.chars() {
        if c.is_whitespace() && c != '\u{a0}' {
            if !(out.is_empty() || out.ends_with(' ') || out.ends_with('\n')) {
                out.push(' ');
            }
        } else if c == '\u{a0}' {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
}

/// Decodes `&name;` and `&#n;` / `&#xh;` entities; anything else is kept as written.
fn decode_entities(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        let semi = after.find(';').filter(|i| *i <= 10);
        let decoded = semi.and_then(|i| {
            let ent = &after[..i];
            let c = match ent {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" | "#39" => Some('\''),
                "nbsp" => Some('\u{a0}'),
                _ => ent.strip_prefix('#').and_then(|n| {
                    let code = match n.strip_prefix(['x', 'X']) {
                        Some(hex) => u32::from_str_radix(hex, 16).ok(),
                        None => n.parse::<u32>().ok(),
                    };
                    code.and_then(char::from_u32)
                }),
            };
            c.map(|c| (c, i))
        });
        match decoded {
            Some((c, i)) => {
                out.push(c);
                rest = &after[i + 1..];
            }
            None => {
                out.push('&');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn issues_and_work_items_map_to_items() {
        let issue = json!({"number": 7, "html_url": "https://github.com/o/r/issues/7", "title": "T", "body": null,
            "labels": [{"name": "baton"}, {"name": "bug"}], "user": {"login": "octocat"}, "state": "open"});
        let item = ForgeItem::from_github_issue(&issue, "o/r");
        assert_eq!(item.body, "");
        assert_eq!(item.meta.item_ref, "github:o/r#7");
        assert_eq!(item.meta.labels, ["baton", "bug"]);
        assert_eq!(item.meta.author, "octocat");
        let fields = json!({"System.Title": "W", "System.Description": "<p>Do <b>it</b></p>",
            "Microsoft.VSTS.Common.AcceptanceCriteria": "<ul><li>done</li></ul>", "System.Tags": "a; b ;",
            "System.WorkItemType": "Bug", "System.State": "New", "System.CreatedBy": {"displayName": "Ann"}});
        let item = ForgeItem::from_ado_fields(&fields, "u".into(), "ado:o/p#1".into());
        assert_eq!(item.body, "Do it\n\n## Acceptance criteria\n\n- done");
        assert_eq!(item.meta.labels, ["a", "b"]);
        assert_eq!(
            (item.meta.item_type.as_str(), item.meta.state.as_str(), item.meta.author.as_str()),
            ("Bug", "New", "Ann")
        );
    }

    #[test]
    fn an_item_has_one_key_whichever_address_names_it() {
        let gh = "github:github.com/lumen-labs/lantern#7";
        assert_eq!(item_key("github", "https://github.com/lumen-labs/lantern/issues/7"), gh);
        assert_eq!(item_key("github", "https://GitHub.com/Lumen-Labs/Lantern/issues/7/"), gh);
        assert_eq!(item_key("github", "https://github.com/lumen-labs/lantern/issues/7#issuecomment-1"), gh);
        assert_eq!(item_key("github", "https://ghe.example/api/o/r/issues/7"), "github:ghe.example/api/o/r/issues/7");
        assert_ne!(
            item_key("github", "https://github.com/o/r/issues/7"),
            item_key("github", "https://github.com/o/r/issues/8")
        );
        // A webhook's API address and an import's web address of work item 301.
        let ado = "ado:lumenlabs#301";
        for url in [
            "https://dev.azure.com/lumenlabs/_apis/wit/workItems/301",
            "https://dev.azure.com/LumenLabs/6f1c2a3b-4d5e-4f60-8a71-92b3c4d5e6f7/_apis/wit/workItems/301",
            "https://dev.azure.com/lumenlabs/6f1c2a3b-4d5e-4f60-8a71-92b3c4d5e6f7/_workitems/edit/301",
            "https://dev.azure.com/lumenlabs/Lantern/_workitems/edit/301/",
            "https://lumenlabs.visualstudio.com/Lantern/_workitems/edit/301",
        ] {
            assert_eq!(item_key("ado", url), ado, "{url}");
        }
        let server = "ado:devops.lumen.example/lumencollection#88";
        for url in [
            "https://devops.lumen.example/LumenCollection/_apis/wit/workItems/88",
            "https://devops.lumen.example/LumenCollection/Beacon/_workitems/edit/88",
        ] {
            assert_eq!(item_key("ado", url), server, "{url}");
        }
        assert_eq!(item_key("ado", "http://tfs.example/tfs/Main/P/_workitems/edit/5"), "ado:tfs.example/tfs/main#5");
        assert_eq!(item_key("ado", "https://elsewhere.example/x"), "ado:elsewhere.example/x");
        assert_eq!(item_key("board", ""), "");
    }

    #[test]
    fn html_becomes_readable_text() {
        let html = "<div>Fix the <b>login</b> page&nbsp;now.</div><p>Steps:</p><ul><li>open &lt;app&gt;</li>\
                    <li>click &quot;Sign in&quot; &amp; wait</li></ul>line one<br>line two<br/>&#233;&#x1F600;\
                    <script>alert(1)</script> end";
        assert_eq!(
            html_to_text(html),
            "Fix the login page now.\n\nSteps:\n\n- open <app>\n- click \"Sign in\" & wait\n\nline one\nline two\né😀 end"
        );
        assert_eq!(html_to_text("plain &unknown; & text"), "plain &unknown; & text");
        assert_eq!(html_to_text(""), "");
        assert_eq!(html_to_text("a < b"), "a < b");
    }
}
