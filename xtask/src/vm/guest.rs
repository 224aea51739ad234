//! The script the VM runs as root: what the kernel tests expect of a machine, then every
//! test harness, each in its package's directory as cargo would run it.

use std::fmt::Write;

use limiter_integration_tests::HANG_GUARD_VAR;

use crate::artifacts::Executable;

/// Bound on one wait inside a test. Emulation is several times slower than the host, and
/// the closed-loop tests wait for the controller to react to real traffic; the bound only
/// guards against hangs, and is short enough that a failing wait reports itself well
/// before the harness's bound below.
const HANG_GUARD_SECS: u64 = 300;

/// Bound on one harness (the slowest takes about 140 s in an emulated VM): a hang costs
/// that one harness, and the others still run and report.
const HARNESS_BOUND_SECS: u64 = 600;

/// The guest's last line: which harnesses failed.
pub const SUMMARY: &str = "=== kernel test harnesses on";

/// Tests marked ignored are those that need what a development machine may lack (such as
/// network emulation); the VM has it all, so they run too. One test at a time: on the
/// VM's one or two CPUs, concurrent closed-loop tests starve one another's traffic until
/// every upstream looks slow.
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
failed=
",
    );
    let _ = writeln!(s, "export {HANG_GUARD_VAR}={HANG_GUARD_SECS}");
    for h in harnesses {
        let _ = write!(
            s,
            "echo '=== {name} ({path})'\n\
             started=$(date +%s)\n\
             (cd '{dir}' && timeout -s KILL {HARNESS_BOUND_SECS} '{path}' --include-ignored --test-threads 1)\n\
             rc=$?\n\
             echo \"=== {name}: exit $rc after $(($(date +%s) - started)) s\"\n\
             [ $rc -eq 0 ] || failed=\"$failed {name}\"\n",
            name = h.name,
            path = h.path.display(),
            dir = h.package_dir.display(),
        );
    }
    let _ = write!(
        s,
        "echo \"{SUMMARY} $(uname -r): $(echo $failed | wc -w) of {} failed:$failed\"\n\
         [ -z \"$failed\" ]\n",
        harnesses.len()
    );
    s
}

/// What a failed run's log says went wrong, one line each, for the end of the error: a
/// CI log cut to its tail still names the failed harnesses and tests, or, where the guest
/// ended before its summary, what it was running.
pub fn digest(log: &str) -> Vec<String> {
    let lines: Vec<&str> = log.lines().map(str::trim_end).collect();
    let mut digest = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let harness_failed =
            line.starts_with("=== ") && line.contains(": exit ") && !line.contains(": exit 0 ");
        let test_failed = line.starts_with("test ") && line.ends_with("FAILED");
        if harness_failed || test_failed || line.starts_with(SUMMARY) {
            digest.push(line.to_string());
        } else if line.contains("panicked at") {
            digest.push(line.to_string());
            digest.extend(lines.get(i + 1).map(|l| l.to_string()));
        }
    }
    if !lines.iter().any(|l| l.starts_with(SUMMARY)) {
        let last = |prefix: &str| lines.iter().rev().find(|l| l.starts_with(prefix));
        if let Some(harness) = last("=== ").filter(|l| !l.contains(": exit ")) {
            digest.push(format!("running when it ended: {harness}"));
        }
        if let Some(test) = last("test ").filter(|l| l.ends_with("...")) {
            digest.push(format!("running when it ended: {test}"));
        }
    }
    digest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_is_valid_shell() {
        let harness = |name: &str| Executable {
            name: name.into(),
            path: format!("/target/debug/deps/{name}-0123").into(),
            test: true,
            package_dir: "/work/tests".into(),
        };
        let script = script(&[harness("signal"), harness("watch")]);
        let check = std::process::Command::new("sh")
            .args(["-n", "-c", &script])
            .status()
            .unwrap();
        assert!(check.success(), "sh -n rejects the script:\n{script}");
        assert!(script.contains("timeout -s KILL 600 '/target/debug/deps/watch-0123'"));
    }

    #[test]
    fn a_digest_names_what_failed() {
        let log = "\
=== signal (/d/signal-1)
test the_limit_falls ... FAILED
thread 'the_limit_falls' panicked at tests/tests/signal.rs:10:5:
gave up waiting for the limit to fall
=== signal: exit 101 after 412 s
=== watch (/d/watch-2)
test it_watches ... ok
=== watch: exit 0 after 7 s
=== kernel test harnesses on 6.1.0-57-amd64: 1 of 2 failed: signal
";
        assert_eq!(
            digest(log),
            [
                "test the_limit_falls ... FAILED",
                "thread 'the_limit_falls' panicked at tests/tests/signal.rs:10:5:",
                "gave up waiting for the limit to fall",
                "=== signal: exit 101 after 412 s",
                "=== kernel test harnesses on 6.1.0-57-amd64: 1 of 2 failed: signal",
            ]
        );
    }

    #[test]
    fn a_digest_of_a_stopped_guest_names_what_ran() {
        let log = "\
=== watch (/d/watch-2)
test it_watches ... ok
=== watch: exit 0 after 7 s
=== control (/d/control-3)
test a_slow_upstream_is_bounded ... 
[ 1800.1] rcu: INFO: rcu_sched self-detected stall
";
        assert_eq!(
            digest(log),
            [
                "running when it ended: === control (/d/control-3)",
                "running when it ended: test a_slow_upstream_is_bounded ...",
            ]
        );
    }
}
