//! Which ports member `i` (0-based) uses. Every member listens for peers
//! one above its client port; a cluster whose peer traffic goes through
//! a proxy (the robustness suite) advertises another port, where the
//! proxy listens.

/// The ports of a cluster's members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// etcd's own local layout, the scripts': clients on 2379, 22379,
    /// 32379 (a decimal prefix of the member's number past the first),
    /// peers one above. At most 9 members.
    Classic,
    /// Clients on `base + 10i`, peers one above; the tests', each test
    /// on a base of its own so that tests run side by side.
    Stride {
        base: u16,
        /// Peers advertise `client + advertise_offset` rather than the
        /// port they listen on (1): the robustness suite's proxy (2).
        advertise_offset: u16,
    },
}

impl Layout {
    /// The tests' layout from `base`.
    pub fn stride(base: u16) -> Layout {
        Layout::Stride {
            base,
            advertise_offset: 1,
        }
    }

    /// Member `i`'s client port.
    pub fn client_port(&self, i: usize) -> u16 {
        match *self {
            Layout::Classic if i == 0 => 2379,
            Layout::Classic => format!("{}2379", i + 1).parse().expect("at most 9 classic members"),
            Layout::Stride { base, .. } => base + 10 * i as u16,
        }
    }

    /// The port member `i` listens on for peers.
    pub fn peer_port(&self, i: usize) -> u16 {
        self.client_port(i) + 1
    }

    /// The peer port member `i` advertises: where the others dial it.
    pub fn advertised_peer_port(&self, i: usize) -> u16 {
        match *self {
            Layout::Classic => self.peer_port(i),
            Layout::Stride { advertise_offset, .. } => self.client_port(i) + advertise_offset,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_and_stride_ports() {
        let classic = Layout::Classic;
        let ports: Vec<(u16, u16)> = (0..3).map(|i| (classic.client_port(i), classic.peer_port(i))).collect();
        assert_eq!(ports, [(2379, 2380), (22379, 22380), (32379, 32380)]);
        let tests = Layout::stride(8379);
        assert_eq!((tests.client_port(2), tests.peer_port(2)), (8399, 8400));
        assert_eq!(tests.advertised_peer_port(2), 8400);
        let proxied = Layout::Stride {
            base: 24379,
            advertise_offset: 2,
        };
        assert_eq!((proxied.peer_port(1), proxied.advertised_peer_port(1)), (24390, 24391));
    }
}
