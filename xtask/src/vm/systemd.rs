//! The systemd unit of dist/ under a real systemd as PID 1: a demo service limited by
//! `limiter@demo.service`, the service restarted into a new cgroup and limited again, and
//! `systemctl stop` leaving nothing attached or pinned.

use std::path::Path;

/// The scenario, as a shell script run as root in the guest.
pub fn script(agent: &Path, probe: &Path, workspace: &Path) -> String {
    format!(
        r#"#!/bin/sh
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
cg=/sys/fs/cgroup/system.slice/demo.service
fail() {{
    echo "systemd unit check failed: $*"
    systemctl --no-pager status demo.service limiter@demo.service
    journalctl --no-pager -n 40 -u limiter@demo.service
    exit 1
}}
# Polls (up to a minute) until the command succeeds: each step waits for an event.
wait_for() {{
    what=$1
    shift
    n=0
    until "$@" >/dev/null 2>&1; do
        n=$((n + 1))
        [ $n -le 300 ] || fail "gave up waiting for $what"
        sleep 0.2
    done
    echo "ok: $what"
}}
refused_since() {{
    journalctl -u demo.service --after-cursor="$1" -o cat | grep -qx 'err 111'
}}
attached() {{
    bpftool cgroup show "$cg" | grep -q limiter_connect4
}}
nothing_left() {{
    ! bpftool cgroup show "$cg" | grep -q limiter &&
        [ -z "$(find /sys/fs/bpf/limiter -mindepth 1 2>/dev/null)" ] &&
        ! bpftool prog show | grep -q limiter_
}}

[ "$(cat /proc/1/comm)" = systemd ] || fail "PID 1 is $(cat /proc/1/comm), not systemd"
echo "$(systemctl --version | head -n 1) as PID 1 on $(uname -r)"
# systemd in a guest it takes for a container leaves bpffs unmounted: mounted here in
# PID 1's mount namespace, where services get theirs from, as systemd does at boot.
grep -q ' /sys/fs/bpf bpf ' /proc/1/mounts ||
    nsenter --target 1 --mount -- mount -t bpf bpf /sys/fs/bpf || fail "cannot mount bpffs"

# Installed where the unit expects the binary and its configuration.
unit='{workspace}/dist/limiter@.service'
binary=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit")
config=$(sed -n 's/^ExecStart=.* --config \([^ ]*\).*/\1/p' "$unit")
[ -n "$binary" ] && [ -n "$config" ] || fail "no binary or --config in the unit's ExecStart"
install -D -m 755 '{agent}' "$binary"
mkdir -p "$(dirname "$config")"
printf 'mode = "prod"\nalgorithm = "fixed"\nlimit = 1\n' >"$config"
install -m 644 "$unit" /etc/systemd/system/
# Accepts and closes every connection, so that only the limiter refuses any.
cat >/etc/systemd/system/demo-upstream.service <<'UNIT'
[Service]
ExecStart=/usr/bin/python3 -c "import socket; s = socket.create_server(('127.0.0.1', 9000), backlog=128); [s.accept()[0].close() for _ in iter(int, 1)]"
UNIT
# Three connections held at once, again and again: with a limit of 1, two are refused.
cat >/etc/systemd/system/demo.service <<'UNIT'
[Unit]
Requires=demo-upstream.service
After=demo-upstream.service
[Service]
ExecStart=/bin/sh -c 'while :; do {probe} hold --to 127.0.0.1:9000 --count 3 </dev/null; sleep 0.2; done'
UNIT
systemctl daemon-reload || fail "daemon-reload"

systemctl start demo.service || fail "demo.service did not start"
cursor=$(journalctl -u demo.service -n 0 --show-cursor -o cat | sed -n 's/^-- cursor: //p')
systemctl start limiter@demo.service || fail "limiter@demo.service did not start"
wait_for "limiter@demo.service attached to $cg" attached
wait_for "demo.service's connects refused at the limit" refused_since "$cursor"

inode=$(stat -c %i "$cg")
cursor=$(journalctl -u demo.service -n 0 --show-cursor -o cat | sed -n 's/^-- cursor: //p')
systemctl restart demo.service || fail "demo.service did not restart"
[ "$(stat -c %i "$cg")" != "$inode" ] || fail "the restart kept the old cgroup"
wait_for "the agent attached to the new cgroup" attached
wait_for "the restarted demo.service limited again" refused_since "$cursor"
systemctl is-active -q limiter@demo.service || fail "the agent did not survive the restart"

systemctl stop limiter@demo.service || fail "systemctl stop limiter@demo.service"
wait_for "nothing attached or pinned after systemctl stop" nothing_left
systemctl stop demo.service demo-upstream.service
echo "systemd unit check passed"
"#,
        agent = agent.display(),
        probe = probe.display(),
        workspace = workspace.display(),
    )
}
