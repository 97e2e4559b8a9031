//go:build linux

package hns

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"

	"github.com/winnet-io/winnet/test/hostcmd"
)

// TestLinuxSimStateFile checks that a simulator with a state file hands its networks, endpoints and attachments
// to the next simulator on the same file (an agent restart), drops attached endpoints whose veths are gone, keeps
// unattached ones (which have none), and that Reboot leaves an empty state.
func TestLinuxSimStateFile(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	_, nodePath := newNodeNS(t, false)
	podName, podPath := newNetNS(t, "whns-pod")
	pod2Name, _ := newNetNS(t, "whns-pod2")
	stateFile := filepath.Join(t.TempDir(), "state", "hns-sim.json")
	open := simsOnStateFile(t, nodePath, stateFile)

	first := open()
	n, err := first.CreateTransparentNetwork(ctx, linuxNetworkSpec())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.EnableOVSExtension(ctx, n.ID)).To(Succeed())
	a, err := first.CreateEndpoint(ctx, EndpointSpec{Name: "pod-a", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.10")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.AttachEndpoint(ctx, a.ID, podName)).To(Succeed())
	b, err := first.CreateEndpoint(ctx, EndpointSpec{Name: "pod-b", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.11")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.AttachEndpoint(ctx, b.ID, pod2Name)).To(Succeed())
	c, err := first.CreateEndpoint(ctx, EndpointSpec{Name: "pod-c", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.12")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.Close()).To(Succeed())

	// The file is the state, readable by a person.
	raw, err := os.ReadFile(stateFile)
	g.Expect(err).NotTo(HaveOccurred())
	var onDisk simState
	g.Expect(json.Unmarshal(raw, &onDisk)).To(Succeed())
	g.Expect(onDisk.Networks).To(HaveLen(1))
	g.Expect(onDisk.Endpoints).To(HaveLen(3))
	g.Expect(onDisk.Endpoints[0].MAC).To(Equal(a.MAC.String()))

	// pod-b's pair disappears while no simulator runs: the next one drops it and keeps the rest.
	out, err := hostcmd.Command("ip", "-n", filepath.Base(nodePath), "link", "del", "pod-b").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)

	second := open()
	got, err := second.GetNetworkByName(ctx, "winnet")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(*got).To(Equal(*n))
	enabled, err := second.OVSExtensionEnabled(ctx, n.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(enabled).To(BeTrue())
	gotA, err := second.GetEndpointByName(ctx, "pod-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(*gotA).To(Equal(Endpoint{
		ID: a.ID, Name: "pod-a", NetworkID: n.ID, IP: a.IP, PrefixLength: 24, MAC: a.MAC, Gateway: a.Gateway,
		NamespaceID: podName,
	}))
	_, err = second.GetEndpointByName(ctx, "pod-b")
	g.Expect(err).To(MatchError(ErrNotFound), "endpoint %s lost its veth pair", b.ID)
	gotC, err := second.GetEndpointByName(ctx, "pod-c")
	g.Expect(err).NotTo(HaveOccurred(), "an unattached endpoint has no pair to lose")
	g.Expect(gotC.ID).To(Equal(c.ID))
	_, err = second.CreateEndpoint(ctx, EndpointSpec{Name: "pod-c", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.13")})
	g.Expect(err).To(MatchError(ContainSubstring(`interface "pod-c" already exists`)), "the loaded endpoint keeps its name")
	_, err = second.CreateTransparentNetwork(ctx, linuxNetworkSpec())
	g.Expect(err).To(MatchError(ErrAdapterInUse), "the loaded network still holds its adapter")

	// The loaded endpoint works like one created in this process: detach and delete act on its pair.
	g.Expect(second.DetachEndpoint(ctx, a.ID, podName)).To(Succeed())
	g.Expect(linkNames(t, podPath)).To(ConsistOf("lo"))
	g.Expect(second.AttachEndpoint(ctx, a.ID, podName)).To(Succeed())
	g.Expect(linkNames(t, podPath)).To(ConsistOf("lo", "eth0"))

	// Reboot removes the pairs the loaded state describes and leaves an empty state for the next process.
	g.Expect(second.Reboot(ctx)).To(Succeed())
	g.Expect(hostLinks(t, nodePath)).To(ConsistOf("lo"))
	g.Expect(second.Close()).To(Succeed())
	third := open()
	_, err = third.GetNetworkByName(ctx, "winnet")
	g.Expect(err).To(MatchError(ErrNotFound))
}

// TestLinuxSimStateFileMissingOrInvalid checks that a missing state file is an empty state and that a corrupt
// one is an error rather than a silent reset.
func TestLinuxSimStateFileMissingOrInvalid(t *testing.T) {
	g := NewWithT(t)
	_, nodePath := newNodeNS(t, false)
	stateFile := filepath.Join(t.TempDir(), "hns-sim.json")

	s, err := NewLinuxSim(LinuxSimOptions{HostNetNS: nodePath, StateFile: stateFile})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = s.GetNetworkByName(context.Background(), "winnet")
	g.Expect(err).To(MatchError(ErrNotFound))
	g.Expect(s.Close()).To(Succeed())
	g.Expect(stateFile).NotTo(BeAnExistingFile(), "reads do not write the state")

	g.Expect(os.WriteFile(stateFile, []byte("{not json"), 0o600)).To(Succeed())
	_, err = NewLinuxSim(LinuxSimOptions{HostNetNS: nodePath, StateFile: stateFile})
	g.Expect(err).To(MatchError(ContainSubstring("decoding HNS simulator state")))
}

// TestLinuxSimFinishesAHalfMadeVNIC checks that a simulator loading its state finishes a vNIC that
// realise left half made — the agent, in whose process the simulator runs, killed between creating
// the pair and configuring its container end — as HNS, a service of its own on Windows, would have:
// one container end as born (not renamed, down, no address) and one renamed but not configured.
func TestLinuxSimFinishesAHalfMadeVNIC(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	_, nodePath := newNodeNS(t, false)
	podA, podAPath := newNetNS(t, "whns-pod")
	podB, podBPath := newNetNS(t, "whns-pod2")
	stateFile := filepath.Join(t.TempDir(), "hns-sim.json")
	open := simsOnStateFile(t, nodePath, stateFile)
	first := open()
	n, err := first.CreateTransparentNetwork(ctx, linuxNetworkSpec())
	g.Expect(err).NotTo(HaveOccurred())
	a, err := first.CreateEndpoint(ctx, EndpointSpec{Name: "pod-a", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.10")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.AttachEndpoint(ctx, a.ID, podA)).To(Succeed())
	b, err := first.CreateEndpoint(ctx, EndpointSpec{Name: "pod-b", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.11")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.AttachEndpoint(ctx, b.ID, podB)).To(Succeed())
	g.Expect(first.Close()).To(Succeed())

	ip := func(args ...string) {
		out, err := hostcmd.Command("ip", args...).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "ip %v: %s", args, out)
	}
	// pod-a's container end as LinkAdd left it; pod-b's renamed, nothing more.
	ip("-n", podA, "link", "set", "eth0", "down")
	ip("-n", podA, "addr", "flush", "dev", "eth0")
	ip("-n", podA, "link", "set", "eth0", "name", peerName(a.ID))
	ip("-n", podB, "link", "set", "eth0", "down")
	ip("-n", podB, "addr", "flush", "dev", "eth0")

	second := open()
	for _, c := range []struct {
		path string
		ep   *Endpoint
	}{{podAPath, a}, {podBPath, b}} {
		inNetNS(t, c.path, func() {
			l, err := netlink.LinkByName("eth0")
			g.Expect(err).NotTo(HaveOccurred(), "endpoint %s's container end is named eth0", c.ep.Name)
			g.Expect(l.Attrs().Flags&net.FlagUp).NotTo(BeZero(), "endpoint %s's container end is up", c.ep.Name)
			addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(addrs).To(HaveLen(1))
			g.Expect(addrs[0].IPNet.String()).To(Equal(c.ep.IP.String() + "/24"))
			routes, err := netlink.RouteList(l, netlink.FAMILY_V4)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(c.ep.Gateway.IsValid()).To(BeTrue())
			g.Expect(routes).To(ContainElement(HaveField("Gw", Equal(net.IP(c.ep.Gateway.AsSlice())))), "endpoint %s has its default route", c.ep.Name)
		})
	}
	got, err := second.GetEndpointByName(ctx, "pod-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.NamespaceID).To(Equal(podA))
}

// simsOnStateFile returns a function that starts a simulator on the node namespace and the state file, as
// an agent starting (again) does; each is closed when the test ends.
func simsOnStateFile(t *testing.T, nodePath, stateFile string) func() *Sim {
	return func() *Sim {
		t.Helper()
		s, err := NewLinuxSim(LinuxSimOptions{HostNetNS: nodePath, StateFile: stateFile})
		if err != nil {
			t.Fatalf("starting the simulator on %s: %v", stateFile, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}
