//! The roster: Claude Code subagent definition files (`agents/*.md`, `.claude/agents/*.md`).
//!
//! A definition is Markdown with YAML front matter between two `---` lines (`name`,
//! `description`, `model`, `tools`, `permissionMode`; other keys such as `color` are ignored) and
//! the agent's instructions as the body. Parsing is pure ([`parse_definition`]); [`load_roster`]
//! only reads files. A malformed file is an error naming the file and the problem, never skipped.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use serde::Deserialize;

/// One agent definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentDefinition {
    /// Unique name (front matter `name`), e.g. `backend-engineer--python`.
    pub name: String,
    /// When to use the agent (front matter `description`; empty if absent).
    pub description: String,
    /// Model alias or id (`opus`, `sonnet`, …); `None` if absent or `inherit`.
    pub model: Option<String>,
    /// Tool names from `tools` (a comma-separated string or a YAML list); empty means the CLI's
    /// default tool set.
    pub tools: Vec<String>,
    /// Front matter `permissionMode`, verbatim (e.g. `default`, `auto-edit`, `acceptEdits`).
    pub permission_mode: Option<String>,
    /// The Markdown body: the agent's instructions (leading blank lines and trailing whitespace
    /// removed).
    pub instructions: String,
    /// The file the definition was read from.
    pub source: PathBuf,
}

/// All agent definitions of a repository, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roster {
    agents: BTreeMap<String, AgentDefinition>,
}

impl Roster {
    /// The definition named `name`, if any.
    pub fn get(&self, name: &str) -> Option<&AgentDefinition> {
        self.agents.get(name)
    }

    /// All definitions, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &AgentDefinition> {
        self.agents.values()
    }

    /// Number of definitions.
    pub fn len(&self) -> usize {
        self.agents.len()
    }

    /// True when the roster has no definitions.
    pub fn is_empty(&self) -> bool {
        self.agents.is_empty()
    }
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Tools {
    Csv(String),
    List(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FrontMatter {
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    tools: Option<Tools>,
    #[serde(default)]
    permission_mode: Option<String>,
}

fn is_fence(line: &str) -> bool {
    line.trim_end() == "---"
}

/// Parses one definition file's text; `source` is recorded and used in error messages.
///
/// Errors (messages name `source`) when the front matter is missing or unterminated, is not valid
/// YAML of the expected shape, or lacks a `name`, or the name is not a single word of letters,
/// digits, `-`, `_` or `.`.
pub fn parse_definition(text: &str, source: &Path) -> Result<AgentDefinition> {
    let file = source.display();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    if !lines.next().is_some_and(is_fence) {
        return Err(anyhow!("{file}: missing YAML front matter (the file must start with a `---` line)"));
    }
    let mut yaml = String::new();
    let mut closed = false;
    for line in lines.by_ref() {
        if is_fence(line) {
            closed = true;
            break;
        }
        yaml.push_str(line);
    }
    if !closed {
        return Err(anyhow!("{file}: front matter is not closed by a `---` line"));
    }
    let body: String = lines.collect();
    let front: FrontMatter = serde_norway::from_str(&yaml).map_err(|e| anyhow!("{file}: invalid front matter: {e}"))?;
    let name = front
        .name
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| anyhow!("{file}: front matter has no `name`"))?;
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        return Err(anyhow!("{file}: invalid agent name `{name}` (letters, digits, `-`, `_`, `.` only)"));
    }
    let tools = match front.tools {
        None => Vec::new(),
        Some(Tools::Csv(csv)) => csv.split(',').map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned).collect(),
        Some(Tools::List(list)) => list.into_iter().map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()).collect(),
    };
    let clean = |v: Option<String>| v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty());
    Ok(AgentDefinition {
        name,
        description: front.description.unwrap_or_default().trim().to_owned(),
        model: clean(front.model).filter(|m| m != "inherit"),
        tools,
        permission_mode: clean(front.permission_mode),
        instructions: body.trim_start_matches(['\n', '\r']).trim_end().to_owned(),
        source: source.to_path_buf(),
    })
}

/// The `*.md` files directly in `dir`, sorted; none if `dir` does not exist.
fn markdown_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.with_context(|| format!("reading {}", dir.display()))?.path();
        if path.extension().is_some_and(|ext| ext == "md") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Loads `agents/*.md` and then `.claude/agents/*.md` under `repo_root` (missing folders are fine).
///
/// A definition in `.claude/agents/` replaces one of the same name in `agents/` (Claude Code reads
/// `.claude/agents/`, so it is what the agent would see); two files with the same name in one
/// folder are an error naming both. Errors name the file on unreadable or malformed files.
pub fn load_roster(repo_root: &Path) -> Result<Roster> {
    let mut roster = Roster::default();
    for dir in [repo_root.join("agents"), repo_root.join(".claude/agents")] {
        let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
        for path in markdown_files(&dir)? {
            let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            let def = parse_definition(&text, &path)?;
            if let Some(first) = seen.insert(def.name.clone(), path.clone()) {
                return Err(anyhow!(
                    "{}: agent name `{}` is already defined in {}",
                    path.display(),
                    def.name,
                    first.display()
                ));
            }
            roster.agents.insert(def.name.clone(), def);
        }
    }
    Ok(roster)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::fixtures_dir;
    use super::*;

    #[test]
    fn loads_agent_baton_definitions() {
        let fixtures = fixtures_dir();
        let repo = tempfile::tempdir().unwrap();
        let agents = repo.path().join("agents");
        fs::create_dir_all(&agents).unwrap();
        for path in markdown_files(&fixtures.join("agent-baton/agents")).unwrap() {
            fs::copy(&path, agents.join(path.file_name().unwrap())).unwrap();
        }
        let roster = load_roster(repo.path()).unwrap();
        assert_eq!(roster.len(), 4);
        let names: Vec<&str> = roster.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["architect", "backend-engineer--python", "code-reviewer", "test-engineer"]);
        let arch = roster.get("architect").unwrap();
        assert_eq!(arch.model.as_deref(), Some("opus"));
        assert_eq!(arch.tools, ["Read", "Glob", "Grep"]);
        assert_eq!(arch.permission_mode.as_deref(), Some("default"));
        assert_eq!(
            arch.description,
            "Designs modules, data flow and interfaces before code is written. Use it for decisions that are costly to undo."
        );
        assert!(arch.instructions.starts_with("# Architect\n\nYou design; you do not write production code.\n"));
        assert!(arch.instructions.ends_with("name every file a later step will touch."));
        assert_eq!(arch.source, agents.join("architect.md"));
        let py = roster.get("backend-engineer--python").unwrap();
        assert_eq!(py.permission_mode.as_deref(), Some("acceptEdits"));
        assert_eq!(py.tools, ["Read", "Edit", "Write", "Bash", "Glob", "Grep"]);
        let reviewer = roster.get("code-reviewer").unwrap();
        assert_eq!((reviewer.model.as_deref(), reviewer.permission_mode.as_deref()), (Some("sonnet"), None));
        let tester = roster.get("test-engineer").unwrap();
        assert_eq!(tester.tools, ["Read", "Write", "Edit", "Bash"], "tools as a YAML list");
        assert_eq!(tester.model.as_deref(), Some("haiku"));
    }

    #[test]
    fn tools_as_yaml_list_and_claude_dir_overrides() {
        let repo = tempfile::tempdir().unwrap();
        let agents = repo.path().join("agents");
        let claude = repo.path().join(".claude/agents");
        fs::create_dir_all(&agents).unwrap();
        fs::create_dir_all(&claude).unwrap();
        fs::write(agents.join("rev.md"), "---\nname: rev\ndescription: old\n---\nold body\n").unwrap();
        fs::write(
            claude.join("rev.md"),
            "---\r\nname: rev\r\ndescription: new\r\nmodel: inherit\r\ntools:\r\n  - Read\r\n  - Bash(git diff:*)\r\n---\r\n\r\nNew body.\r\n",
        )
        .unwrap();
        let roster = load_roster(repo.path()).unwrap();
        let rev = roster.get("rev").unwrap();
        assert_eq!(rev.description, "new");
        assert_eq!(rev.model, None);
        assert_eq!(rev.tools, ["Read", "Bash(git diff:*)"]);
        assert_eq!(rev.instructions, "New body.");
        assert_eq!(rev.source, claude.join("rev.md"));
    }

    #[test]
    fn empty_repo_has_empty_roster() {
        let repo = tempfile::tempdir().unwrap();
        assert!(load_roster(repo.path()).unwrap().is_empty());
    }

    #[test]
    fn malformed_files_are_errors_naming_the_file() {
        let p = Path::new("agents/bad.md");
        let cases = [
            ("no front matter\n", "missing YAML front matter"),
            ("---\nname: x\n", "not closed"),
            ("---\nname: [unclosed\n---\n", "invalid front matter"),
            ("---\ndescription: d\n---\nbody\n", "has no `name`"),
            ("---\nname: two words\n---\n", "invalid agent name"),
            ("---\nname: x\ntools: {a: 1}\n---\n", "invalid front matter"),
        ];
        for (text, problem) in cases {
            let err = format!("{:#}", parse_definition(text, p).unwrap_err());
            assert!(err.starts_with("agents/bad.md: "), "{err}");
            assert!(err.contains(problem), "{err} should mention {problem}");
        }
    }

    #[test]
    fn duplicate_names_in_one_folder_are_an_error() {
        let repo = tempfile::tempdir().unwrap();
        let agents = repo.path().join("agents");
        fs::create_dir_all(&agents).unwrap();
        fs::write(agents.join("a.md"), "---\nname: same\n---\n").unwrap();
        fs::write(agents.join("b.md"), "---\nname: same\n---\n").unwrap();
        let err = format!("{:#}", load_roster(repo.path()).unwrap_err());
        assert!(err.contains("b.md") && err.contains("a.md") && err.contains("`same`"), "{err}");
    }

    #[test]
    fn broken_file_in_roster_fails_the_load() {
        let repo = tempfile::tempdir().unwrap();
        let agents = repo.path().join(".claude/agents");
        fs::create_dir_all(&agents).unwrap();
        fs::write(agents.join("x.md"), "# just markdown\n").unwrap();
        let err = format!("{:#}", load_roster(repo.path()).unwrap_err());
        assert!(err.contains("x.md") && err.contains("front matter"), "{err}");
    }
}
