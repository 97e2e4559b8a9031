#!/usr/bin/env bash
# Reproduces, on the installed ovs-vswitchd, the userspace-datapath bug that made the cyclonus oracle
# see a NetworkPolicy leak (issue #21): after an OpenFlow change, the revalidator modifies the actions
# of two overlapping megaflows, but dpif-netdev finds the flow to modify by key instead of UFID and
# changes the wrong one, so one megaflow keeps an action the flow tables no longer have. Fixed in OVS
# 3.1.3 (commit 21410ff80, "dpif-netdev: Fix dpif_netdev_flow_put"); Debian bookworm ships 3.1.0.
# The steps are OVS's own test (tests/pmd.at, "PMD - revalidator modify overlapping flows") on a
# dummy datapath. With EXACT=1 megaflows are disabled first (ovstest.OVS.ExactMatchDatapath, what
# the policy tests do; Windows' datapath is exact-match) and every flow follows the table.
# Prints "stale" (exit 1) or "ok". Needs root (or write access to a temp dir) and openvswitch-switch.
set -u
D=$(mktemp -d)
export OVS_RUNDIR=$D OVS_LOGDIR=$D OVS_DBDIR=$D OVS_SYSCONFDIR=$D
ovsdb-tool create "$D/conf.db" /usr/share/openvswitch/vswitch.ovsschema
ovsdb-server --detach --no-chdir --pidfile="$D/ovsdb-server.pid" --log-file="$D/ovsdb.log" --remote="punix:$D/db.sock" "$D/conf.db"
ovs-vswitchd --enable-dummy --disable-system --detach --no-chdir --pidfile="$D/ovs-vswitchd.pid" --log-file="$D/vswitchd.log" "unix:$D/db.sock"
trap 'kill "$(cat "$D/ovs-vswitchd.pid")" "$(cat "$D/ovsdb-server.pid")" 2>/dev/null; rm -rf "$D"' EXIT
vsctl() { ovs-vsctl --db="unix:$D/db.sock" "$@"; }
appctl() { ovs-appctl -t "$D/ovs-vswitchd.$(cat "$D/ovs-vswitchd.pid").ctl" "$@"; }
send() { appctl netdev-dummy/receive p1 "ipv4(src=10.0.0.1,dst=$1,proto=6),tcp(src=1,dst=2)" >/dev/null; }
dpflows() { appctl dpctl/dump-flows | sed 's/.*core: [0-9]*//'; }

vsctl --no-wait init
vsctl add-br br0 -- set bridge br0 datapath-type=dummy \
	-- add-port br0 p1 -- set interface p1 type=dummy-pmd -- add-port br0 p2 -- set interface p2 type=dummy-pmd
[ -n "${EXACT:-}" ] && appctl upcall/disable-megaflows
# A megaflow for 10.1.2.2 masked /24.
ovs-ofctl add-flow br0 'table=0,in_port=p1,ip,nw_dst=10.1.2.0/24,actions=p2'
send 10.1.2.2; sleep 0.5; send 10.1.2.2
# The rule widens to /16 with another action: the /24 megaflow is modified, 10.1.0.2 adds a /16 one.
echo 'table=0,in_port=p1,ip,nw_dst=10.1.0.0/16 actions=ct(commit)' | ovs-ofctl --bundle replace-flows br0 -
appctl revalidator/wait
send 10.1.0.2; sleep 0.5
echo "two overlapping datapath flows:"; dpflows
# Traffic on the /16 one ranks its subtable first (dpcls sorts subtables by hits every second),
# within the /24 one's 10 s idle time.
for _ in $(seq 0 30); do send 10.1.0.2; done
sleep 1.5
# The action changes back: both flows must follow.
echo 'table=0,in_port=p1,ip,nw_dst=10.1.0.0/16 actions=p2' | ovs-ofctl --bundle replace-flows br0 -
appctl revalidator/wait; appctl revalidator/wait
echo "after the table's action became p2 (output:2) and two revalidation rounds:"
flows=$(dpflows); echo "$flows"
if grep -q 'ct(commit)' <<<"$flows"; then
	echo "stale: a datapath flow kept ct(commit), which no OpenFlow rule has any more"
	exit 1
fi
echo "ok"
