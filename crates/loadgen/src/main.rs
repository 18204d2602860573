//! Load generator for etcd-API endpoints.
//!
//! Not built yet: this crate is the subject of the loadgen issue. It exists
//! so the workspace has its final shape from the start.

fn main() {
    eprintln!("loadgen: not built yet (see the project's open issues)");
    std::process::exit(2);
}
