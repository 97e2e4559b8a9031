package binaries

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// TestTakeoverOnSimulatedNode runs the real `winnet-agent takeover` on a simulated node whose HNS
// simulator state was seeded with what flannel's win-overlay backend and kube-proxy's winkernel mode
// leave (internal/hns/sim_foreign.go): --dry-run lists it and changes nothing, --from flannel alone
// refuses (exit 1) because kube-proxy's load balancer reaches flannel's network, and the takeover
// removes exactly their leftovers, leaving containerd's NAT network and its load balancer.
func TestTakeoverOnSimulatedNode(t *testing.T) {
	g := NewWithT(t)
	if os.Geteuid() != 0 {
		t.Fatalf("this test needs root to create the simulated node's network namespace (euid %d)", os.Geteuid())
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	nsName := "wn-takeover-" + hex.EncodeToString(suffix)
	if out, err := hostcmd.Command("ip", "netns", "add", nsName).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = hostcmd.Command("ip", "netns", "delete", nsName).Run() })
	nsPath := filepath.Join("/run/netns", nsName)

	dir := t.TempDir()
	stateDir, confDir := filepath.Join(dir, "state"), filepath.Join(dir, "net.d")
	subnetFile := filepath.Join(dir, "run", "flannel", "subnet.env")
	stateFile := filepath.Join(stateDir, "hns-sim.json")
	for _, d := range []string{stateDir, confDir, filepath.Dir(subnetFile)} {
		g.Expect(os.MkdirAll(d, 0o700)).To(Succeed())
	}
	g.Expect(os.WriteFile(filepath.Join(confDir, "10-flannel.conf"), []byte(`{"name":"vxlan0","type":"flannel","delegate":{"type":"win-overlay"}}`), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(subnetFile, []byte("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"), 0o600)).To(Succeed())

	// Seed the node as flanneld and kube-proxy left it.
	ctx := context.Background()
	sim, err := hns.NewLinuxSim(hns.LinuxSimOptions{HostNetNS: nsPath, StateFile: stateFile})
	g.Expect(err).NotTo(HaveOccurred())
	overlay, err := sim.CreateNetwork(ctx, hns.ForeignNetworkSpec{Type: hns.Overlay, Name: "vxlan0", AdapterName: "Ethernet0",
		Subnet: netip.MustParsePrefix("10.244.1.0/24"), Gateway: netip.MustParseAddr("10.244.1.1"), HostRoute: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sim.AddRemoteSubnetPolicy(overlay.ID, hns.RemoteSubnetPolicy{DestinationPrefix: netip.MustParsePrefix("10.244.2.0/24"),
		ProviderAddress: netip.MustParseAddr("192.168.101.12"), DRMAC: "0e:2a:0a:f4:02:00", IsolationID: 4096})).To(Succeed())
	vip, err := sim.CreateSourceVIPEndpoint(ctx, overlay.ID, netip.MustParseAddr("10.244.1.3"), net.HardwareAddr{0x00, 0x15, 0x5d, 0x65, 0x00, 0x11})
	g.Expect(err).NotTo(HaveOccurred())
	remote, err := sim.CreateRemoteEndpoint(ctx, overlay.ID, netip.MustParseAddr("10.244.2.7"), net.HardwareAddr{0x0e, 0x2a, 0x0a, 0xf4, 0x02, 0x07})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = sim.CreateLoadBalancer(ctx, hns.LoadBalancer{FrontendVIPs: []string{"10.96.0.10"}, SourceVIP: vip.IP.String(), Endpoints: []string{remote.ID}})
	g.Expect(err).NotTo(HaveOccurred())
	nat, err := sim.CreateNetwork(ctx, hns.ForeignNetworkSpec{Type: hns.NAT, Name: "nat", Subnet: netip.MustParsePrefix("172.30.0.0/16"), Gateway: netip.MustParseAddr("172.30.0.1")})
	g.Expect(err).NotTo(HaveOccurred())
	natEP, err := sim.CreateEndpoint(ctx, hns.EndpointSpec{Name: "build-container", NetworkID: nat.ID, IP: netip.MustParseAddr("172.30.0.9")})
	g.Expect(err).NotTo(HaveOccurred())
	natLB, err := sim.CreateLoadBalancer(ctx, hns.LoadBalancer{FrontendVIPs: []string{"172.30.0.100"}, Endpoints: []string{natEP.ID}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sim.Close()).To(Succeed())
	seeded, err := os.ReadFile(stateFile)
	g.Expect(err).NotTo(HaveOccurred())

	agent := filepath.Join(buildCommands(t), "winnet-agent")
	run := func(args ...string) (string, int) {
		args = append([]string{"takeover", "--netns", nsPath, "--state-dir", stateDir, "--cni-conf-dir", confDir, "--flannel-subnet-file", subnetFile}, args...)
		out, err := hostcmd.Command(agent, args...).CombinedOutput()
		var exit interface{ ExitCode() int }
		if errors.As(err, &exit) {
			return string(out), exit.ExitCode()
		}
		g.Expect(err).NotTo(HaveOccurred(), string(out))
		return string(out), 0
	}

	out, code := run("--from", "flannel,kube-proxy", "--dry-run")
	g.Expect(code).To(Equal(0), out)
	g.Expect(strings.Count(out, "would remove: ")).To(Equal(6), out) // a load balancer, 2 endpoints, the network, the conf, the subnet file
	g.Expect(out).To(ContainSubstring(`would remove: flannel's HNS network "vxlan0" (Overlay, 10.244.1.0/24, adapter "Ethernet0") with its RemoteSubnetRoute policies 10.244.2.0/24 via 192.168.101.12`))
	g.Expect(out).To(ContainSubstring(`leaving: network "nat" (NAT)`))
	g.Expect(os.ReadFile(stateFile)).To(Equal(seeded), "a dry run changes nothing")

	out, code = run("--from", "flannel")
	g.Expect(code).To(Equal(1), out)
	g.Expect(out).To(ContainSubstring("refusing: HNS load balancer"))
	g.Expect(out).To(ContainSubstring("add --from kube-proxy"))
	g.Expect(os.ReadFile(stateFile)).To(Equal(seeded), "a refused takeover changes nothing")

	out, code = run("--from", "flannel,kube-proxy")
	g.Expect(code).To(Equal(0), out)
	g.Expect(strings.Count(out, "removed: ")).To(Equal(6), out)
	after, err := hns.NewLinuxSim(hns.LinuxSimOptions{HostNetNS: nsPath, StateFile: stateFile})
	g.Expect(err).NotTo(HaveOccurred())
	nets, err := after.ListNetworks(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(nets).To(HaveLen(1))
	g.Expect(nets[0].Name).To(Equal("nat"))
	lbs, err := after.ListLoadBalancers(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lbs).To(Equal([]hns.LoadBalancer{*natLB}))
	g.Expect(filepath.Join(confDir, "10-flannel.conf")).NotTo(BeAnExistingFile())
	g.Expect(subnetFile).NotTo(BeAnExistingFile())
	g.Expect(after.Close()).To(Succeed())

	out, code = run("--from", "flannel,kube-proxy")
	g.Expect(code).To(Equal(0), out)
	g.Expect(out).To(ContainSubstring("nothing to remove"))
}
