//! Multi-version key-value store on sled with etcd's revision semantics.
//!
//! Not built yet: this crate is the subject of the MVCC issue. It exists so
//! the workspace has its final shape from the start.
