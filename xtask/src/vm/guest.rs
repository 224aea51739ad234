//! The script the VM runs as root: what the kernel tests expect of a machine, then every
//! test harness, each in its package's directory as cargo would run it.

use std::fmt::Write;

use limiter_integration_tests::HANG_GUARD_VAR;

use crate::artifacts::Executable;

/// Tests marked ignored are those that need what a development machine may lack (such as
/// network emulation); the VM has it all, so they run too. One test at a time: on the
/// VM's two CPUs, concurrent closed-loop tests starve one another's traffic until every
/// upstream looks slow.
pub fn script(harnesses: &[Executable]) -> String {
    let mut s = String::from(
        "#!/bin/sh
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
echo \"kernel $(uname -r)\"
# virtme-ng mounts cgroup2 at /sys/fs/cgroup, but neither bpffs nor the loopback link.
grep -q ' /sys/fs/bpf bpf ' /proc/mounts || mount -t bpf bpf /sys/fs/bpf || exit 101
ip link set lo up || exit 101
# The network delay the signal tests add; a test that needs it fails saying so.
modprobe sch_netem || echo 'sch_netem cannot be loaded: the network-delay test will fail'
failed=0
",
    );
    // Emulation is several times slower than the host, and the closed-loop tests wait
    // for the controller to react to real traffic; the bound only guards against hangs.
    let _ = writeln!(s, "export {HANG_GUARD_VAR}=600");
    for h in harnesses {
        let _ = write!(
            s,
            "echo '=== {name} ({path})'\ncd '{dir}' && '{path}' --include-ignored --test-threads 1 || failed=$((failed + 1))\n",
            name = h.name,
            path = h.path.display(),
            dir = h.package_dir.display(),
        );
    }
    let _ = write!(
        s,
        "echo \"$failed of {} test harnesses failed on $(uname -r)\"\nexit $((failed > 0))\n",
        harnesses.len()
    );
    s
}
