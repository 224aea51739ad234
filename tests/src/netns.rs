//! A network namespace reached over a veth pair, for traffic over a real interface.

use std::{
    net::{Ipv4Addr, TcpListener},
    process::Command,
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use crate::upstream::{Behaviour, Upstream};

/// A network namespace of the test's own, reached from the host over a veth pair: a real
/// interface rather than loopback. Addresses are from 198.18.0.0/15, the range set aside
/// for network tests; no traffic leaves the machine.
pub struct TestNetns {
    name: String,
    host_if: String,
    peer_if: String,
    pub host_addr: Ipv4Addr,
    pub peer_addr: Ipv4Addr,
}

impl TestNetns {
    pub fn new() -> Self {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id() as usize;
        let name = format!("limiter-test-{pid}-{n}");
        let (host_if, peer_if) = (format!("lt{pid}h{n}"), format!("lt{pid}p{n}"));
        // A /24 per namespace, picked by process and sequence: two processes making their
        // first namespace at once must not put the same subnet on two interfaces.
        let subnet = (pid * 8 + n) % 512;
        let (second, third) = ((18 + subnet / 256) as u8, (subnet % 256) as u8);
        let net = TestNetns {
            name: name.clone(),
            host_if: host_if.clone(),
            peer_if: peer_if.clone(),
            host_addr: Ipv4Addr::new(198, second, third, 1),
            peer_addr: Ipv4Addr::new(198, second, third, 2),
        };
        let ip = |args: &[&str]| {
            let status = Command::new("ip")
                .args(args)
                .status()
                .expect("ip (iproute2) is not installed");
            assert!(status.success(), "ip {args:?} failed");
        };
        ip(&["netns", "add", &name]);
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &peer_if, "netns", &name,
        ]);
        ip(&[
            "addr",
            "add",
            &format!("{}/24", net.host_addr),
            "dev",
            &host_if,
        ]);
        ip(&["link", "set", &host_if, "up"]);
        ip(&[
            "-n",
            &name,
            "addr",
            "add",
            &format!("{}/24", net.peer_addr),
            "dev",
            &peer_if,
        ]);
        ip(&["-n", &name, "link", "set", &peer_if, "up"]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        net
    }

    /// Delays every packet the namespace sends by `delay` (netem on its end of the pair):
    /// time the network adds, not the upstream. Needs the kernel's `sch_netem`.
    pub fn delay_outgoing(&self, delay: Duration) {
        let delay = format!("{}ms", delay.as_millis());
        let status = Command::new("tc")
            .args(["-n", &self.name, "qdisc", "add", "dev", &self.peer_if])
            .args(["root", "netem", "delay", &delay])
            .status()
            .expect("tc (iproute2) is not installed");
        assert!(
            status.success(),
            "tc cannot add a netem qdisc: this kernel needs sch_netem (modprobe sch_netem)"
        );
    }

    /// Starts an upstream inside the namespace, listening on its veth address.
    pub fn upstream(&self, behaviour: Behaviour) -> Upstream {
        Upstream::serve(self.listener(), behaviour)
    }

    /// A listener inside the namespace on its veth address; a socket stays in the namespace
    /// it was made in, so whichever thread serves it.
    pub fn listener(&self) -> TcpListener {
        let path = format!("/var/run/netns/{}", self.name);
        let bind = format!("{}:0", self.peer_addr);
        std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            let ns = std::fs::File::open(path).unwrap();
            // SAFETY: setns moves only this thread, which exists to bind the listener.
            assert_eq!(
                unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) },
                0
            );
            TcpListener::bind(bind).unwrap()
        })
        .join()
        .unwrap()
    }
}

impl Default for TestNetns {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        // Deleting one end of the pair deletes the other at once; the namespace itself goes
        // once the last socket made in it is closed.
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}
