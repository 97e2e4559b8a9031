package ovsdb_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
	"github.com/winnet-io/winnet/internal/ovs/ovstest"
)

func connect(t *testing.T, o *ovstest.OVS) *ovsdb.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := ovsdb.New(ctx, ovsdb.Options{Address: o.DBSocket()})
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// withBridge starts OVS, connects a client and makes the netdev bridge br-int; the context ends
// with the test.
func withBridge(t *testing.T) (*ovstest.OVS, *ovsdb.Client, context.Context) {
	t.Helper()
	o := ovstest.Start(t, ovstest.Options{})
	c := connect(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if _, err := c.EnsureBridge(ctx, ovsdb.BridgeSpec{Name: "br-int", DatapathType: ovsdb.DatapathNetdev}); err != nil {
		t.Fatalf("creating bridge br-int: %v", err)
	}
	return o, c, ctx
}

func desiredPorts() []ovsdb.PortSpec {
	return []ovsdb.PortSpec{
		{Name: "gw0", Type: ovsdb.PortTypeInternal, OFPortRequest: 2},
		ovsdb.TunnelPort("tun0", ovsdb.PortTypeVXLAN, 1, ovsdb.TunnelOptions{LocalIP: "192.168.77.1", DstPort: 4789}),
		ovsdb.TunnelPort("gnv0", ovsdb.PortTypeGeneve, 5, ovsdb.TunnelOptions{}),
		{Name: "pod-a", Type: ovsdb.PortTypeInternal, ExternalIDs: map[string]string{"pod": "ns/a"}},
	}
}

func TestEnsureIsIdempotent(t *testing.T) {
	g := NewWithT(t)
	o := ovstest.Start(t, ovstest.Options{})
	c := connect(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	mac, _ := net.ParseMAC("02:00:00:aa:bb:01")
	spec := ovsdb.BridgeSpec{Name: "br-int", DatapathType: ovsdb.DatapathNetdev, HWAddr: mac, DatapathID: 0xabc1}

	changed, err := c.EnsureBridge(ctx, spec)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	changed, err = c.ReconcilePorts(ctx, "br-int", desiredPorts())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())

	// Second run with the same desired state: zero mutating operations.
	before := c.MutatingOperations()
	changed, err = c.EnsureBridge(ctx, spec)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeFalse())
	for _, p := range desiredPorts() {
		changed, err = c.EnsurePort(ctx, "br-int", p)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(changed).To(BeFalse(), "port %s", p.Name)
	}
	changed, err = c.ReconcilePorts(ctx, "br-int", desiredPorts())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeFalse())
	g.Expect(c.MutatingOperations()).To(Equal(before))

	// What OVS holds matches the specs.
	g.Expect(o.MustVsctl(t, "get", "bridge", "br-int", "protocols", "datapath_type", "fail_mode",
		"other_config:hwaddr", "other_config:datapath-id", "external_ids:winnet-owner")).To(Equal(
		"[OpenFlow15]\nnetdev\nsecure\n\"02:00:00:aa:bb:01\"\n\"000000000000abc1\"\nwinnet\n"))
	g.Expect(o.MustVsctl(t, "get", "interface", "tun0", "type", "options")).To(Equal(
		"vxlan\n{dst_port=\"4789\", key=flow, local_ip=\"192.168.77.1\", remote_ip=flow}\n"))
	g.Expect(o.MustVsctl(t, "get", "interface", "gnv0", "type", "options:remote_ip", "options:key")).To(Equal("geneve\nflow\nflow\n"))

	ofport, err := c.WaitOFPort(ctx, "gw0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ofport).To(Equal(int32(2)))
	ofport, err = c.WaitOFPort(ctx, "tun0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ofport).To(Equal(int32(1)))
	ofport, err = c.WaitOFPort(ctx, "pod-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ofport).To(BeNumerically(">", 0))

	// A drifted field is fixed by the next Ensure, with a change reported.
	o.MustVsctl(t, "set", "interface", "gw0", "ofport_request=7")
	g.Eventually(func() bool {
		changed, err := c.EnsurePort(ctx, "br-int", desiredPorts()[0])
		g.Expect(err).NotTo(HaveOccurred())
		return changed
	}).WithTimeout(5 * time.Second).Should(BeTrue())
	g.Expect(o.MustVsctl(t, "get", "interface", "gw0", "ofport_request")).To(Equal("2\n"))
}

func TestReconcileRemovesOnlyOwnedOrphans(t *testing.T) {
	g := NewWithT(t)
	o, c, ctx := withBridge(t)
	_, err := c.ReconcilePorts(ctx, "br-int", desiredPorts())
	g.Expect(err).NotTo(HaveOccurred())
	// A port somebody else owns must survive.
	o.MustVsctl(t, "add-port", "br-int", "foreign0", "--", "set", "interface", "foreign0", "type=internal")

	keep := desiredPorts()[:2]
	changed, err := c.ReconcilePorts(ctx, "br-int", keep)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())

	owned, err := c.OwnedPorts(ctx, "br-int")
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, p := range owned {
		names = append(names, p.Name)
	}
	g.Expect(names).To(ConsistOf("br-int", "gw0", "tun0"))
	g.Expect(strings.Fields(o.MustVsctl(t, "list-ports", "br-int"))).To(ConsistOf("foreign0", "gw0", "tun0"))

	// Deleting an absent port or bridge is a no-op.
	changed, err = c.DeletePort(ctx, "br-int", "pod-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeFalse())
	changed, err = c.DeleteBridge(ctx, "br-none")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeFalse())
	changed, err = c.DeleteBridge(ctx, "br-int")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	g.Expect(strings.TrimSpace(o.MustVsctl(t, "list-br"))).To(BeEmpty())
}

func TestFlowRestoreWait(t *testing.T) {
	g := NewWithT(t)
	o := ovstest.Start(t, ovstest.Options{})
	c := connect(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, tc := range []struct {
		enabled     bool
		wantChanged bool
		wantVsctl   string
	}{
		{enabled: true, wantChanged: true, wantVsctl: "\"true\"\n"},
		{enabled: true, wantChanged: false, wantVsctl: "\"true\"\n"},
		{enabled: false, wantChanged: true, wantVsctl: ""},
		{enabled: false, wantChanged: false, wantVsctl: ""},
	} {
		changed, err := c.SetFlowRestoreWait(ctx, tc.enabled)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(changed).To(Equal(tc.wantChanged), "enabled=%t", tc.enabled)
		out, _ := o.Vsctl("--if-exists", "get", "open_vswitch", ".", "other_config:flow-restore-wait")
		g.Expect(strings.TrimSpace(out)).To(Equal(strings.TrimSpace(tc.wantVsctl)))
	}
}

func TestReconnectAfterOVSDBRestart(t *testing.T) {
	g := NewWithT(t)
	o := ovstest.Start(t, ovstest.Options{})
	c := connect(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err := c.EnsureBridge(ctx, ovsdb.BridgeSpec{Name: "br-int", DatapathType: ovsdb.DatapathNetdev})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.RestartOVSDB()).To(Succeed())

	// Transactions block until the client has reconnected and re-monitored.
	changed, err := c.EnsurePort(ctx, "br-int", ovsdb.PortSpec{Name: "gw0", Type: ovsdb.PortTypeInternal, OFPortRequest: 3})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	g.Expect(c.Connected()).To(BeTrue())
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	ofport, err := c.WaitOFPort(wctx, "gw0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ofport).To(Equal(int32(3)))
	// The cache was rebuilt: a repeated Ensure is still a no-op.
	before := c.MutatingOperations()
	changed, err = c.EnsureBridge(ctx, ovsdb.BridgeSpec{Name: "br-int", DatapathType: ovsdb.DatapathNetdev})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeFalse())
	g.Expect(c.MutatingOperations()).To(Equal(before))
}

// TestWaitOFPortWakesOnMonitor: the monitor's Interface updates wake WaitOFPort's waiters (it does not
// depend on its fallback poll), and a change to another table does not.
func TestWaitOFPortWakesOnMonitor(t *testing.T) {
	g := NewWithT(t)
	o, c, ctx := withBridge(t)
	_, err := c.WaitOFPort(ctx, "br-int")
	g.Expect(err).NotTo(HaveOccurred())
	// ovs-vswitchd may still be filling in br-int's Interface row: wait until it has applied the
	// configuration and the row has been left alone for a while.
	g.Expect(c.WaitApplied(ctx)).To(Succeed())
	g.Eventually(func() bool {
		select {
		case <-c.InterfaceChanged():
			return false
		case <-time.After(100 * time.Millisecond):
			return true
		}
	}).WithTimeout(5*time.Second).Should(BeTrue(), "the Interface table settles")

	changed := c.InterfaceChanged()
	o.MustVsctl(t, "set", "bridge", "br-int", "external_ids:probe=1")
	g.Consistently(changed).WithTimeout(200 * time.Millisecond).ShouldNot(BeClosed())

	o.MustVsctl(t, "add-port", "br-int", "probe0", "--", "set", "interface", "probe0", "type=internal")
	g.Eventually(changed).WithTimeout(5 * time.Second).Should(BeClosed())
	ofport, err := c.WaitOFPort(ctx, "probe0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ofport).To(BeNumerically(">", 0))
}

// TestWaitAppliedWaitsForVswitchd checks that WaitApplied returns once ovs-vswitchd has applied
// what was committed before it (a deleted port is gone from the datapath), and that it waits, up
// to its context, while ovs-vswitchd is not running.
func TestWaitAppliedWaitsForVswitchd(t *testing.T) {
	g := NewWithT(t)
	o, c, ctx := withBridge(t)
	datapathPorts := func() string {
		out, err := o.Appctl("dpif/show")
		g.Expect(err).NotTo(HaveOccurred())
		return out
	}
	for range 3 {
		_, err := c.EnsurePort(ctx, "br-int", ovsdb.PortSpec{Name: "pod-w", Type: ovsdb.PortTypeInternal})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c.WaitApplied(ctx)).To(Succeed())
		g.Expect(datapathPorts()).To(ContainSubstring("pod-w"), "applied: the port is in the datapath")
		_, err = c.DeletePort(ctx, "br-int", "pod-w")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c.WaitApplied(ctx)).To(Succeed())
		g.Expect(datapathPorts()).NotTo(ContainSubstring("pod-w"), "applied: the port is gone from the datapath")
	}

	g.Expect(o.KillVswitchd()).To(Succeed())
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	g.Expect(c.WaitApplied(wctx)).To(MatchError(context.DeadlineExceeded), "nobody applies the configuration")
	g.Expect(time.Since(start)).To(BeNumerically(">=", 300*time.Millisecond))
	g.Expect(o.StartVswitchd()).To(Succeed())
	g.Expect(c.WaitApplied(ctx)).To(Succeed(), "a restarted ovs-vswitchd applies the configuration")
}

// TestTransactionWakesOnItsUpdate checks that the monitor wakes a transaction waiting for its own
// update on an insert and on a delete, rather than leaving it to its next poll.
func TestTransactionWakesOnItsUpdate(t *testing.T) {
	g := NewWithT(t)
	_, c, ctx := withBridge(t)
	for _, change := range []struct {
		name string
		do   func() error
	}{
		{"add", func() error {
			_, err := c.EnsurePort(ctx, "br-int", ovsdb.PortSpec{Name: "wake", Type: ovsdb.PortTypeInternal})
			return err
		}},
		{"delete", func() error { _, err := c.DeletePort(ctx, "br-int", "wake"); return err }},
	} {
		woken := c.AnyTableChanged()
		g.Expect(change.do()).To(Succeed(), change.name)
		// libovsdb runs event handlers after it updates the cache, on their own goroutine.
		g.Eventually(woken).Should(BeClosed(), "the %s woke the waiters", change.name)
	}
}

// TestConcurrentPortChangesShareATransaction checks the group commit of port changes: changes that
// queue while a transaction is in flight go in the next one, together; when that transaction
// fails, each change is transacted on its own, so that only the bad one fails.
func TestConcurrentPortChangesShareATransaction(t *testing.T) {
	g := NewWithT(t)
	_, c, ctx := withBridge(t)
	run := func(specs []ovsdb.PortSpec) []error {
		release := c.HoldPortCommits()
		errs := make([]error, len(specs))
		var wg sync.WaitGroup
		for i, spec := range specs {
			wg.Go(func() { _, errs[i] = c.EnsurePort(ctx, "br-int", spec) })
		}
		g.Eventually(c.QueuedPortChanges).Should(Equal(len(specs)))
		release()
		wg.Wait()
		return errs
	}
	ports := func(prefix string, n int) []ovsdb.PortSpec {
		var specs []ovsdb.PortSpec
		for i := range n {
			specs = append(specs, ovsdb.PortSpec{Name: fmt.Sprintf("%s%d", prefix, i), Type: ovsdb.PortTypeInternal})
		}
		return specs
	}
	owned := func() []string {
		infos, err := c.OwnedPorts(ctx, "br-int")
		g.Expect(err).NotTo(HaveOccurred())
		var names []string
		for _, p := range infos {
			names = append(names, p.Name)
		}
		return names
	}

	before := c.Transactions()
	for _, err := range run(ports("grp", 8)) {
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(c.Transactions()-before).To(Equal(uint64(1)), "8 queued port changes, one transaction")
	g.Expect(owned()).To(ContainElements("grp0", "grp1", "grp2", "grp3", "grp4", "grp5", "grp6", "grp7"))

	// ofport_request is at most 65279: ovsdb-server refuses the whole transaction.
	specs := ports("mix", 4)
	specs[2].OFPortRequest = 70000
	errs := run(specs)
	for i, err := range errs {
		if i == 2 {
			g.Expect(err).To(MatchError(ContainSubstring(`ensuring port "mix2"`)))
			continue
		}
		g.Expect(err).NotTo(HaveOccurred(), "port mix%d does not fail with mix2", i)
	}
	g.Expect(owned()).To(ContainElements("mix0", "mix1", "mix3"))
	g.Expect(owned()).NotTo(ContainElement("mix2"))
}

// TestWatchRowsIgnoresPortsOfOthers checks that WatchRows reports a change of a watched bridge's
// own settings and the deletion of a watched port, but not a port of someone else (a Pod) added
// to or removed from the bridge, which changes only the bridge row's ports: every Pod's ADD and
// DEL would otherwise wake the node network.
func TestWatchRowsIgnoresPortsOfOthers(t *testing.T) {
	g := NewWithT(t)
	o, c, ctx := withBridge(t)
	o.MustVsctl(t, "add-port", "br-int", "gw0", "--", "set", "interface", "gw0", "type=internal")
	g.Expect(c.WaitApplied(ctx)).To(Succeed())
	changed := c.WatchRows(ctx, func() []string { return []string{"br-int", "gw0"} })
	// fence waits until the client has handled every update before it: updates are handled in order.
	fence := func(n int) {
		t.Helper()
		seen := c.OpenvSwitchChanged()
		o.MustVsctl(t, "set", "Open_vSwitch", ".", fmt.Sprintf("external_ids:fence=%d", n))
		g.Eventually(seen).WithTimeout(5 * time.Second).Should(BeClosed())
	}
	drain := func() {
		select {
		case <-changed:
		default:
		}
	}
	fence(0)
	drain()

	o.MustVsctl(t, "add-port", "br-int", "pod0", "--", "set", "interface", "pod0", "type=internal")
	fence(1)
	g.Expect(changed).NotTo(Receive(), "a Pod's port added to the bridge")
	o.MustVsctl(t, "del-port", "br-int", "pod0")
	fence(2)
	g.Expect(changed).NotTo(Receive(), "a Pod's port removed from the bridge")

	o.MustVsctl(t, "set", "bridge", "br-int", "other_config:hwaddr=02:00:00:00:00:01")
	g.Eventually(changed).WithTimeout(5*time.Second).Should(Receive(), "the bridge's own settings changed")
	fence(3)
	drain()
	o.MustVsctl(t, "del-port", "br-int", "gw0")
	g.Eventually(changed).WithTimeout(5*time.Second).Should(Receive(), "a watched port deleted")
}

// TestBridgeFlowLimits caps a table's flows: the Flow_Table row is created with the bridge, a table
// added later and a changed limit are applied to the existing bridge, and ovs-vswitchd refuses a flow
// beyond the limit.
func TestBridgeFlowLimits(t *testing.T) {
	g := NewWithT(t)
	o, c, ctx := withBridge(t)
	spec := ovsdb.BridgeSpec{Name: "br-int", DatapathType: ovsdb.DatapathNetdev, FlowLimits: map[int]int{3: 2}}
	changed, err := c.EnsureBridge(ctx, spec)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	changed, err = c.EnsureBridge(ctx, spec)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeFalse(), "nothing to change the second time")
	limit := func() string {
		out, err := o.Vsctl("--columns=flow_limit", "list", "Flow_Table")
		g.Expect(err).NotTo(HaveOccurred())
		return out
	}
	g.Expect(limit()).To(MatchRegexp(`flow_limit\s+: 2\b`))
	g.Eventually(func() error {
		_, err := o.Ofctl("add-flow", "br-int", "table=3,priority=1,actions=drop")
		return err
	}).WithTimeout(10*time.Second).Should(Succeed(), "ovs-vswitchd has the bridge")
	o.MustOfctl(t, "add-flow", "br-int", "table=3,priority=2,actions=drop")
	_, err = o.Ofctl("add-flow", "br-int", "table=3,priority=3,actions=drop")
	g.Expect(err).To(MatchError(ContainSubstring("OFPFMFC_TABLE_FULL")), "a third flow is refused")

	spec.FlowLimits = map[int]int{3: 5, 4: 7}
	changed, err = c.EnsureBridge(ctx, spec)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	g.Expect(limit()).To(And(MatchRegexp(`flow_limit\s+: 5\b`), MatchRegexp(`flow_limit\s+: 7\b`)))
	g.Expect(o.Ofctl("add-flow", "br-int", "table=3,priority=3,actions=drop")).Error().NotTo(HaveOccurred())
}
