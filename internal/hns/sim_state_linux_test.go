//go:build linux

package hns

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
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
	open := func() *Sim {
		s, err := NewLinuxSim(LinuxSimOptions{HostNetNS: nodePath, StateFile: stateFile})
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { _ = s.Close() })
		return s
	}

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
	out, err := exec.Command("ip", "-n", filepath.Base(nodePath), "link", "del", "pod-b").CombinedOutput()
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
