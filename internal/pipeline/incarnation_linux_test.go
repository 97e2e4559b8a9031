package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestIncarnationPaths walks established packets of local Pods' connections through a real switch
// with ofproto/trace: pod1 (port 10) has incarnation 5, pod2 (port 11) none (attached before
// incarnations). A test-only flow starts each trace at ConntrackState with the conntrack state, mark
// and label given (the state a connection's later packet has once tracked), and the registers
// SpoofGuard loads for a local Pod's packet. A connection committed for another incarnation of
// pod1's address never reaches pod1 nor leaves from it.
func TestIncarnationPaths(t *testing.T) {
	n := testNode()
	p1 := pod1
	p1.Incarnation = 5
	o, _ := loadPipelineWith(t, n, []Pod{p1, pod2}, n.ServiceBaseFlows()...)
	file := filepath.Join(t.TempDir(), "start")
	if err := os.WriteFile(file, []byte("priority=250,ct_state=+trk actions=goto_table:31\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o.MustOfctl(t, "-O", "OpenFlow15", "add-flows", "br-int", file)

	// label is ct_label with src and dst in its incarnation bits.
	label := func(src, dst uint64) string { return fmt.Sprintf("0x%x", dst<<32|src) }
	// fromTunnel is a remote Pod's packet to dst (pod1 or pod2).
	fromTunnel := func(dst Pod, state, mark, lbl string) string {
		return fmt.Sprintf("in_port=1,tcp,ct_state=%s,ct_mark=%s,ct_label=%s,dl_src=%s,dl_dst=%s,nw_src=10.244.2.5,nw_dst=%s,nw_ttl=64,tp_src=40000,tp_dst=80",
			state, mark, lbl, n.GatewayMAC, GlobalVirtualMAC, dst.IP)
	}
	// fromPod1 is pod1's packet to a remote Pod, with the registers its SpoofGuard flow loads.
	fromPod1 := func(state, mark, lbl string) string {
		return fmt.Sprintf("in_port=10,reg0=0x2,reg10=5,tcp,ct_state=%s,ct_mark=%s,ct_label=%s,dl_src=%s,dl_dst=%s,nw_src=%s,nw_dst=10.244.2.5,nw_ttl=64,tp_src=80,tp_dst=40000",
			state, mark, lbl, p1.MAC, n.GatewayMAC, p1.IP)
	}
	toPod1, toPod2 := "-> output port is 10", "-> output port is 11"
	staleIngress := fmt.Sprintf(`%d\. priority 0\n\s+drop`, IngressIncarnationTable)
	staleEgress := fmt.Sprintf(`%d\. priority 0\n\s+drop`, EgressIncarnationTable)
	toTunnel := "-> output port is 1"
	cases := []traceCase{
		{name: "a connection to pod1 committed with its incarnation reaches it",
			flow: fromTunnel(p1, "est|trk", "0", label(0, 5)), want: []string{toPod1}},
		{name: "a connection to an earlier Pod of pod1's address is dropped",
			flow: fromTunnel(p1, "est|trk", "0", label(0, 4)), want: []string{staleIngress}, reject: []string{toPod1}},
		{name: "a connection committed before incarnations (0) does not reach a Pod that has one",
			flow: fromTunnel(p1, "est|trk", "0", label(0, 0)), want: []string{staleIngress}, reject: []string{toPod1}},
		{name: "a related packet of an earlier Pod's connection is dropped",
			flow: fromTunnel(p1, "rel|trk", "0", label(0, 4)), want: []string{staleIngress}, reject: []string{toPod1}},
		{name: "a reply to pod1's own connection reaches it",
			flow: fromTunnel(p1, "est|rpl|trk", "0", label(5, 0)), want: []string{toPod1}},
		{name: "a reply to an earlier Pod's connection is dropped",
			flow: fromTunnel(p1, "est|rpl|trk", "0", label(4, 0)), want: []string{staleIngress}, reject: []string{toPod1}},
		{name: "a Pod attached before incarnations is not checked",
			flow: fromTunnel(pod2, "est|trk", "0", label(0, 4)), want: []string{toPod2}},
		{name: "a NodePort connection from the uplink to pod1 carries its incarnation in ct_mark",
			flow: fromTunnel(p1, "est|trk", "0x50190", label(0, 4)), want: []string{toPod1}},
		{name: "a NodePort connection from the uplink to an earlier Pod of the address is dropped",
			flow: fromTunnel(p1, "est|trk", "0x40190", label(0, 5)), want: []string{staleIngress}, reject: []string{toPod1}},
		{name: "pod1's own connection leaves",
			flow: fromPod1("est|trk", "0", label(5, 0)), want: []string{toTunnel}},
		{name: "pod1's packet of an earlier Pod's connection is dropped",
			flow: fromPod1("est|trk", "0", label(4, 0)), want: []string{staleEgress}, reject: []string{toTunnel}},
		{name: "pod1's reply to a connection made to it leaves",
			flow: fromPod1("est|rpl|trk", "0", label(0, 5)), want: []string{toTunnel}},
		{name: "pod1's reply to a connection made to an earlier Pod of its address is dropped",
			flow: fromPod1("est|rpl|trk", "0", label(0, 4)), want: []string{staleEgress}, reject: []string{toTunnel}},
		{name: "pod1's reply to a NodePort client of its own goes out of the uplink",
			flow: fromPod1("est|rpl|trk", "0x50190", label(0, 0)), want: []string{`31\. ct_state=-new\+rpl\+trk,ct_mark=0x50080/0xffff0080,ip,in_port=10, priority 220`, "output:3"}},
		{name: "pod1's reply to an earlier Pod's NodePort client is dropped",
			flow: fromPod1("est|rpl|trk", "0x40190", label(0, 0)), want: []string{`31\. ct_state=-new\+rpl\+trk,ct_mark=0x80/0x80,ip, priority 219\n\s+drop`}, reject: []string{"output:3"}},
	}
	runTraces(t, o, cases)
}
