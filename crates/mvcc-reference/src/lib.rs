//! A reference model of etcd's MVCC semantics, written apart from the
//! store so that the two can be compared: the store's property tests
//! (`tests/model.rs`) and the MVCC fuzz target (`crates/fuzzing`) hold
//! `mvcc::Store` to it.
//!
//! # Module map
//! - [`model`]: every change kept as a flat list; every answer worked out
//!   by brute force.
//! - [`etcd_rules`]: etcd 3.5's request checks, transcribed literally.

pub mod etcd_rules;
pub mod model;
