//! Plan and execution records: plain data shared by every layer.
//!
//! `plan` is agent-baton's `plan.json`; `state` is one execution; `action` is what the engine
//! asks for; `event` is what changes an execution; `snapshot` is the state's compact encoding
//! for the store (`sorted_map` decodes its per-step maps in bulk); `locations` finds a step of a
//! plan by id; `text` holds the small text rules (first line, cutting, shell
//! quoting) every layer shares. This module never does IO, never reads the clock and imports
//! nothing from the crate but itself.

pub mod action;
pub mod budget;
pub mod event;
pub mod goal;
pub mod lazy_result;
pub(crate) mod locations;
pub mod plan;
pub mod snapshot;
pub mod sorted_map;
pub mod spec;
pub mod state;
pub mod step_result;
pub mod text;
