//! Plan files on the command line: reading a MachinePlan file (errors name the file and the
//! JSON path) and checking it with the engine's validator. It never saves or starts a plan.

use std::path::Path;

use crate::engine;
use crate::model::plan::MachinePlan;
use crate::runtime::BadInput;

/// Reads and parses a plan file; errors name the file and the JSON path.
pub fn read_plan(path: &Path) -> anyhow::Result<MachinePlan> {
    let text =
        std::fs::read_to_string(path).map_err(|e| BadInput(format!("cannot read plan {}: {e}", path.display())))?;
    let plan = MachinePlan::from_json(&text).map_err(|e| BadInput(format!("{}: {e}", path.display())))?;
    for warning in plan.unknown_keys() {
        errln!("warning: {}: {warning}", path.display());
    }
    Ok(plan)
}

pub(super) fn check_plan(path: &Path, plan: &MachinePlan) -> anyhow::Result<()> {
    if let Err(problems) = engine::validate_new(plan) {
        let lines: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
        return Err(BadInput(format!("{} is not a valid plan:\n{}", path.display(), lines.join("\n"))).into());
    }
    Ok(())
}
