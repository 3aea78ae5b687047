//! The failover chaos suite: a workload of worker processes contending for
//! a few lock names, faults injected under them, a history of everything
//! that happened, and a checker that can fail.

pub mod checker;
pub mod history;
pub mod timeline;

#[cfg(test)]
mod synth;
