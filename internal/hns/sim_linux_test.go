//go:build linux

package hns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/winnet-io/winnet/test/hostcmd"
)

// newNetNS creates a named network namespace with ip netns and deletes it at cleanup. The Linux-backed tests need
// root and iproute2; without them they fail, never skip.
func newNetNS(t *testing.T, prefix string) (name, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("the Linux-backed HNS simulator test needs root to create network namespaces and veth pairs (euid %d); run it as root", os.Geteuid())
	}
	if err := hostcmd.Check("ip"); err != nil {
		t.Fatalf("the Linux-backed HNS simulator test needs ip netns: %v", err)
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	name = prefix + "-" + hex.EncodeToString(suffix)
	if out, err := hostcmd.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := hostcmd.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns delete %s: %v: %s", name, err, out)
		}
	})
	return name, filepath.Join(DefaultNetNSDir, name)
}

// inNetNS runs fn in the namespace at path.
func inNetNS(t *testing.T, path string, fn func()) {
	t.Helper()
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		fn()
		return nil
	})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
}

func linkNames(t *testing.T, path string) []string {
	t.Helper()
	var names []string
	inNetNS(t, path, func() {
		links, err := redump(netlink.LinkList)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		for _, l := range links {
			names = append(names, l.Attrs().Name)
		}
	})
	return names
}

// containerEnd describes the interface an attached endpoint has inside its namespace.
type containerEnd struct {
	MAC     string
	Addrs   []string
	Up      bool
	Gateway string
}

func inspectContainerEnd(t *testing.T, path, ifName string) containerEnd {
	t.Helper()
	g := NewWithT(t)
	var got containerEnd
	inNetNS(t, path, func() {
		link, err := netlink.LinkByName(ifName)
		g.Expect(err).NotTo(HaveOccurred(), "interface %q in %s", ifName, path)
		got.MAC = link.Attrs().HardwareAddr.String()
		got.Up = link.Attrs().Flags&net.FlagUp != 0
		addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
		g.Expect(err).NotTo(HaveOccurred())
		for _, a := range addrs {
			got.Addrs = append(got.Addrs, a.IPNet.String())
		}
		routes, err := netlink.RouteList(link, netlink.FAMILY_V4)
		g.Expect(err).NotTo(HaveOccurred())
		for _, r := range routes {
			if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
				got.Gateway = r.Gw.String()
			}
		}
	})
	return got
}

func TestLinuxSim(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	_, nodePath := newNodeNS(t, false)
	podName, podPath := newNetNS(t, "whns-pod")
	_, pod2Path := newNetNS(t, "whns-pod2")

	s, err := NewLinuxSim(LinuxSimOptions{HostNetNS: nodePath})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(s.Close()).To(Succeed()) })

	n, err := s.CreateTransparentNetwork(ctx, linuxNetworkSpec())
	g.Expect(err).NotTo(HaveOccurred())

	// Create: an endpoint attached to nothing has no vNIC, so nothing appears on the host.
	mac := net.HardwareAddr{0x00, 0x15, 0x5d, 0x01, 0x02, 0x03}
	a, err := s.CreateEndpoint(ctx, EndpointSpec{Name: "pod-a", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.10"), MAC: mac})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(hostLinks(t, nodePath)).To(ConsistOf("lo"))

	// Attach by namespace name: a veth pair whose host end is named after the endpoint and up, and whose
	// container end is eth0 with the endpoint's MAC, IP and default route.
	g.Expect(s.AttachEndpoint(ctx, a.ID, podName)).To(Succeed())
	g.Expect(hostLinks(t, nodePath)).To(ConsistOf("lo", "pod-a"))
	inNetNS(t, nodePath, func() {
		link, err := netlink.LinkByName("pod-a")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(link.Type()).To(Equal("veth"))
		g.Expect(link.Attrs().Flags & net.FlagUp).NotTo(BeZero())
	})
	g.Expect(inspectContainerEnd(t, podPath, "eth0")).To(Equal(containerEnd{
		MAC: mac.String(), Addrs: []string{"10.244.1.10/24"}, Up: true, Gateway: "10.244.1.1",
	}))
	inNetNS(t, podPath, func() {
		txChecksum, err := ethtoolValue("eth0", unix.ETHTOOL_GTXCSUM, 0)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(txChecksum).To(BeZero(), "the container end computes its checksums, as a vNIC does")
	})
	g.Expect(s.AttachEndpoint(ctx, a.ID, podName)).To(Succeed(), "attaching again is a no-op")
	g.Expect(linkNames(t, podPath)).To(ConsistOf("lo", "eth0"))

	// The pair carries packets: give the host end the gateway address and ping it from the Pod.
	inNetNS(t, nodePath, func() {
		link, err := netlink.LinkByName("pod-a")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(netlink.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 244, 1, 1), Mask: net.CIDRMask(24, 32)}})).To(Succeed())
	})
	out, err := hostcmd.Command("ip", "netns", "exec", podName, "ping", "-c", "1", "-W", "2", "10.244.1.1").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "ping from the Pod to the host end: %s", out)

	// A second endpoint with a long name, attached by path to the same namespace, becomes eth1; its host end
	// carries the truncated name.
	long := "coredns-7db6d8ff4d-x2b9z"
	b, err := s.CreateEndpoint(ctx, EndpointSpec{Name: long, NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.11")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.AttachEndpoint(ctx, b.ID, podPath)).To(Succeed())
	g.Expect(hostLinks(t, nodePath)).To(ContainElement(LinuxInterfaceName(long)))
	g.Expect(inspectContainerEnd(t, podPath, "eth1")).To(Equal(containerEnd{
		MAC: b.MAC.String(), Addrs: []string{"10.244.1.11/24"}, Up: true, Gateway: "10.244.1.1",
	}))

	// An endpoint name another endpoint has, or an interface of the host has, is refused and leaves no state.
	_, err = s.CreateEndpoint(ctx, EndpointSpec{Name: "pod-a", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.12")})
	g.Expect(err).To(MatchError(ContainSubstring(`interface "pod-a" already exists`)))
	inNetNS(t, nodePath, func() {
		g.Expect(netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "taken"}, PeerName: "taken-peer"})).To(Succeed())
	})
	_, err = s.CreateEndpoint(ctx, EndpointSpec{Name: "taken", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.12")})
	g.Expect(err).To(MatchError(ContainSubstring(`interface "taken" already exists`)))
	inNetNS(t, nodePath, func() {
		link, err := netlink.LinkByName("taken")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(netlink.LinkDel(link)).To(Succeed())
	})
	list, err := s.ListEndpoints(ctx, n.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(HaveLen(2))

	// Attaching to a namespace that does not exist is ErrNotFound and leaves the endpoint unattached.
	c, err := s.CreateEndpoint(ctx, EndpointSpec{Name: "pod-c", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.13")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.AttachEndpoint(ctx, c.ID, "whns-no-such-ns")).To(MatchError(ErrNotFound))
	g.Expect(hostLinks(t, nodePath)).NotTo(ContainElement("pod-c"))
	got, err := s.GetEndpointByName(ctx, "pod-c")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.NamespaceID).To(BeEmpty())

	// Detach: the pair goes, from the Pod and from the host; the endpoint can be attached elsewhere.
	g.Expect(s.DetachEndpoint(ctx, a.ID, podName)).To(Succeed())
	g.Expect(linkNames(t, podPath)).To(ConsistOf("lo", "eth1"))
	g.Expect(hostLinks(t, nodePath)).NotTo(ContainElement("pod-a"))
	g.Expect(s.DetachEndpoint(ctx, a.ID, podName)).To(Succeed(), "detaching again is a no-op")
	g.Expect(s.AttachEndpoint(ctx, a.ID, pod2Path)).To(Succeed())
	g.Expect(inspectContainerEnd(t, pod2Path, "eth0")).To(Equal(containerEnd{
		MAC: mac.String(), Addrs: []string{"10.244.1.10/24"}, Up: true, Gateway: "10.244.1.1",
	}))

	// Delete: both ends go.
	g.Expect(s.DeleteEndpoint(ctx, a.ID)).To(Succeed())
	g.Expect(hostLinks(t, nodePath)).NotTo(ContainElement("pod-a"))
	g.Expect(linkNames(t, pod2Path)).To(ConsistOf("lo"))
	g.Expect(s.DeleteEndpoint(ctx, a.ID)).To(Succeed(), "deleting again is a no-op")

	// Reboot: every pair the simulator created is gone, in the host and in the Pods, and so is the HNS state.
	g.Expect(s.Reboot(ctx)).To(Succeed())
	g.Expect(hostLinks(t, nodePath)).To(ConsistOf("lo"))
	g.Expect(linkNames(t, podPath)).To(ConsistOf("lo"))
	_, err = s.GetNetworkByName(ctx, "winnet")
	g.Expect(err).To(MatchError(ErrNotFound))
	_, err = s.GetEndpointByName(ctx, long)
	g.Expect(err).To(MatchError(ErrNotFound))

	// The host is usable again after the reboot.
	n, err = s.CreateTransparentNetwork(ctx, linuxNetworkSpec())
	g.Expect(err).NotTo(HaveOccurred())
	a, err = s.CreateEndpoint(ctx, EndpointSpec{Name: "pod-a", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.10")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.AttachEndpoint(ctx, a.ID, podName)).To(Succeed())
	g.Expect(linkNames(t, podPath)).To(ConsistOf("lo", "eth0"))

	// Deleting the network deletes its endpoints' pairs.
	g.Expect(s.DeleteNetwork(ctx, n.ID)).To(Succeed())
	g.Expect(hostLinks(t, nodePath)).To(ConsistOf("lo"))
	g.Expect(linkNames(t, podPath)).To(ConsistOf("lo"))
}

// TestLinuxSimPodNamespaceGone checks that an endpoint whose Pod namespace vanished (the pair with it) can still
// be detached and deleted without error.
func TestLinuxSimPodNamespaceGone(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	_, nodePath := newNodeNS(t, false)
	podName, _ := newNetNS(t, "whns-pod")

	s, err := NewLinuxSim(LinuxSimOptions{HostNetNS: nodePath})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(s.Close()).To(Succeed()) })
	n, err := s.CreateTransparentNetwork(ctx, linuxNetworkSpec())
	g.Expect(err).NotTo(HaveOccurred())
	ep, err := s.CreateEndpoint(ctx, EndpointSpec{Name: "pod-a", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.10")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.AttachEndpoint(ctx, ep.ID, podName)).To(Succeed())

	// Deleting the namespace destroys the container end and with it the host end.
	out, err := hostcmd.Command("ip", "netns", "delete", podName).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	g.Eventually(func() []string { return hostLinks(t, nodePath) }).Should(ConsistOf("lo"))

	g.Expect(s.DetachEndpoint(ctx, ep.ID, podName)).To(Succeed(), "the namespace is gone: nothing to detach")
	got, err := s.GetEndpointByName(ctx, "pod-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.NamespaceID).To(BeEmpty())
	g.Expect(s.DeleteEndpoint(ctx, ep.ID)).To(Succeed())
	out, err = hostcmd.Command("ip", "netns", "add", podName).CombinedOutput() // for the cleanup's delete
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	_, err = s.GetEndpointByName(ctx, "pod-a")
	g.Expect(err).To(MatchError(ErrNotFound))
}

// TestLinuxSimConcurrent attaches and deletes endpoints from many goroutines at once: each gets its own pair,
// endpoints attached to one namespace get distinct interface names there, the state file ends with the newest
// state, and nothing is left afterwards.
func TestLinuxSimConcurrent(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	_, nodePath := newNodeNS(t, false)
	sharedName, sharedPath := newNetNS(t, "whns-shared")
	const own, shared = 6, 4
	var ownNames []string
	for range own {
		name, _ := newNetNS(t, "whns-pod")
		ownNames = append(ownNames, name)
	}

	stateFile := filepath.Join(t.TempDir(), "hns-sim.json")
	onDisk := func() simState {
		state, err := readSimState(stateFile)
		g.Expect(err).NotTo(HaveOccurred())
		return state
	}
	s, err := NewLinuxSim(LinuxSimOptions{HostNetNS: nodePath, StateFile: stateFile})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(s.Close()).To(Succeed()) })
	n, err := s.CreateTransparentNetwork(ctx, linuxNetworkSpec())
	g.Expect(err).NotTo(HaveOccurred())

	var wg sync.WaitGroup
	errs := make(chan error, own+shared)
	ids := make([]string, own+shared)
	for i := range own + shared {
		wg.Go(func() {
			ep, err := s.CreateEndpoint(ctx, EndpointSpec{Name: fmt.Sprintf("pod-%d", i), NetworkID: n.ID, IP: netip.AddrFrom4([4]byte{10, 244, 1, byte(10 + i)})})
			if err != nil {
				errs <- err
				return
			}
			ids[i] = ep.ID
			target := sharedName
			if i < own {
				target = ownNames[i]
			}
			errs <- s.AttachEndpoint(ctx, ep.ID, target)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(hostLinks(t, nodePath)).To(HaveLen(1+own+shared), "one host end per endpoint")
	g.Expect(linkNames(t, sharedPath)).To(ConsistOf("lo", "eth0", "eth1", "eth2", "eth3"))
	for i := range own + shared {
		ep, err := s.GetEndpointByName(ctx, fmt.Sprintf("pod-%d", i))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ep.NamespaceID).NotTo(BeEmpty())
	}
	g.Expect(onDisk().Endpoints).To(HaveLen(own+shared), "the last write holds every endpoint")
	for _, ep := range onDisk().Endpoints {
		g.Expect(ep.NamespaceID).NotTo(BeEmpty(), "and every attachment: %s", ep.Name)
	}

	for _, id := range ids {
		wg.Go(func() { g.Expect(s.DeleteEndpoint(ctx, id)).To(Succeed()) })
	}
	wg.Wait()
	g.Expect(hostLinks(t, nodePath)).To(ConsistOf("lo"))
	g.Expect(linkNames(t, sharedPath)).To(ConsistOf("lo"))
	list, err := s.ListEndpoints(ctx, n.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(BeEmpty())
	g.Expect(onDisk().Endpoints).To(BeEmpty())
}

// redump runs a netlink dump again, a few times, when the kernel interrupted it because the table changed
// meanwhile (links appear and go while the tests look).
func redump[T any](dump func() (T, error)) (T, error) {
	v, err := dump()
	for range 5 {
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
		v, err = dump()
	}
	return v, err
}
