//! The imperative shell: drivers that carry out actions, agent launches, gates and recovery.

pub mod agent;
