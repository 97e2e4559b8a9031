package preflight

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/hns"
)

// TestLinuxServices: a daemon whose control socket answers runs; a socket left behind by a dead
// one (nobody listens) is present and not running; no socket is not installed.
func TestLinuxServices(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, "ovsdb-server.1234.ctl"))
	g.Expect(err).NotTo(HaveOccurred())
	defer ln.Close()
	dead, err := net.Listen("unix", filepath.Join(dir, "ovs-vswitchd.ctl"))
	g.Expect(err).NotTo(HaveOccurred())
	dead.(*net.UnixListener).SetUnlinkOnClose(false)
	g.Expect(dead.Close()).To(Succeed())

	f := gatherServices(context.Background(), Options{OVSRunDir: dir})
	g.Expect(f.Err).NotTo(HaveOccurred())
	g.Expect(f.Value[OVSDBService]).To(Equal(ServiceState{Present: true, Running: true, State: "answering on ovsdb-server.1234.ctl"}))
	g.Expect(f.Value[OVSVswitchdService]).To(Equal(ServiceState{Present: true, State: "not answering on ovs-vswitchd.ctl"}))
	g.Expect(checkOVSServices(&Facts{Services: f}).Status).To(Equal(Fail))

	f = gatherServices(context.Background(), Options{OVSRunDir: t.TempDir()})
	g.Expect(f.Value[OVSVswitchdService]).To(Equal(ServiceState{}))
}

// TestLinuxHNSFromSimulatorState: the simulator's state file answers winnet's network and its
// extension; without one, there is no network yet.
func TestLinuxHNSFromSimulatorState(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(os.Chmod(dir, 0o700)).To(Succeed())
	f := gatherHNS(context.Background(), Options{StateDir: dir, HNSNetwork: "winnet"})
	g.Expect(f.Err).NotTo(HaveOccurred())
	g.Expect(f.Source).To(Equal("HNS simulator"))
	g.Expect(f.Value).To(Equal(HNSInfo{Version: hns.SimVersion}))

	state := `{"version":1,"networks":[{"id":"N1","name":"other","adapterName":"eth9","ovsExtension":false},` +
		`{"id":"N2","name":"winnet","adapterName":"uplink0","ovsExtension":false}],"endpoints":[]}`
	g.Expect(os.WriteFile(filepath.Join(dir, SimStateFile), []byte(state), 0o600)).To(Succeed())
	f = gatherHNS(context.Background(), Options{StateDir: dir, HNSNetwork: "winnet"})
	g.Expect(f.Err).NotTo(HaveOccurred())
	g.Expect(f.Value.Network).NotTo(BeNil())
	g.Expect(f.Value.Network.AdapterName).To(Equal("uplink0"))
	g.Expect(checkOVSExtension(&Facts{HNS: f}).Status).To(Equal(Fail), "winnet's network without the extension")

	// kube-proxy's load balancers, seeded on a node taken over from it, are HNS's too.
	state = `{"version":1,"networks":[],"endpoints":[],"loadBalancers":[{"id":"LB1","frontendVIPs":["10.96.0.10"],"sourceVIP":"10.244.1.3"}]}`
	g.Expect(os.WriteFile(filepath.Join(dir, SimStateFile), []byte(state), 0o600)).To(Succeed())
	f = gatherHNS(context.Background(), Options{StateDir: dir, HNSNetwork: "winnet"})
	g.Expect(f.Err).NotTo(HaveOccurred())
	g.Expect(f.Value.LoadBalancers).To(Equal([]hns.LoadBalancer{{ID: "LB1", FrontendVIPs: []string{"10.96.0.10"}, SourceVIP: "10.244.1.3"}}))
	r := checkKubeProxy(&Facts{HNS: f, KubeProxyPods: Known([]string{}, "")})
	g.Expect(r.Status).To(Equal(Warn))
	g.Expect(r.Fix).To(ContainSubstring("winnet-agent takeover --from kube-proxy"))
}
