//! The spec queue's rules that need no IO: enrichment (a spec's text → plan, risk tier, cost
//! forecast). The lifecycle table itself is plain data in [`crate::model::spec`].
//!
//! This module never does IO and never reads the clock: the runtime's spec service gathers
//! the roster, the test command and the spend history, and passes them in.

pub mod enrich;
pub mod pricing;
