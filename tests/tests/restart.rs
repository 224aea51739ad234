//! Enforcement across agent restarts and cgroup re-creation (root, real kernel).

use std::process::Command;

use limiter_integration_tests::*;

fn attached_programs(cg: &TestCgroup) -> String {
    let out = Command::new("bpftool")
        .args(["cgroup", "show"])
        .arg(cg.path())
        .output()
        .expect("bpftool is not installed (apt-get install bpftool)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[kernel_test]
fn a_restarted_agent_takes_over_enforcement_that_never_stopped() {
    let cg = TestCgroup::new("takeover");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let args = ["--algorithm", "fixed", "--limit", "2", "--keep-attached"];
    let first = Agent::start(&cg, &args);
    let (held, lines) = Probe::hold(&cg, up.addr, 2);
    assert_eq!(tally(&lines), (2, 0, 0));
    assert!(first.stop().success());

    // No agent: the kernel still enforces, and status still reads the pins.
    assert!(attached_programs(&cg).contains("limiter_connect4"));
    let (_, lines) = Probe::hold(&cg, up.addr, 1);
    assert_eq!(tally(&lines), (0, 1, 0), "enforced while no agent runs");
    assert_eq!(field(&cg, up.addr, "inflight"), 2);
    let agent = &status_report(&cg)["agent"];
    assert_eq!(
        (&agent["running"], &agent["attached"]),
        (&false.into(), &true.into())
    );

    let second = Agent::start(&cg, &[&args[..4], &["--max-destinations", "1000"]].concat());
    assert!(
        second.logged(&["keeps the previous agent's table sizes"]),
        "taking over says that the sizes asked for do not apply"
    );
    assert!(
        second.logged(&["took_over=true"]),
        "the second agent must take over, not attach anew"
    );
    assert_eq!(field(&cg, up.addr, "inflight"), 2, "state taken over");
    assert_eq!(field(&cg, up.addr, "shed"), 1);
    let (_, lines) = Probe::hold(&cg, up.addr, 1);
    assert_eq!(tally(&lines), (0, 1, 0));
    held.release();
    wait_until("the slots taken before the restart", || {
        field(&cg, up.addr, "inflight") == 0
    });

    // Without --keep-attached, stopping detaches and unpins.
    assert!(second.stop().success());
    assert!(!cg.pin_dir().exists());
    assert!(!attached_programs(&cg).contains("limiter"));
}

#[kernel_test]
fn a_recreated_cgroup_is_limited_again() {
    let cg = TestCgroup::new("recreate");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "1"]);
    let (held, lines) = Probe::hold(&cg, up.addr, 2);
    assert_eq!(tally(&lines), (1, 1, 0));
    held.release();

    cg.recreate();
    wait_until("the agent to attach again", || {
        agent.logged(&["limiter re-attached"])
    });
    assert!(attached_programs(&cg).contains("limiter_connect4"));
    let (held, lines) = Probe::hold(&cg, up.addr, 2);
    assert_eq!(tally(&lines), (1, 1, 0), "enforcement is back");
    held.release();
}

#[kernel_test]
fn a_removed_pin_directory_is_pinned_again_and_taken_over() {
    let cg = TestCgroup::new("pinloss");
    let up = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let args = ["--algorithm", "fixed", "--limit", "2", "--keep-attached"];
    let first = Agent::start(&cg, &args);
    let (held, lines) = Probe::hold(&cg, up.addr, 2);
    assert_eq!(tally(&lines), (2, 0, 0));
    // Gone at once, as `rm -rf` would leave it once done.
    let aside = std::path::PathBuf::from(format!("{}-removed", cg.pin_dir().display()));
    std::fs::rename(cg.pin_dir(), &aside).unwrap();
    std::fs::remove_dir_all(&aside).unwrap();
    wait_until("the maps to be pinned again", || {
        cg.pin_dir().join("dests").exists()
    });
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(cg.pin_dir()).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o700);
    assert!(first.logged(&["the pin directory was removed: the maps are pinned again"]));
    assert!(first.stop().success());

    let second = Agent::start(&cg, &args[..4]);
    assert!(second.logged(&["took_over=true"]));
    assert_eq!(field(&cg, up.addr, "inflight"), 2, "state taken over");
    let (_, lines) = Probe::hold(&cg, up.addr, 1);
    assert_eq!(tally(&lines), (0, 1, 0));
    assert!(second.stop().success());
    assert!(!cg.pin_dir().exists());
    assert!(!attached_programs(&cg).contains("limiter"));
    held.release();
}

#[kernel_test]
fn a_taken_over_agent_queues_only_if_the_one_before_attached_the_queue() {
    let cg = TestCgroup::new("takeoverqueue");
    let cg_arg = cg.path().to_string_lossy().into_owned();
    let refusing = ["--algorithm", "fixed", "--limit", "2", "--keep-attached"];
    assert!(Agent::start(&cg, &refusing).stop().success());
    assert!(!attached_programs(&cg).contains("limiter_sockops"));
    // Queueing needs the program the first agent did not attach: said, nothing changed.
    assert_refused(
        Command::new(agent_bin()).args(["--cgroup", &cg_arg, "--overflow", "queue"]),
        "restart the agent (without --keep-attached) to queue",
    );
    assert!(attached_programs(&cg).contains("limiter_connect4"));

    // Started afresh, it queues; taken over, it still does.
    let detached = agent_command(&["detach", "--cgroup", &cg_arg]);
    assert!(detached.status.success());
    let queueing = [&refusing[..], &["--overflow", "queue"]].concat();
    assert!(Agent::start(&cg, &queueing).stop().success());
    assert!(attached_programs(&cg).contains("limiter_sockops"));
    let second = Agent::start(
        &cg,
        &[
            "--algorithm",
            "fixed",
            "--limit",
            "2",
            "--overflow",
            "queue",
        ],
    );
    assert!(second.logged(&["took_over=true"]));
    assert!(second.stop().success());
    assert!(!attached_programs(&cg).contains("limiter"));
}
