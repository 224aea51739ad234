//! Boots a kernel with virtme-ng (the host's root file system shared read-only, writable
//! overlays on top) and runs one command in it, never for longer than a deadline.

use std::{
    fs::File,
    io::{Read, Write},
    os::unix::process::CommandExt,
    path::Path,
    process::{Command, Stdio},
    sync::{mpsc, Arc, Mutex},
    time::Duration,
};

use anyhow::{bail, Context, Result};
use procfs::{CpuInfo, Current};

/// How the guest is started.
pub struct Guest<'a> {
    pub image: &'a Path,
    /// systemd as PID 1 instead of virtme-ng's own init.
    pub systemd: bool,
    pub timeout: Duration,
}

impl Guest<'_> {
    /// Runs `command` in the guest; the console and the command's output go to the terminal
    /// and to `log`. Fails unless the command exits 0: a panic ends qemu (the kernel is told
    /// not to reboot), a hang is stopped at the deadline.
    ///
    /// A boot that fails before the command starts is tried once more: an emulator's glitch
    /// is not the kernel under test. A failure once the command runs is never retried.
    pub fn run(&self, command: &str, log: &Path) -> Result<()> {
        if self.systemd && !Path::new("/lib/modules").is_dir() {
            bail!("virtme-ng's systemd boot needs /lib/modules on this machine, to mount the guest's modules over: sudo mkdir /lib/modules");
        }
        let command = format!("echo '{STARTED}' && {command}");
        match self.boot(&command, log) {
            Err(e) if !started(log) => {
                eprintln!("the guest never started its command ({e:#}): booting once more");
                self.boot(&command, log)
            }
            result => result,
        }
    }

    fn boot(&self, command: &str, log: &Path) -> Result<()> {
        let mut cmd = self.vng(command);
        let log_file = Arc::new(Mutex::new(
            File::create(log).with_context(|| format!("cannot create {}", log.display()))?,
        ));
        // Pipes, not files: qemu opens each output chardev afresh, and on a regular file
        // those would overwrite one another.
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so that a hang is ended with qemu and all.
            .process_group(0);
        let mut child = cmd
            .spawn()
            .context("cannot run vng: install virtme-ng (pip install virtme-ng), or run .ci/run")?;
        let copiers = [
            tee(
                child.stdout.take().expect("piped"),
                std::io::stdout(),
                &log_file,
            ),
            tee(
                child.stderr.take().expect("piped"),
                std::io::stderr(),
                &log_file,
            ),
        ];
        let pid = child.id();
        let (done, exited) = mpsc::channel();
        std::thread::spawn(move || done.send(child.wait()));
        let status = match exited.recv_timeout(self.timeout) {
            Ok(status) => status?,
            Err(_) => {
                // SAFETY: kill has no memory preconditions; the group is the one spawned above.
                unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
                let _ = exited.recv();
                bail!(
                    "the VM gave no result within {} s and was stopped: its console is above and in {}",
                    self.timeout.as_secs(),
                    log.display()
                );
            }
        };
        for copier in copiers {
            let _ = copier.join();
        }
        if !status.success() {
            bail!(
                "the VM's run failed ({status}; 255 is a kernel panic or an init failure): its console is above and in {}",
                log.display()
            );
        }
        Ok(())
    }

    fn vng(&self, command: &str) -> Command {
        let mut cmd = Command::new("vng");
        cmd.arg("--run")
            .arg(self.image)
            // The console too, so that a panic or a hang shows what the kernel said.
            .arg("--verbose")
            // virtiofsd as packaged with qemu 7.2 does not start; 9p works everywhere.
            .arg("--force-9p")
            .args(["--memory", "4G"]);
        if hardware_virtualisation() {
            cmd.args(["--cpus", "2"]);
        } else {
            // One processor: under software emulation a second one now and then runs stale
            // code the kernel has just patched (int3 text poking: a static key flipped at
            // boot, or as a test detaches its programs) and dies on the patch's breakpoint
            // ("Oops: int3" in ip_finish_output on 6.12), an emulator glitch.
            cmd.args(["--cpus", "1", "--disable-kvm"]);
        }
        if self.systemd {
            cmd.arg("--systemd").args(["--append", SYSTEMD_ARGS]);
        }
        cmd.args(["--exec", command]);
        cmd
    }
}

/// The guest's first line once it runs its command.
const STARTED: &str = "=== the guest runs its command";

/// Whether the guest reached its command in the run `log` holds.
fn started(log: &Path) -> bool {
    std::fs::read(log).is_ok_and(|text| {
        text.split(|&b| b == b'\n')
            .any(|line| line.trim_ascii() == STARTED.as_bytes())
    })
}

/// systemd takes the guest for a container (the host's root, shared, may hold /.dockerenv),
/// and in a container it reads its options from its own command line, not the kernel's:
/// SYSTEMD_PROC_CMDLINE (an environment variable the kernel hands to init) gives them
/// back. They ask for the serial getty virtme-ng runs its command from (a container would
/// get a /dev/console one), for basic.target only, not the host's services, for no
/// boot-time emptying of /tmp (on the shared root that means a whiteout per host file, for
/// many minutes), and for failures only on the console.
const SYSTEMD_ARGS: &str = "\"SYSTEMD_PROC_CMDLINE=systemd.unit=basic.target \
    systemd.wants=serial-getty@ttyS0.service systemd.mask=console-getty.service \
    systemd.mask=systemd-tmpfiles-setup.service systemd.show_status=error\"";

/// KVM only where the CPU offers VMX or SVM: a /dev/kvm without them (a paravirtualised
/// one, as in some cloud guests) cannot run a stock kernel, so software emulation it is.
fn hardware_virtualisation() -> bool {
    Path::new("/dev/kvm").exists()
        && CpuInfo::current().is_ok_and(|info| {
            (0..info.num_cores()).any(|cpu| {
                info.flags(cpu)
                    .is_some_and(|flags| flags.iter().any(|&f| f == "vmx" || f == "svm"))
            })
        })
}

fn tee(
    mut from: impl Read + Send + 'static,
    mut to: impl Write + Send + 'static,
    log: &Arc<Mutex<File>>,
) -> std::thread::JoinHandle<()> {
    let log = Arc::clone(log);
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            let _ = to.write_all(&buf[..n]);
            let _ = log.lock().expect("no panics hold it").write_all(&buf[..n]);
        }
    })
}
