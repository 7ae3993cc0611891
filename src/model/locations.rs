//! Where each step of a plan is: step id → (phase index, step index), the step-location part
//! of `state::StepIndex`. Every load of an execution builds it for every step of the plan
//! (issue 14.8), so it holds positions only and copies no id: a lookup hashes the id asked
//! for (foldhash) and compares it with the plan's own step id at each candidate position.
//! Never does IO; knows nothing of an execution's state, only of the plan it is given.

use std::hash::BuildHasher as _;

use crate::model::plan::MachinePlan;

/// Step id → (phase index, step index) in a plan. Of two steps with the same id, the one
/// inserted last is found, as with a map's insert. Positions are the plan's as indexed: after
/// the plan changes, `ExecutionState::reindex` (or [`Locations::insert`] for an appended step)
/// keeps them right; a lookup never reads outside the plan it is given.
#[derive(Debug, Clone, Default)]
pub(crate) struct Locations {
    table: hashbrown::HashTable<(usize, usize)>,
    hasher: hashbrown::DefaultHashBuilder,
}

impl Locations {
    /// An empty index with room for `steps` steps.
    pub(crate) fn with_capacity(steps: usize) -> Locations {
        Locations { table: hashbrown::HashTable::with_capacity(steps), hasher: Default::default() }
    }

    /// Whether nothing is indexed.
    pub(crate) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Where the step `step_id` is in `plan`, if indexed.
    pub(crate) fn get(&self, plan: &MachinePlan, step_id: &str) -> Option<(usize, usize)> {
        let hash = self.hasher.hash_one(step_id);
        self.table.find(hash, |&(pi, si)| id_at(plan, pi, si) == Some(step_id)).copied()
    }

    /// Indexes the step at `(pi, si)` of `plan` under its id, replacing the position of an
    /// earlier step with that id. A position outside the plan is ignored.
    pub(crate) fn insert(&mut self, plan: &MachinePlan, pi: usize, si: usize) {
        let Some(step_id) = id_at(plan, pi, si) else { return };
        let Locations { table, hasher } = self;
        let hash = hasher.hash_one(step_id);
        match table.find_mut(hash, |&(p, s)| id_at(plan, p, s) == Some(step_id)) {
            Some(found) => *found = (pi, si),
            None => {
                table.insert_unique(hash, (pi, si), |&(p, s)| hasher.hash_one(id_at(plan, p, s).unwrap_or_default()));
            }
        }
    }
}

/// The id of the step at `(pi, si)` of `plan`, if there is one.
fn id_at(plan: &MachinePlan, pi: usize, si: usize) -> Option<&str> {
    Some(plan.phases.get(pi)?.steps.get(si)?.step_id.as_str())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::model::plan::{PlanPhase, PlanStep};
    use proptest::prelude::*;

    /// A plan of `phases`, each a list of step ids (repeats allowed).
    fn plan_of(phases: &[Vec<String>]) -> MachinePlan {
        let mut plan = MachinePlan::from_json(r#"{"task_id":"t-1","task_summary":"index"}"#).expect("a plan");
        for (i, ids) in phases.iter().enumerate() {
            let mut phase = PlanPhase::new(i as i64 + 1, "P");
            phase.steps = ids.iter().map(|id| Box::new(PlanStep::new(id.clone(), "dev", "work"))).collect();
            plan.phases.push(phase);
        }
        plan
    }

    /// Every step of `plan` indexed in plan order, as `ExecutionState::reindex` does.
    fn indexed(plan: &MachinePlan) -> Locations {
        let mut locations = Locations::with_capacity(plan.step_count());
        for (pi, phase) in plan.phases.iter().enumerate() {
            for si in 0..phase.steps.len() {
                locations.insert(plan, pi, si);
            }
        }
        locations
    }

    proptest! {
        /// The index finds what a map from each id to its position, filled in plan order
        /// (so the last of repeated ids stands), finds; and nothing for an id not in the plan.
        #[test]
        fn it_finds_what_a_map_of_ids_filled_in_plan_order_finds(
            phases in prop::collection::vec(prop::collection::vec("[a-c]{1,2}", 0..6), 0..4),
            probe in "[a-d]{1,2}",
        ) {
            let plan = plan_of(&phases);
            let locations = indexed(&plan);
            let mut expected = HashMap::new();
            for (pi, ids) in phases.iter().enumerate() {
                for (si, id) in ids.iter().enumerate() {
                    expected.insert(id.clone(), (pi, si));
                }
            }
            for id in expected.keys() {
                prop_assert_eq!(locations.get(&plan, id), expected.get(id).copied());
            }
            prop_assert_eq!(locations.get(&plan, &probe), expected.get(&probe).copied());
            prop_assert_eq!(locations.is_empty(), expected.is_empty());
        }
    }

    #[test]
    fn a_step_appended_after_indexing_is_found_and_a_position_outside_the_plan_is_ignored() {
        let mut plan = plan_of(&[vec!["1.1".into(), "1.2".into()]]);
        let mut locations = indexed(&plan);
        plan.phases[0].steps.push(Box::new(PlanStep::new("1.3", "dev", "more")));
        locations.insert(&plan, 0, 2);
        assert_eq!(locations.get(&plan, "1.3"), Some((0, 2)));
        locations.insert(&plan, 0, 9);
        locations.insert(&plan, 4, 0);
        assert_eq!(locations.get(&plan, "1.2"), Some((0, 1)));
        assert_eq!(locations.get(&plan, "1.9"), None);
    }
}
