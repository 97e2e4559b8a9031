//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/controllers/remoteroute"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// Tunnel admission with real packets: forged VXLAN and Geneve datagrams from the underlay's external host and
// from a Pod never reach a Pod; the same datagrams reach it once admission is Off on the receiving node (which
// shows that they are well-formed tunnel packets the node would deliver, and that the test fails without
// admission).

const python3 = "/usr/bin/python3"

// udpReceiver listens on UDP port argv[1] for argv[3] seconds and prints whether a datagram holding the
// marker argv[2] arrived.
const udpReceiver = `
import socket, sys
port, marker, secs = int(sys.argv[1]), sys.argv[2].encode(), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", port))
s.settimeout(secs)
print("listening", flush=True)
try:
    while True:
        data, addr = s.recvfrom(65535)
        if marker in data:
            print("received from", addr[0], flush=True)
            break
except socket.timeout:
    print("nothing", flush=True)
`

// tunnelForger sends argv[10] tunnel datagrams (argv[1] vxlan or geneve) to argv[2]:argv[3] with VNI argv[4],
// each carrying an Ethernet frame to MAC argv[5] with an IPv4/UDP packet from argv[6] to argv[7]:argv[8]
// whose payload is the marker argv[9].
const tunnelForger = `
import socket, struct, sys, time
kind, dst, dport, vni, dmac, src, idst, iport, marker, count = sys.argv[1:11]
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b)//2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
payload = marker.encode()
udp = struct.pack("!HHHH", 40000, int(iport), 8 + len(payload), 0) + payload
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0, socket.inet_aton(src), socket.inet_aton(idst))
ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
frame = bytes.fromhex(dmac.replace(":", "")) + bytes.fromhex("020000000099") + b"\x08\x00" + ip + udp
if kind == "vxlan":
    hdr = struct.pack("!II", 0x08000000, int(vni) << 8)
else:
    hdr = struct.pack("!BBHI", 0, 0, 0x6558, int(vni) << 8)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 11, 1)  # SO_NO_CHECK: a zero outer UDP checksum, as OVS sends (the veth would offload it)
for _ in range(int(count)):
    s.sendto(hdr + frame, (dst, int(dport)))
    time.sleep(0.1)
`

// lockedBuffer collects a command's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// listen starts udpReceiver in namespace ns and returns a function waiting for its verdict.
func listen(t *testing.T, ns string, port int, marker string, secs float64) func() string {
	t.Helper()
	cmd := hostcmd.Command("ip", "netns", "exec", ns, python3, "-u", "-c", udpReceiver, fmt.Sprint(port), marker, fmt.Sprint(secs))
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the receiver in %s: %v", ns, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "listening") {
		if time.Now().After(deadline) {
			t.Fatalf("the receiver in %s did not start: %s", ns, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return func() string {
		<-done
		return strings.TrimSpace(out.String())
	}
}

// forged is a forged tunnel datagram: from namespace ns to node to, inner source src, to Pod dst.
type forged struct {
	kind string // vxlan or geneve
	ns   string
	to   *cluster.Node
	src  netip.Addr
	dst  *cluster.Pod
}

// deliveredTo sends the datagram a few times and reports what the destination Pod's receiver saw.
func (f forged) deliveredTo(t *testing.T) string {
	t.Helper()
	g := NewWithT(t)
	w, err := c.Network(context.Background(), f.to.Name)
	g.Expect(err).NotTo(HaveOccurred())
	enc := w.Spec.Encapsulation
	port := int(enc.Port)
	if port == 0 {
		port = networkv1alpha1.DefaultVXLANPort
		if f.kind == "geneve" {
			port = networkv1alpha1.DefaultGenevePort
		}
	}
	vni := int(enc.VNI)
	if vni == 0 {
		vni = 1
	}
	marker := fmt.Sprintf("winnet-forged-%d", time.Now().UnixNano())
	const innerPort = 47123
	wait := listen(t, f.dst.NS, innerPort, marker, 4)
	out, err := hostcmd.Command("ip", "netns", "exec", f.ns, python3, "-c", tunnelForger, f.kind, f.to.IP.String(), fmt.Sprint(port), fmt.Sprint(vni),
		pipeline.GlobalVirtualMAC.String(), f.src.String(), f.dst.IP.String(), fmt.Sprint(innerPort), marker, "10").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	return wait()
}

// setAdmission sets node's tunnel admission and waits until its flows show it.
func setAdmission(t *testing.T, n *cluster.Node, a networkv1alpha1.TunnelAdmission) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(c.UpdateNetwork(context.Background(), n.Name, func(w *networkv1alpha1.WindowsNodeNetwork) {
		w.Spec.Encapsulation.TunnelAdmission = a
	})).To(Succeed())
	open := "table=1, priority=220,ip actions=goto_table:2"
	if a == networkv1alpha1.TunnelAdmissionOff {
		g.Eventually(n.Flows).WithTimeout(converge).Should(ContainSubstring(open))
	} else {
		g.Eventually(n.Flows).WithTimeout(converge).ShouldNot(ContainSubstring(open))
	}
}

// TestForgedTunnelPacketsNeverReachAPod sends, over VXLAN and over Geneve, tunnel datagrams to node-b carrying a
// UDP packet to pod-b1: from the external host with inner source pod-a1 (a Pod node-b's Pods hear from) and
// with an inner source outside every Pod CIDR; from pod-c1 (a Pod on another node) with its own address as
// inner source. None reaches pod-b1; with admission Off on node-b the external host's do, and pod-c1's
// is still dropped on node-c (a Pod may not send to a node's tunnel port). node-b says, with an Event, where
// node-a's inner sources came from, and ofproto/trace of the forged packet ends in the admission drop.
func TestForgedTunnelPacketsNeverReachAPod(t *testing.T) {
	a, b := node("node-a"), node("node-b")
	a1, b1, c1 := pods["pod-a1"], pods["pod-b1"], pods["pod-c1"]
	outside := netip.MustParseAddr("172.31.255.7")
	start := time.Now()
	t.Cleanup(func() { setEncapsulation(t, encapsulations[0]) })
	// The addresses node-b learned go with the test (other tests count every flow of a node's round).
	t.Cleanup(func() {
		_, _ = b.OVS.Ofctl("del-flows", cluster.BridgeName, fmt.Sprintf("table=%d", pipeline.TunnelSourceSeenTable))
	})
	for _, e := range encapsulations[:2] {
		t.Run(e.name, func(t *testing.T) {
			g := NewWithT(t)
			setEncapsulation(t, e)
			port := networkv1alpha1.DefaultVXLANPort
			if e.name == "geneve" {
				port = networkv1alpha1.DefaultGenevePort
			}
			g.Eventually(node("node-c").Flows).WithTimeout(converge).Should(ContainSubstring(fmt.Sprintf("nw_dst=%s,tp_dst=%d actions=drop", b.IP, port)),
				"node-c's route to node-b keeps its Pods from node-b's tunnel port")
			t.Cleanup(func() { setAdmission(t, b, networkv1alpha1.TunnelAdmissionEnforce) })
			g.Eventually(func() int {
				_, received, _ := cluster.Ping(a1.Place(), b1.IP, 1)
				return received
			}).WithTimeout(converge).Should(Equal(1), "pod-a1 reaches pod-b1 through the tunnel")
			cases := []forged{
				{kind: e.name, ns: c.External.NS, to: b, src: a1.IP, dst: b1},
				{kind: e.name, ns: c.External.NS, to: b, src: outside, dst: b1},
				{kind: e.name, ns: c1.NS, to: b, src: c1.IP, dst: b1},
			}
			for _, f := range cases {
				g.Expect(f.deliveredTo(t)).To(Equal("listening\nnothing"), "%s from %s with inner source %s reached %s", f.kind, f.ns, f.src, f.dst.Name)
			}

			// The trace of the first: table 1 learns the external host's address for node-a's route and drops.
			trace, err := b.OVS.Appctl("ofproto/trace", "br-int", fmt.Sprintf("in_port=%d,udp,dl_dst=%s,nw_src=%s,nw_dst=%s,nw_ttl=64,udp_dst=47123,tun_id=1,tun_src=%s,tun_dst=%s",
				nodenetwork.TunnelOFPort, pipeline.GlobalVirtualMAC, a1.IP, b1.IP, c.ExternalIP, b.IP))
			g.Expect(err).NotTo(HaveOccurred(), trace)
			g.Expect(trace).To(MatchRegexp(`1\. ip,nw_src=10\.244\.1\.0/24, priority 180, cookie 0x[0-9a-f]+\n\s+learn\(`))
			g.Expect(trace).To(ContainSubstring("Datapath actions: drop"))

			// Without admission the external host's forgeries are delivered; the Pod's still never leave its node.
			setAdmission(t, b, networkv1alpha1.TunnelAdmissionOff)
			g.Expect(cases[0].deliveredTo(t)).To(HavePrefix("listening\nreceived from "+a1.IP.String()), "admission Off: the forged packet is well-formed and delivered")
			g.Expect(cases[1].deliveredTo(t)).To(HavePrefix("listening\nreceived from " + outside.String()))
			g.Expect(cases[2].deliveredTo(t)).To(Equal("listening\nnothing"), "a Pod's tunnel datagram is dropped on its own node")
			setAdmission(t, b, networkv1alpha1.TunnelAdmissionEnforce)
		})
	}
	// node-b named node-a's route and the external host's address in a Warning Event.
	NewWithT(t).Eventually(func() []string {
		list := &eventsv1.EventList{}
		if err := c.Client.List(context.Background(), list); err != nil {
			return []string{err.Error()}
		}
		var out []string
		for _, ev := range list.Items {
			if ev.Reason == remoteroute.PeerAddressMismatchReason && ev.Regarding.Name == b.Name && ev.CreationTimestamp.After(start.Add(-time.Second)) {
				out = append(out, ev.Note)
			}
		}
		return out
	}).WithTimeout(2 * converge).Should(ContainElement(And(ContainSubstring(a.Name), ContainSubstring("arrives from "+c.ExternalIP.String()))))
}

// arpSender sends argv[4] gratuitous ARP requests from interface argv[1] (with its own MAC as Ethernet
// source) announcing IP argv[3] with sender MAC argv[2].
const arpSender = `
import socket, struct, sys, time
ifname, sha, spa, count = sys.argv[1], bytes.fromhex(sys.argv[2].replace(":", "")), socket.inet_aton(sys.argv[3]), int(sys.argv[4])
own = bytes.fromhex(open("/sys/class/net/%s/address" % ifname).read().strip().replace(":", ""))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((ifname, 0))
frame = b"\xff" * 6 + own + b"\x08\x06" + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + sha + spa + b"\0" * 6 + spa
for _ in range(count):
    s.send(frame)
    time.sleep(0.1)
`

// arpReceiver prints whether, within argv[3] seconds, an ARP packet with sender MAC argv[1] and sender IP
// argv[2] arrived on any interface.
const arpReceiver = `
import socket, sys, time
sha, spa, secs = bytes.fromhex(sys.argv[1].replace(":", "")), socket.inet_aton(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
s.settimeout(0.2)
print("listening", flush=True)
end = time.time() + secs
while time.time() < end:
    try:
        data = s.recv(65535)
    except socket.timeout:
        continue
    if data[22:28] == sha and data[28:32] == spa:
        print("received", flush=True)
        sys.exit(0)
print("nothing", flush=True)
`

// podLink returns the name and MAC of the Pod's interface.
func podLink(t *testing.T, p *cluster.Pod) (string, string) {
	t.Helper()
	out, err := p.Exec("ip", "-o", "link", "show")
	if err != nil {
		t.Fatalf("listing %s's links: %v: %s", p.Name, err, out)
	}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || strings.HasPrefix(f[1], "lo") {
			continue
		}
		for i := range f[:len(f)-1] {
			if f[i] == "link/ether" {
				return strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0], f[i+1]
			}
		}
	}
	t.Fatalf("%s has no Ethernet link: %s", p.Name, out)
	return "", ""
}

// TestARPSpoofWithAnotherPodsMACIsDropped has pod-a1 announce its own IP with pod-a2's MAC as ARP sender: pod-a2
// never sees it. The same announcement with pod-a1's own MAC reaches pod-a2 (the receiver works).
func TestARPSpoofWithAnotherPodsMACIsDropped(t *testing.T) {
	a1, a2 := pods["pod-a1"], pods["pod-a2"]
	ifA1, macA1 := podLink(t, a1)
	_, macA2 := podLink(t, a2)
	for _, tc := range []struct {
		sha  string
		want string
	}{{macA1, "received"}, {macA2, "nothing"}} {
		t.Run("sender MAC "+tc.sha, func(t *testing.T) {
			g := NewWithT(t)
			cmd := hostcmd.Command("ip", "netns", "exec", a2.NS, python3, "-u", "-c", arpReceiver, tc.sha, a1.IP.String(), "4")
			out := &lockedBuffer{}
			cmd.Stdout, cmd.Stderr = out, out
			g.Expect(cmd.Start()).To(Succeed())
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			g.Eventually(out.String).WithTimeout(10 * time.Second).Should(ContainSubstring("listening"))
			sent, err := hostcmd.Command("ip", "netns", "exec", a1.NS, python3, "-c", arpSender, ifA1, tc.sha, a1.IP.String(), "10").CombinedOutput()
			g.Expect(err).NotTo(HaveOccurred(), "%s", sent)
			_ = cmd.Wait()
			g.Expect(strings.TrimSpace(out.String())).To(Equal("listening\n" + tc.want))
		})
	}
}
