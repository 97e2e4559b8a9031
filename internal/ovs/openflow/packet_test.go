package openflow_test

import (
	"context"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// TestPacketInAndOut: a flow's output to CONTROLLER reaches the bridge's packet-in handler (the
// table, cookie, input port and whole frame), and SendPacketOut from LOCAL outputs a frame on a port;
// a packet-out from CONTROLLER is refused. Packet-ins go to the handler of their flow's cookie
// category only, with the registers the pipeline loaded and the tunnel destination it set; a flow
// can match the DSCP and TCP/UDP source port (packet traces). The packet enters the pipeline through another OpenFlow
// connection (ovs-ofctl packet-out), as a real packet would.
func TestPacketInAndOut(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.ovs.MustVsctl(t, "add-port", bridge, "p1", "--", "set", "interface", "p1", "type=internal", "ofport_request=5")
	// A tap that is down drops what OVS outputs to it (tx drop): bring it up.
	if out, err := hostcmd.Command("ip", "netns", "exec", e.ovs.NetNS(), "ip", "link", "set", "p1", "up").CombinedOutput(); err != nil {
		t.Fatalf("bringing p1 up: %v: %s", err, out)
	}

	const cookie = 0x77
	_, err := e.br.Sync(ctx, 1, []openflow.Flow{{Table: 40, Priority: 200, Cookie: cookie,
		Match:   []openflow.MatchField{openflow.IPv4(), openflow.NwDst(netip.MustParsePrefix("10.96.0.10/32"))},
		Actions: []openflow.Action{openflow.Output(openflow.PortController)}}})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = e.br.Sync(ctx, 2, []openflow.Flow{{Table: 40, Priority: 210, Cookie: 0x78,
		Match: []openflow.MatchField{openflow.IPv4(), openflow.IPProto(openflow.ProtoUDP), openflow.NwDst(netip.MustParsePrefix("10.96.0.10/32")),
			openflow.IPDSCP(0x2a), openflow.TpSrc(openflow.ProtoUDP, 54321)},
		Actions: []openflow.Action{openflow.SetReg(1, 0, 31, 7), openflow.SetTunDst(netip.MustParseAddr("192.0.2.9")), openflow.Output(openflow.PortController)}}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dump(t, e.ovs)).To(ContainElements(ContainSubstring("table=40, priority=200,ip,nw_dst=10.96.0.10 actions=CONTROLLER:65535"),
		ContainSubstring("table=40, priority=210,udp,nw_dst=10.96.0.10,nw_tos=168,tp_src=54321 actions=")))

	got := make(chan openflow.PacketIn, 4)
	other := make(chan openflow.PacketIn, 4)
	e.br.SetPacketInHandler(1, func(p openflow.PacketIn) { got <- p })
	e.br.SetPacketInHandler(2, func(p openflow.PacketIn) { other <- p })

	// A UDP datagram from 10.0.0.5 to 10.96.0.10:53, with a payload, entering on port 5.
	frame := "aabbccddeeff0a580a000005" + "0800" + "4500002000004000401100000a0000050a60000a" + "d4310035000c0000" + "6869217e"
	e.ovs.MustOfctl(t, "-O", "OpenFlow15", "packet-out", bridge, "in_port=5,packet="+frame+",actions=resubmit(,40)")
	var p openflow.PacketIn
	g.Eventually(got).WithTimeout(5*time.Second).Should(Receive(&p), "the packet-in of the flow's output to CONTROLLER")
	g.Expect(p.Table).To(Equal(uint8(40)))
	g.Expect(p.Cookie & 0xffffffff).To(Equal(uint64(cookie)))
	g.Expect(p.InPort).To(Equal(uint32(5)))
	g.Expect(hex.EncodeToString(p.Frame)).To(Equal(frame), "the whole frame, not the first 128 bytes of miss_send_len")
	g.Consistently(other).WithTimeout(300*time.Millisecond).ShouldNot(Receive(), "category 2's handler gets only its own flows' packet-ins")

	// The same datagram with DSCP 42 (ToS 0xa8) from port 54321: the category 2 flow sends it.
	tagged := "aabbccddeeff0a580a000005" + "0800" + "45a8002000004000401100000a0000050a60000a" + "d4310035000c0000" + "6869217e"
	e.ovs.MustOfctl(t, "-O", "OpenFlow15", "packet-out", bridge, "in_port=5,packet="+tagged+",actions=resubmit(,40)")
	var q openflow.PacketIn
	g.Eventually(other).WithTimeout(5*time.Second).Should(Receive(&q), "the packet-in of the DSCP and tp_src flow")
	g.Expect(q.Regs[1]).To(Equal(uint32(7)), "reg1 as the flow loaded it")
	g.Expect(q.TunDst).To(Equal(netip.MustParseAddr("192.0.2.9")))
	g.Consistently(got).WithTimeout(300*time.Millisecond).ShouldNot(Receive(), "category 1's handler does not get category 2's packet-ins")

	// ToController(max_len) sends a packet-in and goes on with the next action: the audit logs'
	// flows. OVS keeps no packet buffers, and a standard (OpenFlow 1.5) packet-in of an unbuffered
	// packet carries the whole packet whatever max_len says (only NXT_PACKET_IN2 truncates): the
	// receiver must read the headers and nothing more.
	_, err = e.br.Sync(ctx, 1, []openflow.Flow{{Table: 40, Priority: 220, Cookie: cookie,
		Match:   []openflow.MatchField{openflow.IPv4(), openflow.NwDst(netip.MustParsePrefix("10.96.0.11/32"))},
		Actions: []openflow.Action{openflow.ToController(40), openflow.Output(5)}}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dump(t, e.ovs)).To(ContainElement(ContainSubstring("table=40, priority=220,ip,nw_dst=10.96.0.11 actions=CONTROLLER:40,output:5")))
	long := "aabbccddeeff0a580a000005" + "0800" + "4500002000004000401100000a0000050a60000b" + "d4310035000c0000" + "6869217e"
	txBefore := txPackets(t, e, "5")
	e.ovs.MustOfctl(t, "-O", "OpenFlow15", "packet-out", bridge, "in_port=LOCAL,packet="+long+",actions=resubmit(,40)")
	var h openflow.PacketIn
	g.Eventually(got).WithTimeout(5*time.Second).Should(Receive(&h), "the packet-in of ToController(40)")
	g.Expect(hex.EncodeToString(h.Frame)).To(HavePrefix(long[:80]))
	g.Eventually(func() int { return txPackets(t, e, "5") }).WithTimeout(5*time.Second).Should(Equal(txBefore+1), "the packet went on to port 5 whole")

	g.Expect(e.br.SendPacketOut(openflow.PortController, []openflow.Action{openflow.Output(5)}, p.Frame)).To(HaveOccurred(), "a packet-out from CONTROLLER")
	before := txPackets(t, e, "5")
	g.Expect(e.br.SendPacketOut(openflow.PortLocal, []openflow.Action{openflow.Output(5)}, p.Frame)).To(Succeed())
	g.Eventually(func() int { return txPackets(t, e, "5") }).WithTimeout(5*time.Second).Should(Equal(before+1), "the packet-out output on port 5")
}

// txPackets is the tx_packets counter of a port as ovs-ofctl dump-ports shows it.
func txPackets(t *testing.T, e *env, port string) int {
	t.Helper()
	out := e.ovs.MustOfctl(t, "-O", "OpenFlow15", "dump-ports", bridge, port)
	_, rest, ok := strings.Cut(out, "tx pkts=")
	if !ok {
		t.Fatalf("no tx counter in %q", out)
	}
	n := 0
	for _, c := range rest {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}
