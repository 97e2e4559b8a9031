//go:build linux

package datapath_test

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
	"github.com/winnet-io/winnet/test/simnode"
)

// The userspace datapath tracks every IP protocol and un-NATs ICMP errors, so on it a packet that
// goes through ct() arrives anyway. What the Windows datapath would do is shown by where the packet
// went: the datapath flow the real packet installed and ofproto/trace show that it never entered
// ct(), which on Windows drops GRE and ESP and marks ICMP errors invalid.

var server *framework.APIServer

func TestMain(m *testing.M) {
	framework.Main(m, "datapath tests", &server, framework.MainOptions{})
}

// python is Debian's python3 (hack/setup-test-deps.sh installs it); the tests build raw packets with it.
const python = "/usr/bin/python3"

const (
	nodeIP     = "192.168.10.11"
	externalIP = "192.168.10.254"
)

// converged starts a node with its agent and a WindowsNodeNetwork, waits until it is Ready and the
// external host reaches it through the bridge.
func converged(t *testing.T, name string) (*simnode.Node, *simnode.Host) {
	t.Helper()
	g := NewWithT(t)
	underlay := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.10.0/24"))
	node := framework.StartPodNode(t, server, underlay, name, nodeIP+"/24", "10.244.1.0/24", 30*time.Second)
	ext := underlay.External()
	g.Eventually(func(g Gomega) {
		sent, received, err := simnode.Ping(ext.NS, netip.MustParseAddr(nodeIP), 2)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(received).To(Equal(sent))
	}).WithTimeout(10*time.Second).Should(Succeed(), "the external host reaches the node through the bridge")
	return node.Node, ext
}

// background runs a python script in namespace ns and returns a function waiting for its output.
func background(t *testing.T, ns, script string, args ...string) func() (string, error) {
	t.Helper()
	cmd := hostcmd.Command("ip", append([]string{"netns", "exec", ns, python, "-c", script}, args...)...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s in %s: %v", python, ns, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return func() (string, error) {
		err := <-done
		done <- err
		return out.String(), err
	}
}

// datapathFlows returns the datapath flows of the node's OVS, one a line.
func datapathFlows(g Gomega, node *simnode.Node) []string {
	out, err := node.OVS.Appctl("dpctl/dump-flows")
	g.Expect(err).NotTo(HaveOccurred(), out)
	return strings.Split(strings.TrimSpace(out), "\n")
}

// expectFirstPassWithoutCT asserts that the datapath flow the packets matching key installed on
// their first pass (recirc_id(0)) sends them on without ct().
func expectFirstPassWithoutCT(g Gomega, node *simnode.Node, key *regexp.Regexp) {
	var first []string
	all := datapathFlows(g, node)
	for _, l := range all {
		if strings.HasPrefix(l, "recirc_id(0)") && key.MatchString(l) {
			first = append(first, l)
		}
	}
	// Without a flow of their own, the packets took one that does not look at their protocol,
	// such as the one that sends all IP from the uplink to ct().
	g.Expect(first).NotTo(BeEmpty(), "no first-pass datapath flow matches %s; the datapath flows are:\n%s", key, strings.Join(all, "\n"))
	for _, l := range first {
		g.Expect(l).NotTo(ContainSubstring("ct("), "the packet went through conntrack, which Windows cannot do for it")
	}
}

const rawReceiver = `
import socket, sys
proto, marker = int(sys.argv[1]), sys.argv[2].encode()
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, proto)
s.settimeout(15)
while True:
    data, addr = s.recvfrom(65535)
    if marker in data:
        print("received from", addr[0])
        break
`

const rawSender = `
import socket, sys, time
proto, marker, dst = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3]
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, proto)
for _ in range(int(sys.argv[4])):
    s.sendto(marker, (dst, 0))
    time.sleep(0.2)
`

// TestHostGetsProtocolsWindowsCannotTrack sends GRE and ESP from the external host to the node
// IP: the node host's stack receives them, and they reach it without conntrack, which on Windows
// drops every protocol but TCP, UDP and ICMP.
func TestHostGetsProtocolsWindowsCannotTrack(t *testing.T) {
	node, ext := converged(t, "win-proto")
	for _, p := range []struct {
		name  string
		proto int
	}{{"GRE", 47}, {"ESP", 50}} {
		t.Run(p.name, func(t *testing.T) {
			g := NewWithT(t)
			marker := fmt.Sprintf("winnet-%s-%d", p.name, time.Now().UnixNano())
			wait := background(t, node.NS, rawReceiver, fmt.Sprint(p.proto), marker)
			time.Sleep(300 * time.Millisecond) // the receiver's socket is open
			out, err := simnode.Exec(ext.NS, python, "-c", rawSender, fmt.Sprint(p.proto), marker, nodeIP, "10")
			g.Expect(err).NotTo(HaveOccurred(), out)
			out, err = wait()
			g.Expect(err).NotTo(HaveOccurred(), "the node host received no %s packet: %s", p.name, out)
			g.Expect(out).To(ContainSubstring("received from " + externalIP))
			expectFirstPassWithoutCT(g, node, regexp.MustCompile(fmt.Sprintf(`ipv4\([^)]*proto=%d[,)]`, p.proto)))
		})
	}
}

// tcpServerSendingFragNeeded accepts one TCP connection on externalIP:8080, reads the client's
// SYN from a raw socket to learn its initial sequence number, and answers with an ICMP
// "fragmentation needed" (type 3, code 4, next-hop MTU argv[2]) quoting the client's next segment,
// as a router on the path would. It keeps the connection open a few seconds.
const tcpServerSendingFragNeeded = `
import socket, struct, sys, time
ext, mtu = sys.argv[1], int(sys.argv[2])
sniff = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
sniff.settimeout(15)
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((ext, 8080)); srv.listen(1); srv.settimeout(15)
print("listening", flush=True)
conn, (client, cport) = srv.accept()
while True:
    pkt = sniff.recv(65535)
    ihl = (pkt[0] & 0xf) * 4
    sport, dport, seq = struct.unpack("!HHI", pkt[ihl:ihl+8])
    flags = pkt[ihl+13]
    if sport == cport and dport == 8080 and flags & 0x02:
        break
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b)//2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
inner_ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 1500, 0, 0x4000, 64, 6, 0, socket.inet_aton(client), socket.inet_aton(ext))
inner_ip = inner_ip[:10] + struct.pack("!H", csum(inner_ip)) + inner_ip[12:]
inner_tcp = struct.pack("!HHI", cport, 8080, (seq + 1) & 0xffffffff)
body = struct.pack("!HH", 0, mtu) + inner_ip + inner_tcp
icmp = struct.pack("!BBH", 3, 4, 0) + body
icmp = icmp[:2] + struct.pack("!H", csum(icmp)) + icmp[4:]
socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).sendto(icmp, (client, 0))
print("sent frag-needed for", client, cport, flush=True)
time.sleep(5)
`

const tcpClient = `
import socket, sys, time
s = socket.create_connection((sys.argv[1], 8080), timeout=10)
time.sleep(8)
`

// TestHostPMTUDiscoveryWithoutConntrack opens a TCP connection from the node host to the external
// host, which answers with an ICMP "fragmentation needed": the host's stack learns the path MTU
// (its route cache shows it), and the ICMP error reached the host without conntrack, where Windows
// would mark it invalid.
func TestHostPMTUDiscoveryWithoutConntrack(t *testing.T) {
	g := NewWithT(t)
	node, ext := converged(t, "win-pmtu")
	if err := simnode.DisableTxChecksum(ext.NS, simnode.HostIfName); err != nil {
		t.Fatal(err)
	}
	node.MustExec(t, "ip", "route", "flush", "cache")
	g.Expect(node.MustExec(t, "ip", "route", "get", externalIP)).NotTo(ContainSubstring("mtu"), "no path MTU is known before")

	server := background(t, ext.NS, tcpServerSendingFragNeeded, externalIP, "1300")
	time.Sleep(500 * time.Millisecond) // listening
	client := background(t, node.NS, tcpClient, externalIP)
	out, err := server()
	if err != nil {
		cout, _ := client()
		t.Fatalf("external host: %v\n%s\nnode host's client:\n%s", err, out, cout)
	}
	g.Expect(out).To(ContainSubstring("sent frag-needed for " + nodeIP))

	g.Eventually(func() string { return node.MustExec(t, "ip", "route", "get", externalIP) }).WithTimeout(5*time.Second).
		Should(MatchRegexp(`\bmtu 1300\b`), "the node host's stack got the ICMP error and learnt the path MTU")
	expectFirstPassWithoutCT(g, node, regexp.MustCompile(`icmp\(type=3`))

	// ofproto/trace of the same packet: the classifier sends it to the host, and it never enters ct().
	trace, err := node.OVS.Appctl("ofproto/trace", "br-int",
		fmt.Sprintf("in_port=%d,icmp,nw_src=%s,nw_dst=%s,nw_ttl=64,icmp_type=3,icmp_code=4", nodenetwork.UplinkOFPort, externalIP, nodeIP))
	g.Expect(err).NotTo(HaveOccurred(), trace)
	g.Expect(trace).To(MatchRegexp(`0\. icmp,in_port=\d+,nw_dst=192\.168\.10\.11,icmp_type=3, priority 210, cookie 0x[0-9a-f]+\n\s+LOCAL`))
	g.Expect(trace).NotTo(ContainSubstring("ct("))
	_, _ = client()
}
