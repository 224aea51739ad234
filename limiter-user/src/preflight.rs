//! Checks that turn kernel errors deep in loading into one clear line up front.

use anyhow::{bail, Result};
use aya::util::KernelVersion;

/// Oldest kernel with everything we need: bpf_link for cgroups (5.7), ring buffers (5.8),
/// socket storage in sock_addr programs and cgroup/sock_release (5.9), pidfd_getfd (5.6),
/// socket storage in tracing programs, the state-change tracepoint's (5.11).
const MIN_KERNEL: (u8, u8) = (5, 11);

const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_SYS_PTRACE: u32 = 19;
const CAP_BPF: u32 = 39;

pub struct Kernel {
    /// `bpf_set_retval` (5.18+) lets a refused connect fail with ECONNREFUSED, not EPERM.
    pub has_set_retval: bool,
    /// The kernel's timer frequency (CONFIG_HZ): TCP's timers count in its ticks.
    pub hz: u32,
}

/// Makes the agent use the programs as it would on an older kernel (`5.17`), so that the
/// path older kernels take can be tried on a newer one; it can only lower the version.
pub const ASSUME_KERNEL_VAR: &str = "LIMITER_ASSUME_KERNEL";

pub fn check_kernel() -> Result<Kernel> {
    let running = KernelVersion::current()
        .map_err(|e| anyhow::anyhow!("cannot read the kernel version: {e}"))?;
    let version = match std::env::var(ASSUME_KERNEL_VAR) {
        Ok(assumed) => {
            let assumed = assumed_version(&assumed)?;
            if assumed < running {
                assumed
            } else {
                running
            }
        }
        Err(_) => running,
    };
    kernel_features(version)
}

fn assumed_version(text: &str) -> Result<KernelVersion> {
    let parse = |part: Option<&str>| part.and_then(|p| p.parse::<u8>().ok());
    let mut parts = text.trim().split('.');
    match (parse(parts.next()), parse(parts.next()), parts.next()) {
        (Some(major), Some(minor), None) => Ok(KernelVersion::new(major, minor, 0)),
        _ => bail!("{ASSUME_KERNEL_VAR}={text}: give a kernel version as MAJOR.MINOR, e.g. 5.17"),
    }
}

fn kernel_features(version: KernelVersion) -> Result<Kernel> {
    let (major, minor) = MIN_KERNEL;
    if version < KernelVersion::new(major, minor, 0) {
        bail!("kernel {version:?} is too old: limiter needs Linux {major}.{minor} or newer");
    }
    Ok(Kernel {
        has_set_retval: version >= KernelVersion::new(5, 18, 0),
        hz: kernel_hz(),
    })
}

/// Debian's and most distributions' CONFIG_HZ, for a kernel whose build configuration is not
/// in /boot: a wrong guess only scales a queued connect's SYN timer.
const USUAL_HZ: u32 = 250;

/// CONFIG_HZ from the running kernel's build configuration in /boot.
fn kernel_hz() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .and_then(|release| std::fs::read_to_string(format!("/boot/config-{}", release.trim())))
        .ok()
        .and_then(|config| config_hz(&config))
        .unwrap_or(USUAL_HZ)
}

fn config_hz(config: &str) -> Option<u32> {
    config
        .lines()
        .find_map(|line| line.strip_prefix("CONFIG_HZ="))
        .and_then(|hz| hz.trim().parse().ok())
        .filter(|&hz| hz > 0)
}

/// Root, or the capabilities the systemd unit grants.
pub fn check_privileges() -> Result<()> {
    let caps = procfs::process::Process::myself()?.status()?.capeff;
    let has = |cap: u32| caps & (1u64 << cap) != 0;
    if (has(CAP_BPF) || has(CAP_SYS_ADMIN)) && has(CAP_NET_ADMIN) && has(CAP_SYS_PTRACE) {
        return Ok(());
    }
    bail!("not enough privileges: run as root (sudo), or grant CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN and CAP_SYS_PTRACE")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timer_frequency_is_read_from_the_build_configuration() {
        let config = "CONFIG_HZ_250=y\nCONFIG_HZ=250\n# CONFIG_HZ_1000 is not set\n";
        assert_eq!(config_hz(config), Some(250));
        assert_eq!(config_hz("CONFIG_HZ_1000=y\n"), None);
    }

    #[test]
    fn old_kernels_are_refused_with_the_minimum() {
        let err = kernel_features(KernelVersion::new(5, 4, 0))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("too old") && err.contains("5.11"), "{err}");
    }

    #[test]
    fn an_assumed_kernel_is_major_dot_minor() {
        assert_eq!(
            assumed_version("5.17").unwrap(),
            KernelVersion::new(5, 17, 0)
        );
        for bad in ["5", "5.17.1", "five.x", ""] {
            let err = assumed_version(bad).err().unwrap().to_string();
            assert!(err.contains(ASSUME_KERNEL_VAR), "{err}");
        }
    }

    #[test]
    fn set_retval_is_used_from_5_18() {
        assert!(
            !kernel_features(KernelVersion::new(5, 15, 0))
                .unwrap()
                .has_set_retval
        );
        assert!(
            kernel_features(KernelVersion::new(5, 18, 0))
                .unwrap()
                .has_set_retval
        );
    }
}
