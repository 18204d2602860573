//! `kv-server` binary. Not built yet: the server is the subject of the
//! kv-server issue.

fn main() {
    eprintln!("kv-server: not built yet (see the project's open issues)");
    std::process::exit(2);
}
