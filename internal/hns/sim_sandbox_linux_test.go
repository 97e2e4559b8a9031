//go:build linux

package hns

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/test/hostcmd"
)

// newGUIDNetNS creates a network namespace named by a lower-case GUID, as an HCN namespace ID, and deletes it
// (with the resolver configuration of its name) at cleanup.
func newGUIDNetNS(t *testing.T) string {
	t.Helper()
	name := uuid.NewString()
	if out, err := hostcmd.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		_ = hostcmd.Command("ip", "netns", "delete", name).Run()
		_ = os.RemoveAll(filepath.Join(netnsEtcDir, name))
	})
	return name
}

// TestLinuxSimVNICAppearsWhenSandboxStarts checks the containerd-on-Windows order: attaching an endpoint
// creates no vNIC; the vNIC appears when the runtime starts the sandbox, with the endpoint's DNS settings as the
// namespace's resolver configuration; an endpoint attached to a running sandbox gets its vNIC at once.
func TestLinuxSimVNICAppearsWhenSandboxStarts(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	dns := DNS{Search: []string{"default.svc.cluster.local", "svc.cluster.local"}, Servers: []string{"10.96.0.10"}, Options: []string{"ndots:5"}}
	sb := newSandboxSim(t, dns)
	s, nodePath, sandboxes, podNS, n, ep := sb.sim, sb.nodePath, sb.dir, sb.podNS, sb.network, sb.endpoint

	// The namespace ID is a GUID, compared case-insensitively.
	g.Expect(s.AttachEndpoint(ctx, ep.ID, strings.ToUpper(podNS))).To(Succeed())
	g.Expect(hostLinks(t, nodePath)).To(ConsistOf("lo"), "no vNIC before the sandbox starts")
	g.Expect(linkNames(t, filepath.Join(DefaultNetNSDir, podNS))).To(ConsistOf("lo"))

	g.Expect(StartSandbox(sandboxes, podNS)).To(Succeed())
	g.Eventually(func() []string { return hostLinks(t, nodePath) }).Should(ConsistOf("lo", "pod-a"))
	// The host end appears first; the container end is named and the resolver written just after.
	g.Eventually(func() []string { return linkNames(t, filepath.Join(DefaultNetNSDir, podNS)) }).Should(ConsistOf("lo", "eth0"))
	var resolv []byte
	g.Eventually(func() (err error) {
		resolv, err = os.ReadFile(filepath.Join(netnsEtcDir, podNS, "resolv.conf"))
		return err
	}).Should(Succeed())
	g.Expect(string(resolv)).To(Equal("search default.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"))
	out, err := hostcmd.Command("ip", "netns", "exec", podNS, "cat", "/etc/resolv.conf").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	g.Expect(string(out)).To(Equal(string(resolv)), "the Pod's own resolver configuration")

	// A second endpoint attached to the running sandbox gets its vNIC at once.
	ep2, err := s.CreateEndpoint(ctx, EndpointSpec{Name: "pod-b", NetworkID: n.ID, IP: testIP(11)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.AttachEndpoint(ctx, ep2.ID, podNS)).To(Succeed())
	g.Expect(hostLinks(t, nodePath)).To(ConsistOf("lo", "pod-a", "pod-b"))

	g.Expect(s.DeleteEndpoint(ctx, ep.ID)).To(Succeed())
	g.Expect(hostLinks(t, nodePath)).To(ConsistOf("lo", "pod-b"))
	_, err = os.Stat(filepath.Join(netnsEtcDir, podNS, "resolv.conf"))
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "the resolver configuration goes with the vNIC")
}

// TestLinuxSimTrapInternalPortBeforeVNIC reproduces the trap of OVS on Windows: an interface of the port's name
// made before the sandbox starts (as OVS makes one for a port of type internal) leaves the endpoint's vNIC
// under another name, so the port carries none of the Pod's traffic.
func TestLinuxSimTrapInternalPortBeforeVNIC(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sb := newSandboxSim(t, DNS{})
	s, nodePath, sandboxes, podNS, ep := sb.sim, sb.nodePath, sb.dir, sb.podNS, sb.endpoint
	g.Expect(s.AttachEndpoint(ctx, ep.ID, podNS)).To(Succeed())
	// What OVS's netdev datapath does for an internal port: a tap of the port's name.
	nodeNS := filepath.Base(nodePath)
	if out, err := hostcmd.Command("ip", "-n", nodeNS, "tuntap", "add", "mode", "tap", "name", "pod-a").CombinedOutput(); err != nil {
		t.Fatalf("creating the tap: %v: %s", err, out)
	}
	g.Expect(StartSandbox(sandboxes, podNS)).To(Succeed())
	g.Eventually(func() []string { return hostLinks(t, nodePath) }).Should(ConsistOf("lo", "pod-a", trappedName(ep.ID)))
	g.Expect(inspectLink(t, nodePath, "pod-a").Kind).To(Equal("tuntap"), "the port's interface is OVS's own, not the Pod's")
	g.Expect(s.DeleteEndpoint(ctx, ep.ID)).To(Succeed())
	g.Expect(hostLinks(t, nodePath)).To(ConsistOf("lo", "pod-a"), "the endpoint's vNIC goes; OVS's tap is OVS's")
}

// testIP is the address .n of testSubnet.
func testIP(n byte) netip.Addr {
	a := testSubnet.Addr().As4()
	a[3] = n
	return netip.AddrFrom4(a)
}

// sandboxSim is a simulator whose vNICs wait for the sandbox, with a network, a GUID-named Pod namespace and
// an endpoint "pod-a" (with the DNS settings) not yet attached.
type sandboxSim struct {
	sim                  *Sim
	nodePath, dir, podNS string
	network              *Network
	endpoint             *Endpoint
}

func newSandboxSim(t *testing.T, dns DNS) sandboxSim {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	sb := sandboxSim{dir: t.TempDir()}
	sb.sim, sb.nodePath = newSimOnNode(t, false, LinuxSimOptions{SandboxDir: sb.dir})
	var err error
	sb.network, err = sb.sim.CreateTransparentNetwork(ctx, linuxNetworkSpec())
	g.Expect(err).NotTo(HaveOccurred())
	sb.podNS = newGUIDNetNS(t)
	sb.endpoint, err = sb.sim.CreateEndpoint(ctx, EndpointSpec{Name: "pod-a", NetworkID: sb.network.ID, IP: testIP(10), DNS: dns})
	g.Expect(err).NotTo(HaveOccurred())
	return sb
}
