package openflow_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
	"github.com/winnet-io/winnet/internal/ovs/ovstest"
	"github.com/winnet-io/winnet/test/hostcmd"
)

const bridge = "br-int"

type env struct {
	ovs *ovstest.OVS
	db  *ovsdb.Client
	br  *openflow.Bridge
}

// setup connects a bridge without the flow monitor: the tests of Verify and Invalidate delete flows
// behind its back and need them to stay deleted (see setupWithMonitor).
func setup(t *testing.T) *env {
	t.Helper()
	return setupWith(t, openflow.Options{NoFlowMonitor: true})
}

// setupWithMonitor connects a bridge that puts back what others delete, as the agent's does.
func setupWithMonitor(t *testing.T) *env {
	t.Helper()
	return setupWith(t, openflow.Options{})
}

func setupWith(t *testing.T, opts openflow.Options) *env {
	t.Helper()
	o := ovstest.Start(t, ovstest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db, err := ovsdb.New(ctx, ovsdb.Options{Address: o.DBSocket()})
	if err != nil {
		t.Fatalf("connecting to OVSDB: %v", err)
	}
	t.Cleanup(db.Close)
	if _, err := db.EnsureBridge(ctx, ovsdb.BridgeSpec{Name: bridge, DatapathType: ovsdb.DatapathNetdev, DatapathID: 0x1001}); err != nil {
		t.Fatalf("creating bridge: %v", err)
	}
	opts.Bridge, opts.Address, opts.Rounds = bridge, o.MgmtSocket(bridge), db
	br, err := openflow.Connect(ctx, opts)
	if err != nil {
		t.Fatalf("connecting OpenFlow: %v", err)
	}
	t.Cleanup(br.Close)
	return &env{ovs: o, db: db, br: br}
}

func mac(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func u8(v uint8) *uint8 { return &v }

var (
	vmac   = mac("aa:bb:cc:dd:ee:ff")
	podMAC = mac("0a:58:0a:00:00:05")
	nodeIP = netip.MustParseAddr("192.168.1.10")
)

// featureFlows covers every match and action the pipeline needs.
func featureFlows() []openflow.Flow {
	return []openflow.Flow{
		{Table: 0, Priority: 200, Cookie: 1, Match: []openflow.MatchField{openflow.InPort(1)},
			Actions: []openflow.Action{openflow.SetReg(0, 0, 15, 0), openflow.GotoTable(10)}},
		{Table: 0, Priority: 190, Cookie: 2, Match: []openflow.MatchField{openflow.InPort(5), openflow.TunID(4096), openflow.TunDst(nodeIP)},
			Actions: []openflow.Action{openflow.SetReg(0, 0, 15, 1), openflow.GotoTable(10)}},
		{Table: 0, Priority: 180, Cookie: 3, Match: []openflow.MatchField{openflow.EthSrc(podMAC), openflow.InPort(7), openflow.Reg(0, 0, 15, 2)},
			Actions: []openflow.Action{openflow.SetReg(0, 17, 17, 1), openflow.GotoTable(10)}},
		{Table: 0, Priority: 0, Actions: []openflow.Action{openflow.Drop()}},
		{Table: 10, Priority: 200, Cookie: 4, Match: []openflow.MatchField{openflow.IPv4(), openflow.NwSrc(netip.MustParsePrefix("10.0.0.0/24")), openflow.NwDst(netip.MustParsePrefix("10.1.0.5/32"))},
			Actions: []openflow.Action{openflow.Output(3)}},
		{Table: 20, Priority: 190, Cookie: 5, Match: []openflow.MatchField{openflow.ARP(), openflow.ARPTPA(netip.MustParseAddr("10.0.1.1")), openflow.ARPOp(1)},
			Actions: []openflow.Action{
				openflow.Move(openflow.FieldEthSrc, openflow.FieldEthDst), openflow.SetEthSrc(vmac), openflow.SetARPOp(2),
				openflow.Move(openflow.FieldARPSha, openflow.FieldARPTha), openflow.SetARPSha(vmac),
				openflow.Move(openflow.FieldARPSpa, openflow.FieldARPTpa), openflow.SetARPSpa(netip.MustParseAddr("10.0.1.1")),
				openflow.Output(openflow.PortInPort)}},
		{Table: 30, Priority: 200, Match: []openflow.MatchField{openflow.IPv4()},
			Actions: []openflow.Action{openflow.CT(openflow.CTAction{Table: u8(31), Zone: 65520, NAT: true})}},
		{Table: 31, Priority: 200, Match: []openflow.MatchField{openflow.IPv4(), openflow.CTState(openflow.CTTrk|openflow.CTEst, 0), openflow.CTMark(0x40, 0xff)},
			Actions: []openflow.Action{openflow.SetEthDst(vmac), openflow.GotoTable(40)}},
		{Table: 31, Priority: 190, Match: []openflow.MatchField{openflow.IPv4(), openflow.CTState(openflow.CTTrk, openflow.CTNew), openflow.CTZone(65520)},
			Actions: []openflow.Action{openflow.Drop()}},
		{Table: 70, Priority: 200, Cookie: 6, Match: []openflow.MatchField{openflow.IPv4(), openflow.NwDst(netip.MustParsePrefix("10.2.0.0/16"))},
			Actions: []openflow.Action{openflow.SetEthDst(vmac), openflow.SetTunDst(netip.MustParseAddr("192.168.1.20")), openflow.SetTunID(0x1000),
				openflow.SetReg(1, 0, 7, 5), openflow.GotoTable(80)}},
		{Table: 80, Priority: 200, Match: []openflow.MatchField{openflow.EthDst(podMAC)},
			Actions: []openflow.Action{openflow.SetReg(1, 0, 31, 5), openflow.SetReg(0, 16, 16, 1), openflow.GotoTable(105)}},
		{Table: 105, Priority: 200, Match: []openflow.MatchField{openflow.IPv4(), openflow.CTState(openflow.CTNew|openflow.CTTrk, 0), openflow.Reg(0, 17, 17, 1)},
			Actions: []openflow.Action{openflow.CT(openflow.CTAction{Commit: true, Table: u8(110), Zone: 65520, SNAT: nodeIP,
				Exec: []openflow.Action{openflow.SetCTMark(0x40, 0)}})}},
		{Table: 105, Priority: 190, Match: []openflow.MatchField{openflow.IPv4(), openflow.CTState(openflow.CTNew|openflow.CTTrk, 0)},
			Actions: []openflow.Action{openflow.CT(openflow.CTAction{Commit: true, Zone: 65520, Exec: []openflow.Action{openflow.SetCTMark(0x40, 0xff)}})}},
		{Table: 110, Priority: 200, Match: []openflow.MatchField{openflow.Reg(3, 0, 31, 0x1a)}, Actions: []openflow.Action{openflow.OutputReg(3, 0, 31)}},
		{Table: 110, Priority: 100, Match: []openflow.MatchField{openflow.IPv4(), openflow.NwDst(netip.MustParsePrefix("10.96.0.0/12"))},
			Actions: []openflow.Action{openflow.ToGroup(1)}},
		{Table: 110, Priority: 0, Actions: []openflow.Action{openflow.Normal()}},
	}
}

func rendered(flows []openflow.Flow) []string {
	out := make([]string, 0, len(flows))
	for _, f := range flows {
		out = append(out, f.String())
	}
	slices.Sort(out)
	return out
}

func dump(t *testing.T, o *ovstest.OVS) []string {
	t.Helper()
	lines, err := o.DumpFlows(bridge)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return lines
}

func TestSyncRendersLikeOVS(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	group := openflow.Group{ID: 1, Buckets: []openflow.Bucket{
		{Weight: 100, Actions: []openflow.Action{openflow.Output(1)}},
		{Weight: 50, Actions: []openflow.Action{openflow.SetEthDst(podMAC), openflow.Output(2)}},
	}}
	res, err := e.br.SyncGroups(ctx, []openflow.Group{group})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Added).To(Equal(1))
	groups, err := e.ovs.DumpGroups(bridge)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(groups).To(Equal([]string{group.String()}))

	flows := featureFlows()
	res, err = e.br.Sync(ctx, 3, flows)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(openflow.SyncResult{Added: len(flows)}))
	installed := e.br.Installed(3)
	g.Expect(dump(t, e.ovs)).To(Equal(rendered(installed)))
	for _, f := range installed {
		g.Expect(openflow.CookieCategory(f.Cookie)).To(Equal(uint8(3)))
		g.Expect(openflow.CookieRound(f.Cookie)).To(Equal(e.br.Round()))
	}

	// Same desired set: nothing is sent.
	res, err = e.br.Sync(ctx, 3, flows)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Mods()).To(Equal(0))

	// One changed, one removed: exactly two flow_mods.
	changed := slices.Clone(flows)
	changed[4].Actions = []openflow.Action{openflow.Output(4)}
	changed = slices.Delete(changed, 0, 1)
	res, err = e.br.Sync(ctx, 3, changed)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(openflow.SyncResult{Modified: 1, Deleted: 1}))
	g.Expect(dump(t, e.ovs)).To(Equal(rendered(e.br.Installed(3))))

	// Another category does not disturb this one.
	other := []openflow.Flow{{Table: 200, Priority: 1, Cookie: 9, Actions: []openflow.Action{openflow.Drop()}}}
	_, err = e.br.Sync(ctx, 4, other)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dump(t, e.ovs)).To(Equal(rendered(append(e.br.Installed(3), e.br.Installed(4)...))))

	diffs, err := e.br.Verify(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(diffs).To(BeEmpty())

	// Drift made behind our back is reported.
	e.ovs.MustOfctl(t, "--strict", "del-flows", bridge, "table=110,priority=0")
	stray := openflow.MakeCookie(e.br.Round(), 3, 77)
	e.ovs.MustOfctl(t, "add-flow", bridge, fmt.Sprintf("cookie=%#x,table=110,priority=5,ip actions=drop", stray))
	diffs, err = e.br.Verify(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(diffs).To(ConsistOf(
		openflow.Difference{Kind: openflow.Missing, Flow: installedText(e.br.Installed(3), 110, 0)},
		openflow.Difference{Kind: openflow.Unexpected, Flow: fmt.Sprintf("cookie=%#x, table=110, priority=5", stray)},
	))
}

func installedText(flows []openflow.Flow, table uint8, prio uint16) string {
	for _, f := range flows {
		if f.Table == table && f.Priority == prio {
			return f.String()
		}
	}
	return ""
}

func TestBundleWithInvalidFlowLeavesTableUnchanged(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	group := openflow.Group{ID: 1, Buckets: []openflow.Bucket{{Weight: 100, Actions: []openflow.Action{openflow.Output(1)}}}}
	_, err := e.br.SyncGroups(ctx, []openflow.Group{group})
	g.Expect(err).NotTo(HaveOccurred())
	flows := featureFlows()
	_, err = e.br.Sync(ctx, 1, flows)
	g.Expect(err).NotTo(HaveOccurred())
	before := dump(t, e.ovs)

	for _, tc := range []struct {
		name    string
		invalid openflow.Flow
	}{
		// nw_src without eth_type=ip: OVS rejects the add (bad prerequisite).
		{"missing prerequisite", openflow.Flow{Table: 50, Priority: 10, Match: []openflow.MatchField{openflow.NwSrc(netip.MustParsePrefix("10.9.0.0/16"))},
			Actions: []openflow.Action{openflow.Output(1)}}},
		// A group that does not exist: OVS fails the commit.
		{"missing group", openflow.Flow{Table: 60, Priority: 10, Actions: []openflow.Action{openflow.ToGroup(99)}}},
		// goto_table backwards: OVS rejects the instruction.
		{"backwards goto", openflow.Flow{Table: 60, Priority: 10, Actions: []openflow.Action{openflow.GotoTable(5)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			next := slices.Clone(flows)
			next[4].Actions = []openflow.Action{openflow.Output(9)} // a valid modification
			next = append(next[1:], tc.invalid)                     // a valid delete, plus the invalid add
			_, err := e.br.Sync(ctx, 1, next)
			// The error names the flow the switch refused.
			g.Expect(err).To(MatchError(ContainSubstring(tc.invalid.String())))
			g.Expect(dump(t, e.ovs)).To(Equal(before))
			// The cache did not move either: re-syncing the old set sends nothing.
			res, err := e.br.Sync(ctx, 1, flows)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.Mods()).To(Equal(0))
		})
	}
}

func TestReplayAfterVswitchdKill(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	group := openflow.Group{ID: 1, Buckets: []openflow.Bucket{{Weight: 100, Actions: []openflow.Action{openflow.Output(1)}}}}
	_, err := e.br.SyncGroups(ctx, []openflow.Group{group})
	g.Expect(err).NotTo(HaveOccurred())
	flows := featureFlows()
	_, err = e.br.Sync(ctx, 2, flows)
	g.Expect(err).NotTo(HaveOccurred())
	oldRound := e.br.Round()
	g.Expect(e.br.PreviousRound()).To(BeZero(), "a new bridge records no round before the first connection")

	g.Expect(e.ovs.KillVswitchd()).To(Succeed())
	start := time.Now()
	g.Expect(e.ovs.StartVswitchd()).To(Succeed())

	var got []string
	g.Eventually(func() []string {
		got, _ = e.ovs.DumpFlows(bridge) // refused until vswitchd listens
		return got
	}).WithTimeout(2 * time.Second).WithPolling(20 * time.Millisecond).Should(HaveLen(len(flows)))
	t.Logf("flows back %v after restart", time.Since(start))
	newRound := e.br.Round()
	g.Expect(newRound).To(Equal(oldRound + 1))
	g.Expect(got).To(Equal(rendered(e.br.Installed(2))))
	// Equal to the new round's rendering line by line: no duplicate, no stale round.
	for _, f := range e.br.Installed(2) {
		g.Expect(openflow.CookieRound(f.Cookie)).To(Equal(newRound))
	}
	groups, err := e.ovs.DumpGroups(bridge)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(groups).To(Equal([]string{group.String()}))
	ids := e.ovs.MustVsctl(t, "get", "bridge", bridge, "external_ids:"+openflow.RoundExternalID)
	g.Expect(strings.Trim(strings.TrimSpace(ids), `"`)).To(Equal(strconv.Itoa(int(newRound))))

	// An agent restart (new connection, same vswitchd) takes the next round;
	// after its Sync, deleting the previous round leaves exactly one copy.
	e.br.Close()
	br2, err := openflow.Connect(ctx, openflow.Options{Bridge: bridge, Address: e.ovs.MgmtSocket(bridge), Rounds: e.db})
	g.Expect(err).NotTo(HaveOccurred())
	defer br2.Close()
	g.Expect(br2.Round()).To(Equal(newRound + 1))
	g.Expect(br2.PreviousRound()).To(Equal(newRound), "the previous connection's round after its replay")
	_, err = br2.Sync(ctx, 2, flows[1:])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(br2.DeleteRound(ctx, br2.PreviousRound())).To(Succeed())
	g.Expect(dump(t, e.ovs)).To(Equal(rendered(br2.Installed(2))))
}

// TestSyncObjectTouchesOneObject changes and removes the flows of one object of a category without
// a pass over the others, and Invalidate makes a deleted flow come back.
func TestSyncObjectTouchesOneObject(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx := context.Background()
	route := func(object uint64, dst string, port uint32) openflow.Flow {
		return openflow.Flow{Table: 70, Priority: 200, Cookie: object,
			Match:   []openflow.MatchField{openflow.IPv4(), openflow.NwDst(netip.MustParsePrefix(dst))},
			Actions: []openflow.Action{openflow.Output(port)}}
	}
	all := []openflow.Flow{route(1, "10.1.0.0/24", 1), route(2, "10.2.0.0/24", 2), route(3, "10.3.0.0/24", 3)}
	res, err := e.br.Sync(ctx, 6, all)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Added).To(Equal(3))

	// Object 2 changes its action and gains a flow: two flow_mods; the others stay.
	res, err = e.br.SyncObject(ctx, 6, 2, []openflow.Flow{route(2, "10.2.0.0/24", 9), route(2, "10.2.1.0/24", 9)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(openflow.SyncResult{Added: 1, Modified: 1}))
	g.Expect(dump(t, e.ovs)).To(Equal(rendered(e.br.Installed(6))))
	g.Expect(e.br.Installed(6)).To(HaveLen(4))

	// Removing object 3 deletes its flow only.
	res, err = e.br.SyncObject(ctx, 6, 3, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(openflow.SyncResult{Deleted: 1}))
	g.Expect(strings.Join(dump(t, e.ovs), "\n")).NotTo(ContainSubstring("10.3.0.0/24"))
	g.Expect(dump(t, e.ovs)).To(HaveLen(3))

	// A flow of another object is refused.
	_, err = e.br.SyncObject(ctx, 6, 1, []openflow.Flow{route(2, "10.9.0.0/24", 1)})
	g.Expect(err).To(MatchError(ContainSubstring("belongs to object")))

	// A whole-category Sync still sees what SyncObject installed: nothing to do.
	res, err = e.br.Sync(ctx, 6, []openflow.Flow{route(1, "10.1.0.0/24", 1), route(2, "10.2.0.0/24", 9), route(2, "10.2.1.0/24", 9)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Mods()).To(Equal(0))

	// Several objects at once, in one bundle: object 1 changes, object 2 goes, object 4 comes.
	bundles := e.br.Bundles()
	res, err = e.br.SyncObjects(ctx, 6, map[uint64][]openflow.Flow{
		1: {route(1, "10.1.0.0/24", 5)}, 2: nil, 4: {route(4, "10.4.0.0/24", 4)},
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(openflow.SyncResult{Added: 1, Modified: 1, Deleted: 2}))
	g.Expect(e.br.Bundles()).To(Equal(bundles+1), "one bundle for every object")
	g.Expect(dump(t, e.ovs)).To(Equal(rendered(e.br.Installed(6))))
	g.Expect(e.br.Installed(6)).To(HaveLen(2))
	res, err = e.br.SyncObjects(ctx, 6, map[uint64][]openflow.Flow{1: {route(1, "10.1.0.0/24", 1)}, 2: {route(2, "10.2.0.0/24", 9), route(2, "10.2.1.0/24", 9)}, 4: nil})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(openflow.SyncResult{Added: 2, Modified: 1, Deleted: 1}))

	// Deleted behind our back, restored after Invalidate.
	e.ovs.MustOfctl(t, "-O", "OpenFlow15", "del-flows", bridge, "table=70,ip,nw_dst=10.1.0.0/24")
	e.br.Invalidate()
	res, err = e.br.Sync(ctx, 6, []openflow.Flow{route(1, "10.1.0.0/24", 1), route(2, "10.2.0.0/24", 9), route(2, "10.2.1.0/24", 9)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Mods()).To(Equal(3))
	g.Expect(dump(t, e.ovs)).To(Equal(rendered(e.br.Installed(6))))
}

// TestIncrementalSyncSendsOnlyChanges watches the switch's flow table with an OpenFlow flow
// monitor (which reports every flow_mod that reaches the table, an identical re-add included):
// changing, adding and removing one flow each among 5,000 costs exactly three flow_mods. The bridge
// runs its own flow monitor, as in the agent: it hears its own deletion and must not put it back.
func TestIncrementalSyncSendsOnlyChanges(t *testing.T) {
	g := NewWithT(t)
	e := setupWithMonitor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	route := func(i int, port uint32) openflow.Flow {
		dst := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
		return openflow.Flow{Table: 70, Priority: 200, Cookie: uint64(i + 1),
			Match:   []openflow.MatchField{openflow.IPv4(), openflow.NwDst(netip.PrefixFrom(dst, 32))},
			Actions: []openflow.Action{openflow.SetEthDst(vmac), openflow.SetTunDst(nodeIP), openflow.Output(port)}}
	}
	const n = 5000
	flows := make([]openflow.Flow, n)
	for i := range flows {
		flows[i] = route(i, 1)
	}
	res, err := e.br.Sync(ctx, 5, flows)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Added).To(Equal(n))

	events := monitorFlows(t, e)
	changed := slices.Clone(flows)
	changed[10] = route(10, 2)               // modified
	changed = slices.Delete(changed, 20, 21) // deleted
	changed = append(changed, route(n, 1))   // added
	res, err = e.br.Sync(ctx, 5, changed)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(openflow.SyncResult{Added: 1, Modified: 1, Deleted: 1}))
	got := events()
	g.Expect(got).To(HaveLen(3), strings.Join(got, "\n"))
	g.Expect(strings.Join(got, "\n")).To(And(ContainSubstring("nw_dst=10.1.0.10 "), ContainSubstring("nw_dst=10.1.0.20 "), ContainSubstring("nw_dst=10.1.19.136 ")))
	installed, err := e.ovs.DumpFlows(bridge, "table=70") // without the markers
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(installed).To(Equal(rendered(e.br.Installed(5))))
}

// monitorFlows starts `ovs-ofctl monitor` on the bridge and returns a function that returns the
// flow table events since the previous call (or since the start), each bracketed by adding a
// marker flow and waiting for its event: events arrive in order.
func monitorFlows(t *testing.T, e *env) func() []string {
	t.Helper()
	cmd := hostcmd.Command("ovs-ofctl", "-O", "OpenFlow15", "monitor", "unix:"+e.ovs.MgmtSocket(bridge), "watch:!initial")
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+e.ovs.Dir) // for its control socket
	// ovs-ofctl monitor prints the events on stderr.
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatalf("%v", err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		t.Fatalf("starting ovs-ofctl monitor: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = out.Close()
	})
	var output []string // everything it printed, for failure messages
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(l, "event=") {
				lines <- l
			} else {
				lines <- "# " + l
			}
		}
	}()
	markers := 0
	// mark adds a marker flow and returns the events before it, or false if its event did not
	// come within the timeout.
	mark := func(timeout time.Duration) ([]string, bool) {
		markers++
		marker := fmt.Sprintf("cookie=%#x", markers) // the monitor prints no priority
		e.ovs.MustOfctl(t, "add-flow", bridge, "table=250,priority=1,"+marker+",actions=drop")
		var events []string
		deadline := time.After(timeout)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("ovs-ofctl monitor exited: %s", strings.Join(output, "\n"))
				}
				output = append(output, l)
				if strings.HasPrefix(l, "# ") {
					continue
				}
				if fields := strings.Fields(l); slices.Contains(fields, "table=250") {
					if slices.Contains(fields, marker) {
						return events, true
					}
					continue
				}
				events = append(events, l)
			case <-deadline:
				return events, false
			}
		}
	}
	// The monitor is running once a marker's event comes back.
	for start := time.Now(); ; {
		if _, ok := mark(200 * time.Millisecond); ok {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("ovs-ofctl monitor reported no flow change: %s", strings.Join(output, "\n"))
		}
	}
	return func() []string {
		events, ok := mark(10 * time.Second)
		if !ok {
			t.Fatalf("no event for marker flow %d; events so far: %v", markers, events)
		}
		return events
	}
}

// TestConcurrentSyncObjectsShareABundle queues SyncObjects of many objects behind a bundle in
// flight: the next bundle carries them all, and a flow the switch refuses fails only its own call.
// objectRoute is object's flow in the routes table: 10.<object>.0.0/24 to port object.
func objectRoute(object uint64) openflow.Flow {
	return openflow.Flow{Table: 70, Priority: 200, Cookie: object,
		Match:   []openflow.MatchField{openflow.IPv4(), openflow.NwDst(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(object), 0, 0}), 24))},
		Actions: []openflow.Action{openflow.Output(uint32(object))}}
}

// invalidFlow is a flow of object that OVS refuses (nw_src without eth_type=ip: OFPBMC_BAD_PREREQ).
func invalidFlow(object uint64) openflow.Flow {
	return openflow.Flow{Table: 70, Priority: 100, Cookie: object, Match: []openflow.MatchField{openflow.NwSrc(netip.MustParsePrefix("10.9.0.0/16"))},
		Actions: []openflow.Action{openflow.Output(1)}}
}

func TestConcurrentSyncObjectsShareABundle(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx := context.Background()
	// syncAll runs a SyncObject per object while the bridge is held, waits until all are queued,
	// releases the bridge and returns each call's result.
	syncAll := func(objects []uint64, flows func(uint64) []openflow.Flow) map[uint64]error {
		release := e.br.Hold()
		errs := make(chan struct {
			object uint64
			err    error
		}, len(objects))
		for _, o := range objects {
			go func() {
				_, err := e.br.SyncObject(ctx, 6, o, flows(o))
				errs <- struct {
					object uint64
					err    error
				}{o, err}
			}()
		}
		g.Eventually(e.br.Queued).Should(Equal(len(objects)))
		release()
		got := map[uint64]error{}
		for range objects {
			r := <-errs
			got[r.object] = r.err
		}
		return got
	}
	var objects []uint64
	for o := uint64(1); o <= 20; o++ {
		objects = append(objects, o)
	}

	before := e.br.Bundles()
	for o, err := range syncAll(objects, func(o uint64) []openflow.Flow { return []openflow.Flow{objectRoute(o)} }) {
		g.Expect(err).NotTo(HaveOccurred(), "object %d", o)
	}
	g.Expect(e.br.Bundles()-before).To(Equal(uint64(1)), "twenty objects, one bundle")
	g.Expect(e.br.Installed(6)).To(HaveLen(20))
	g.Expect(dump(t, e.ovs)).To(Equal(rendered(e.br.Installed(6))))

	// Objects 1-10 are removed and object 11 gets a flow OVS refuses (nw_src without eth_type=ip):
	// the shared bundle fails, each call is sent again on its own, and only object 11's fails.
	bad := invalidFlow(11)
	results := syncAll(objects[:11], func(o uint64) []openflow.Flow {
		if o == 11 {
			return []openflow.Flow{objectRoute(11), bad}
		}
		return nil
	})
	for o, err := range results {
		if o == 11 {
			g.Expect(err).To(MatchError(And(ContainSubstring("nw_src=10.9.0.0/16"), ContainSubstring("OFPBMC_BAD_PREREQ"))))
			continue
		}
		g.Expect(err).NotTo(HaveOccurred(), "object %d", o)
	}
	g.Expect(e.br.Installed(6)).To(HaveLen(10), "objects 11-20 keep their flows")
	g.Expect(dump(t, e.ovs)).To(Equal(rendered(e.br.Installed(6))))
}

// TestWholeCategorySyncJoinsTheBundle: a whole-category Sync of another category that queues among
// objects' SyncObjects shares their bundle (a flow owner's periodic Sync must not split a burst of
// Pod changes in two); one of the objects' own category waits for the next bundle, and the flows
// are what each call asked for either way.
func TestWholeCategorySyncJoinsTheBundle(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx := context.Background()
	other := []openflow.Flow{{Table: 71, Priority: 100, Cookie: 1, Match: []openflow.MatchField{openflow.InPort(7)}, Actions: []openflow.Action{openflow.Output(8)}}}
	// syncAround queues SyncObjects of category 6 for objects, with a whole-category Sync of
	// category (its flows: whole) queued after the first half, then releases the bridge.
	syncAround := func(objects []uint64, category uint8, whole []openflow.Flow) {
		release := e.br.Hold()
		errs := make(chan error, len(objects)+1)
		for i, o := range objects {
			if i == len(objects)/2 {
				g.Eventually(e.br.Queued).Should(Equal(i))
				go func() {
					_, err := e.br.Sync(ctx, category, whole)
					errs <- err
				}()
				g.Eventually(e.br.Queued).Should(Equal(i + 1))
			}
			go func() {
				_, err := e.br.SyncObject(ctx, 6, o, []openflow.Flow{objectRoute(o)})
				errs <- err
			}()
		}
		g.Eventually(e.br.Queued).Should(Equal(len(objects) + 1))
		release()
		for range len(objects) + 1 {
			g.Expect(<-errs).NotTo(HaveOccurred())
		}
	}

	before := e.br.Bundles()
	syncAround([]uint64{1, 2, 3, 4, 5, 6, 7, 8}, 7, other)
	g.Expect(e.br.Bundles()-before).To(Equal(uint64(1)), "eight objects and another category's Sync, one bundle")
	g.Expect(e.br.Installed(6)).To(HaveLen(8))
	g.Expect(e.br.Installed(7)).To(HaveLen(1))

	// A whole-category Sync of the objects' own category touches their flows: it and the objects
	// queued after it wait for the next bundles, and the last writer of each flow wins.
	before = e.br.Bundles()
	syncAround([]uint64{9, 10, 11, 12}, 6, []openflow.Flow{objectRoute(1), objectRoute(2)})
	g.Expect(e.br.Bundles()-before).To(Equal(uint64(3)), "objects 9-10, then category 6 alone, then objects 11-12")
	g.Expect(e.br.Installed(6)).To(HaveLen(4), "category 6 is objects 1-2 (its Sync), then 11-12")
	g.Expect(e.br.Installed(7)).To(HaveLen(1))
	g.Expect(dump(t, e.ovs)).To(Equal(rendered(append(e.br.Installed(6), e.br.Installed(7)...))))

	// The batched whole-category Sync remembered its order: the same Sync again changes nothing.
	res, err := e.br.Sync(ctx, 7, other)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Mods()).To(BeZero())
}

// TestBundlesShareAConnection sends consecutive bundles on one connection to the management
// socket, and a Sync right after ovs-vswitchd restarted succeeds on a new one.
func TestBundlesShareAConnection(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	route := func(object uint64) []openflow.Flow { return []openflow.Flow{objectRoute(object)} }
	_, err := e.br.SyncObject(ctx, 6, 1, route(1))
	g.Expect(err).NotTo(HaveOccurred())
	dials, bundles := e.br.BundleDials(), e.br.Bundles()
	for o := uint64(2); o <= 10; o++ {
		_, err := e.br.SyncObject(ctx, 6, o, route(o))
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(e.br.Bundles() - bundles).To(Equal(uint64(9)))
	g.Expect(e.br.BundleDials()).To(Equal(dials), "nine bundles on the connection of the first")

	// A rejected bundle leaves the connection usable: the next bundle goes on it too.
	_, err = e.br.SyncObject(ctx, 6, 11, []openflow.Flow{invalidFlow(11)})
	g.Expect(err).To(MatchError(ContainSubstring("OFPBMC_BAD_PREREQ")))
	_, err = e.br.SyncObject(ctx, 6, 11, route(11))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.br.BundleDials()).To(Equal(dials))

	// ovs-vswitchd restarts: the idle connection is dead, and the next bundles use a new one.
	g.Expect(e.ovs.KillVswitchd()).To(Succeed())
	g.Expect(e.ovs.StartVswitchd()).To(Succeed())
	g.Eventually(func() error { _, err := e.br.SyncObject(ctx, 6, 12, route(12)); return err }).
		WithTimeout(10 * time.Second).Should(Succeed())
	g.Expect(e.br.BundleDials()).To(BeNumerically(">", dials))
	g.Eventually(func() []string { got, _ := e.ovs.DumpFlows(bridge); return got }).
		WithTimeout(5 * time.Second).Should(Equal(rendered(e.br.Installed(6))))
	g.Expect(e.br.Installed(6)).To(HaveLen(12))
}

// TestOneFlowModIsSentWithoutBundle: a change of one flow_mod goes to the switch as the flow_mod
// and a barrier (one round trip), a larger change as a bundle; ovs-vswitchd's own log of what it
// received (vconn at debug level) tells which.
func TestOneFlowModIsSentWithoutBundle(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := e.br.SyncObject(ctx, 6, 1, []openflow.Flow{objectRoute(1)}) // the bundle connection is open
	g.Expect(err).NotTo(HaveOccurred())
	_, err = e.ovs.Appctl("vlog/set", "vconn:file:dbg")
	g.Expect(err).NotTo(HaveOccurred())
	logFile := filepath.Join(e.ovs.Dir, "ovs-vswitchd.log")
	// received returns what ovs-vswitchd logged receiving during sync, up to the line with last, the
	// change's last message: ovs-vswitchd writes its log asynchronously, so the lines can come after
	// its reply (a read right after the reply found nothing, idle, 1 run in 3).
	received := func(last string, sync func()) string {
		before, err := os.ReadFile(logFile)
		g.Expect(err).NotTo(HaveOccurred())
		sync()
		var got string
		g.Eventually(func() (string, error) {
			after, err := os.ReadFile(logFile)
			got = string(after[len(before):])
			return got, err
		}).WithTimeout(10*time.Second).Should(ContainSubstring(last), "ovs-vswitchd's log of what it received")
		return got
	}

	one := received("received: OFPT_BARRIER_REQUEST", func() {
		res, err := e.br.SyncObject(ctx, 6, 2, []openflow.Flow{objectRoute(2)})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Mods()).To(Equal(1))
	})
	g.Expect(one).To(ContainSubstring("received: OFPT_FLOW_MOD"))
	g.Expect(one).To(ContainSubstring("received: OFPT_BARRIER_REQUEST"))
	g.Expect(one).NotTo(ContainSubstring("OFPT_BUNDLE"))

	two := received("COMMIT_REQUEST", func() {
		second := objectRoute(3)
		second.Priority = 100
		res, err := e.br.SyncObject(ctx, 6, 3, []openflow.Flow{objectRoute(3), second})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Mods()).To(Equal(2))
	})
	g.Expect(two).To(ContainSubstring("received: OFPT_BUNDLE_CONTROL"))
	g.Expect(two).To(ContainSubstring("received: OFPT_BUNDLE_ADD_MESSAGE"))

	got, err := e.ovs.DumpFlows(bridge)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(rendered(e.br.Installed(6))))
	g.Expect(got).To(HaveLen(4))
}

// TestFlowStatsNameTheMatch: a flow-stats reply gives each flow's counters, the port and the
// registers it matches exactly (reg1 comes back inside xreg0 in OpenFlow 1.5, reg0 masked beside
// it is not exact), and only the flows of the cookie asked for.
func TestFlowStatsNameTheMatch(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx := context.Background()
	flows := []openflow.Flow{
		{Table: 100, Priority: 200, Cookie: 1, Match: []openflow.MatchField{openflow.IPv4(), openflow.Reg(1, 0, 31, 0xa), openflow.Reg(0, 0, 15, 2)}},
		{Table: 100, Priority: 200, Cookie: 2, Match: []openflow.MatchField{openflow.IPv4(), openflow.InPort(11)}},
		{Table: 100, Priority: 200, Cookie: 3, Match: []openflow.MatchField{openflow.IPv4(), openflow.Reg(9, 0, 31, 0x8000ea60)}},
	}
	_, err := e.br.Sync(ctx, 8, flows)
	g.Expect(err).NotTo(HaveOccurred())
	stats, err := e.br.FlowStats(ctx, 100, openflow.MakeCookie(0, 8, 2), openflow.CategoryMask|3)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stats).To(HaveLen(1), "the object's bits under the mask select one flow")
	g.Expect(stats[0].InPort).To(Equal(uint32(11)))
	stats, err = e.br.FlowStats(ctx, 100, openflow.MakeCookie(0, 8, 0), openflow.CategoryMask)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stats).To(HaveLen(3))
	byCookie := map[uint64]openflow.FlowStat{}
	for _, s := range stats {
		byCookie[s.Cookie&openflow.ObjectMask] = s
	}
	g.Expect(byCookie[1].Regs).To(Equal(map[int]uint32{1: 0xa}))
	g.Expect(byCookie[1].InPort).To(BeZero())
	g.Expect(byCookie[2].InPort).To(Equal(uint32(11)))
	g.Expect(byCookie[2].Regs).To(BeEmpty())
	g.Expect(byCookie[3].Regs).To(Equal(map[int]uint32{9: 0x8000ea60}))
}

// TestFreeze: a frozen bridge changes nothing on the switch — no flow sync, group change, round deletion or
// conntrack flush is sent, each fails with ErrFrozen — and what the switch had stays, as an agent that is
// stopping leaves it for the next one.
func TestFreeze(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	group := openflow.Group{ID: 1, Buckets: []openflow.Bucket{{Weight: 100, Actions: []openflow.Action{openflow.Output(1)}}}}
	_, err := e.br.SyncGroups(ctx, []openflow.Group{group})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = e.br.Sync(ctx, 2, featureFlows())
	g.Expect(err).NotTo(HaveOccurred())
	flows, err := e.ovs.DumpFlows(bridge)
	g.Expect(err).NotTo(HaveOccurred())
	groups, err := e.ovs.DumpGroups(bridge)
	g.Expect(err).NotTo(HaveOccurred())

	e.br.Freeze()
	_, err = e.br.Sync(ctx, 2, nil)
	g.Expect(err).To(MatchError(openflow.ErrFrozen))
	_, err = e.br.SyncGroups(ctx, nil)
	g.Expect(err).To(MatchError(openflow.ErrFrozen))
	g.Expect(e.br.DeleteRound(ctx, e.br.Round()+1)).To(MatchError(openflow.ErrFrozen))
	g.Expect(e.br.FlushConntrackZone(ctx, 7)).To(MatchError(openflow.ErrFrozen))
	g.Expect(e.ovs.DumpFlows(bridge)).To(Equal(flows), "the switch keeps its flows")
	g.Expect(e.ovs.DumpGroups(bridge)).To(Equal(groups), "the switch keeps its groups")
}

// TestInstalledKeepsNoSpareCapacity: the bridge keeps each installed flow as long as it is installed,
// without the spare capacity of actions built by append (the match is kept in its key alone, and
// given back whole): a cluster of 5,000 Nodes installs 200,000 flows and more.
func TestInstalledKeepsNoSpareCapacity(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := objectRoute(3)
	f.Match = append(make([]openflow.MatchField, 0, 10), f.Match...)
	f.Actions = append(make([]openflow.Action, 0, 8), f.Actions...)
	_, err := e.br.Sync(ctx, 5, []openflow.Flow{f})
	g.Expect(err).NotTo(HaveOccurred())
	installed := e.br.Installed(5)
	g.Expect(installed).To(HaveLen(1))
	g.Expect(cap(installed[0].Match)).To(Equal(len(f.Match)), "the match's spare capacity")
	g.Expect(cap(installed[0].Actions)).To(Equal(len(f.Actions)), "the actions' spare capacity")
	g.Expect(installed[0].Match).To(Equal(f.Match))
	g.Expect(installed[0].Actions).To(Equal(f.Actions))
	g.Expect(dump(t, e.ovs)).To(Equal(rendered(installed)))
}
