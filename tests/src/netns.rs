//! A network of test hosts on one machine: one network namespace per node
//! (etcd, each broker, the clients), joined pairwise by veth links, on
//! addresses of a private subnet that exists only inside them. Cutting the
//! link between two nodes partitions them and nothing else; the root
//! namespace gets no address and no route.
//!
//! A full mesh of point-to-point links, not a bridge: this machine's kernel
//! has no traffic-control actions or netfilter to drop between two hosts
//! on one bridge, and a link per pair makes any partition — leader from
//! followers, leader from etcd, a minority from the majority — a few `ip
//! link set … down`. Each node's address sits on its loopback as a /32,
//! with a host route to every peer over their link.
//!
//! Needs root (CI runs as root), iproute2 and veth support; without them
//! the constructor fails with what is missing — a test never skips.

use std::path::Path;
use std::process::Command;

/// The network; dropped, it deletes its namespaces (and their links).
pub struct Net {
    prefix: String,
    nodes: Vec<String>,
    subnet: u8,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("running ip {}: {e} (iproute2 missing?)", args.join(" ")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

impl Net {
    /// Namespaces `<prefix>-<node>` for each of `nodes`, every pair linked.
    /// Node `i` has the address `10.231.<subnet>.<i + 1>`.
    pub fn new(nodes: &[&str]) -> Result<Net, String> {
        let id = std::process::id();
        let subnet = (id % 200) as u8 + 20;
        let prefix = format!("rl{}", id % 100_000);
        let mut net = Net {
            prefix,
            nodes: Vec::new(),
            subnet,
        };
        for node in nodes {
            let name = net.ns(node);
            let _ = ip(&["netns", "del", &name]);
            ip(&["netns", "add", &name]).map_err(|e| {
                format!("{e}: the fault tests put each node in its own network namespace and need root (CI runs as root)")
            })?;
            net.nodes.push(node.to_string());
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
            let address = format!("{}/32", net.address(node));
            ip(&["-n", &name, "addr", "add", &address, "dev", "lo"])?;
        }
        for (i, a) in nodes.iter().enumerate() {
            for b in &nodes[i + 1..] {
                net.link(a, b)?;
            }
        }
        Ok(net)
    }

    fn index(&self, node: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| n == node)
            .unwrap_or_else(|| panic!("no node {node}"))
    }

    /// The namespace of `node`.
    pub fn ns(&self, node: &str) -> String {
        format!("{}-{node}", self.prefix)
    }

    /// The address of `node`.
    pub fn address(&self, node: &str) -> String {
        let i = self
            .nodes
            .iter()
            .position(|n| n == node)
            .unwrap_or(self.nodes.len());
        format!("10.231.{}.{}", self.subnet, i + 1)
    }

    /// The link's interface name on `from`'s side (15 characters at most).
    fn end(&self, from: &str, to: &str) -> String {
        format!("v{}x{}", self.index(from), self.index(to))
    }

    fn link(&self, a: &str, b: &str) -> Result<(), String> {
        let (ea, eb) = (self.end(a, b), self.end(b, a));
        // Made in the root namespace and moved at once; it gets no address
        // there.
        let tmp_a = format!("{}{}", self.prefix, ea);
        let tmp_b = format!("{}{}", self.prefix, eb);
        ip(&[
            "link", "add", &tmp_a, "type", "veth", "peer", "name", &tmp_b,
        ])?;
        ip(&["link", "set", &tmp_a, "netns", &self.ns(a)])?;
        ip(&["link", "set", &tmp_b, "netns", &self.ns(b)])?;
        for (node, tmp, end, peer) in [(a, &tmp_a, &ea, b), (b, &tmp_b, &eb, a)] {
            let ns = self.ns(node);
            ip(&["-n", &ns, "link", "set", tmp, "name", end])?;
            ip(&["-n", &ns, "link", "set", end, "up"])?;
            let route = format!("{}/32", self.address(peer));
            ip(&[
                "-n", &ns, "route", "add", &route, "dev", end, "scope", "link",
            ])?;
        }
        Ok(())
    }

    /// Cuts (or restores) the link between `a` and `b`.
    pub fn set_link(&self, a: &str, b: &str, up: bool) {
        let state = if up { "up" } else { "down" };
        for (node, peer) in [(a, b), (b, a)] {
            let end = self.end(node, peer);
            if let Err(error) = ip(&["-n", &self.ns(node), "link", "set", &end, state]) {
                panic!("{error}");
            }
            if up {
                // A link brought up again has lost its route.
                let route = format!("{}/32", self.address(peer));
                let _ = ip(&[
                    "-n",
                    &self.ns(node),
                    "route",
                    "replace",
                    &route,
                    "dev",
                    &end,
                    "scope",
                    "link",
                ]);
            }
        }
    }

    /// Restores every link.
    pub fn heal(&self) {
        for (i, a) in self.nodes.iter().enumerate() {
            for b in &self.nodes[i + 1..] {
                self.set_link(a, b, true);
            }
        }
    }

    /// Moves the calling thread into `node`'s namespace: every socket it
    /// (and every thread it starts afterwards) opens is `node`'s.
    pub fn enter(&self, node: &str) -> Result<(), String> {
        let path = Path::new("/var/run/netns").join(self.ns(node));
        let file =
            std::fs::File::open(&path).map_err(|e| format!("opening {}: {e}", path.display()))?;
        // SAFETY: setns on a descriptor we own, for this thread only.
        let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) };
        if rc != 0 {
            return Err(format!(
                "setns into {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for node in &self.nodes {
            let _ = ip(&["netns", "del", &self.ns(node)]);
        }
    }
}
