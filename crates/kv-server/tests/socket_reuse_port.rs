//! Goal: `--socket-reuse-port` binds the listeners as etcd 3.5.17 binds
//! them: with the flag, another socket with `SO_REUSEPORT` can bind the
//! member's client and peer ports (a second process taking over a port
//! during an upgrade, say); without it, that bind fails with "address in
//! use".
//!
//! Method: one member of real etcd and one of kv-server, each started
//! with the flag and then without; the test binds a TCP socket with
//! `SO_REUSEPORT` on each port and records whether the kernel let it.

mod common;

use std::path::Path;

/// Whether a socket with `SO_REUSEPORT` may bind 127.0.0.1:`port`.
fn reuse_port_binds(port: u16) -> bool {
    // SAFETY: plain socket calls on a descriptor this function owns and
    // closes; the address structure is fully initialised.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let on: libc::c_int = 1;
        let set = libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEPORT,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        assert_eq!(set, 0, "setsockopt: {}", std::io::Error::last_os_error());
        let address = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        };
        let bound = libc::bind(
            fd,
            (&address as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        let error = std::io::Error::last_os_error();
        libc::close(fd);
        assert!(
            bound == 0 || error.raw_os_error() == Some(libc::EADDRINUSE),
            "bind failed otherwise: {error}"
        );
        bound == 0
    }
}

/// What another `SO_REUSEPORT` socket could bind, with and without the flag.
fn outcomes(binary: &Path, dir: &Path, base: u16) -> Vec<String> {
    let mut seen = Vec::new();
    for (label, flags) in [("with", &["--socket-reuse-port=true"][..]), ("without", &[][..])] {
        let cluster = common::Cluster::start_members(binary, &dir.join(label), base, 1, flags);
        let member = &cluster.members[0];
        seen.push(format!(
            "{label} the flag: client port {}, peer port {}",
            reuse_port_binds(member.client_port),
            reuse_port_binds(member.peer_port)
        ));
    }
    seen
}

#[test]
fn socket_reuse_port_binds_as_etcd_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = outcomes(&common::etcd_tool("ETCD_BIN", "etcd"), &dir.path().join("etcd"), 29979);
    let ours = outcomes(&common::kv_server(), &dir.path().join("kv"), 30079);
    assert_eq!(ours, etcd, "kv-server, then etcd");
    assert_eq!(
        ours,
        [
            "with the flag: client port true, peer port true",
            "without the flag: client port false, peer port false",
        ]
    );
}
