//! Signals in an agent's outcome besides `GATE_ADDITION:` (see [`super::gate_additions`]):
//! `KNOWLEDGE_GAP: <what is missing>` lines, which go to the next approval's context,
//! `SCOPE_EXPANSION: <work>` lines, each a phase appended at the next phase boundary
//! (bounded), and `## Deviations` sections, kept on the step result (the original lost
//! several of these: seed-spec §5 #18).
//!
//! Pure: the engine applies these to a recorded outcome, so a replay gives the same result.

/// Knowledge gaps per step, at most.
pub const MAX_GAPS: usize = 8;

/// Longest kept gap or deviation, characters.
const MAX_CHARS: usize = 2000;

fn cut(text: &str) -> String {
    text.chars().take(MAX_CHARS).collect()
}

/// The `KNOWLEDGE_GAP:` lines of `outcome` (prefix case-insensitive, after leading spaces):
/// their text trimmed, empty ones and repeats dropped, at most [`MAX_GAPS`], in order.
pub fn knowledge_gaps(outcome: &str) -> Vec<String> {
    prefixed(outcome, "knowledge_gap:", MAX_GAPS)
}

/// Scope expansions per step, at most.
pub const MAX_SCOPE_EXPANSIONS_PER_STEP: usize = 3;

/// The `SCOPE_EXPANSION:` lines of `outcome`, read like [`knowledge_gaps`], at most
/// [`MAX_SCOPE_EXPANSIONS_PER_STEP`].
pub fn scope_expansions(outcome: &str) -> Vec<String> {
    prefixed(outcome, "scope_expansion:", MAX_SCOPE_EXPANSIONS_PER_STEP)
}

/// The texts of the lines of `outcome` starting with `prefix` (lowercase; matched without
/// case after leading spaces), trimmed, non-empty, each once, at most `max`.
fn prefixed(outcome: &str, prefix: &str, max: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in outcome.lines() {
        let line = line.trim_start();
        let Some(head) = line.get(..prefix.len()) else { continue };
        if !head.eq_ignore_ascii_case(prefix) {
            continue;
        }
        let text = cut(line[prefix.len()..].trim());
        if !text.is_empty() && !out.contains(&text) && out.len() < max {
            out.push(text);
        }
    }
    out
}

/// The text of each `## Deviation` / `## Deviations` section of `outcome` (heading
/// case-insensitive), up to the next heading of level one or two, trimmed; empty sections
/// dropped.
pub fn deviations(outcome: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    let heading = |l: &str| {
        let t = l.trim();
        t.starts_with("# ") || t.starts_with("## ") || t == "#" || t == "##"
    };
    for line in outcome.lines() {
        if heading(line) {
            if let Some(lines) = current.take() {
                push_section(&mut out, &lines);
            }
            let title = line.trim().trim_start_matches('#').trim().to_ascii_lowercase();
            if title == "deviation" || title == "deviations" {
                current = Some(Vec::new());
            }
        } else if let Some(lines) = current.as_mut() {
            lines.push(line);
        }
    }
    if let Some(lines) = current {
        push_section(&mut out, &lines);
    }
    out
}

fn push_section(out: &mut Vec<String>, lines: &[&str]) {
    let text = cut(lines.join("\n").trim());
    if !text.is_empty() {
        out.push(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knowledge_gaps_are_read_once_each_in_order() {
        assert!(knowledge_gaps("all good").is_empty());
        let o = "x\nKNOWLEDGE_GAP: the API's rate limits\n  knowledge_gap: which DB?\nKNOWLEDGE_GAP: which DB?\nKNOWLEDGE_GAP:   \n";
        assert_eq!(knowledge_gaps(o), ["the API's rate limits", "which DB?"]);
        let many: String = (0..12).map(|i| format!("KNOWLEDGE_GAP: g{i}\n")).collect();
        assert_eq!(knowledge_gaps(&many).len(), MAX_GAPS);
    }

    #[test]
    fn deviation_sections_are_kept_up_to_the_next_heading() {
        let o = "Did it.\n## Deviations\n- used a ring buffer, not a list\n- skipped docs\n### detail\nmore\n## Next\nignored\n# deviation\nlast one\n";
        assert_eq!(deviations(o), ["- used a ring buffer, not a list\n- skipped docs\n### detail\nmore", "last one"]);
        assert!(deviations("## Deviations\n\n## Other\nx").is_empty());
        assert!(deviations("no sections").is_empty());
    }
}
