//! `limiter-user status --watch`: the table again and again, the destination shedding now
//! first (root, real kernel).

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
};

use limiter_integration_tests::*;

#[kernel_test]
fn the_table_is_redrawn_with_the_destination_shedding_now_first() {
    let cg = TestCgroup::new("watch");
    let (quiet, shedding) = (
        Upstream::start("127.0.0.1:0", Behaviour::Hold),
        Upstream::start("127.0.0.1:0", Behaviour::Hold),
    );
    let _agent = Agent::start(&cg, &["--algorithm", "fixed", "--limit", "3"]);
    // The quiet destination has more in flight, the other one refuses.
    let (_quiet, lines) = Probe::hold(&cg, quiet.addr, 3);
    assert_eq!(tally(&lines), (3, 0, 0));
    let (shedding_probe, lines) = Probe::hold(&cg, shedding.addr, 5);
    assert_eq!(tally(&lines), (3, 2, 0));

    let mut watch = Command::new(agent_bin())
        .args([
            "status",
            "--watch",
            "1",
            "--cgroup",
            &cg.path().to_string_lossy(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(watch.stdout.take().unwrap()).lines();
    // Each table's rows as (port, in-flight).
    let mut next_table = || -> Vec<(u16, i64)> {
        loop {
            let line = out.next().expect("status --watch ended").unwrap();
            if line.starts_with("ADDRESS") {
                break;
            }
        }
        out.by_ref()
            .map(|l| l.unwrap())
            .take_while(|l| !l.is_empty())
            .map(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                (cols[1].parse().unwrap(), cols[4].parse().unwrap())
            })
            .collect()
    };
    let ports = |table: &[(u16, i64)]| table.iter().map(|r| r.0).collect::<Vec<_>>();
    let first = next_table();
    assert_eq!(
        ports(&first),
        [shedding.addr.port(), quiet.addr.port()],
        "shed first"
    );

    shedding_probe.release();
    let calm = loop {
        let table = next_table();
        if table.contains(&(shedding.addr.port(), 0)) {
            break table;
        }
    };
    // Nothing shed since the first refresh: the most connections in flight come first.
    assert_eq!(
        ports(&calm),
        [quiet.addr.port(), shedding.addr.port()],
        "then in flight"
    );
    let _ = watch.kill();
    let _ = watch.wait();
}
