package preflight

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/securefs"
)

var now = time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)

// fitFacts are the facts of a converged, fit Windows node: every check passes.
func fitFacts() *Facts {
	node := &corev1.Node{}
	node.Name = "win-1"
	node.Status.NodeInfo.ContainerRuntimeVersion = "containerd://1.7.20"
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}}
	return &Facts{
		NodeName: "win-1", Platform: "windows", Now: now, Bridge: "br-int", CNIBinDir: `C:\opt\cni\bin`,
		OS:       Known(OSInfo{ProductName: "Windows Server 2022 Datacenter", DisplayVersion: "21H2", Build: 20348, UBR: 2700}, ""),
		Features: Known(map[string]bool{ContainersFeature: true, HyperVFeature: true}, ""),
		HNS: Known(HNSInfo{Version: hns.Version{Major: 15, Minor: 1}, ExtensionEnabled: true,
			Network: &hns.Network{Name: "winnet", AdapterName: "Ethernet"}}, ""),
		Services: Known(map[string]ServiceState{
			OVSDBService: {Present: true, Running: true}, OVSVswitchdService: {Present: true, Running: true}}, ""),
		OVSVersion:    Known("3.0.5", ""),
		Driver:        Known(DriverInfo{Installed: true, TestSigning: true}, ""),
		Node:          Known(node, ""),
		KubeProxyPods: Known([]string{}, ""),
		Containerd:    Known(ContainerdConfig{Path: DefaultContainerdConfig, Found: true, ConfDir: "c:/etc/cni/net.d", BinDirs: []string{"c:/opt/cni/bin"}}, ""),
		CNI:           Known(CNIDir{Dir: `C:\etc\cni\net.d`, Files: []string{"10-winnet.conflist", "99-loopback.conf"}}, ""),
		Uplink:        Known(UplinkInfo{NodeIP: netip.MustParseAddr("10.0.0.5"), Adapters: []AdapterInfo{{Name: "br-int", MTU: 1500, DHCP: true}}}, ""),
		Clock:         Known(ClockInfo{Local: now, Server: now.Add(-800 * time.Millisecond), RTT: 20 * time.Millisecond}, ""),
		Dirs: Known([]DirInfo{{What: "state directory", Path: `C:\ProgramData\winnet`, Exists: true},
			{What: "CNI configuration directory", Path: `C:\etc\cni\net.d`, Exists: true}}, ""),
	}
}

func run(f *Facts) map[string]Result {
	out := map[string]Result{}
	for _, r := range Run(context.Background(), Checks(), f).Results {
		out[r.Name] = r
	}
	return out
}

func TestFitNodePasses(t *testing.T) {
	g := NewWithT(t)
	rep := Run(context.Background(), Checks(), fitFacts())
	for _, r := range rep.Results {
		g.Expect(r.Status).To(Equal(Pass), "%s: %s", r.Name, r.Detail)
	}
	g.Expect(rep.ExitCode()).To(Equal(0))
	g.Expect(rep.Results).To(HaveLen(13))
}

// TestEachCheckFailsItsNode: each check against a node built to fail it (every other check still
// passes): without the check's code the node would pass.
func TestEachCheckFailsItsNode(t *testing.T) {
	cases := []struct {
		check  string
		want   Status
		detail string
		break_ func(f *Facts)
	}{
		{"windows-build", Fail, "build 17134", func(f *Facts) {
			f.OS = Known(OSInfo{ProductName: "Windows Server Datacenter", DisplayVersion: "1803", Build: 17134}, "")
		}},
		{"windows-build", Fail, "Access is denied", func(f *Facts) { f.OS = Failed[OSInfo](errors.New("Access is denied"), "") }},
		{"windows-features", Fail, "not enabled: Microsoft-Hyper-V", func(f *Facts) {
			f.Features = Known(map[string]bool{ContainersFeature: true}, "")
		}},
		{"hns", Fail, "HNS 7.2", func(f *Facts) { f.HNS.Value.Version = hns.Version{Major: 7, Minor: 2} }},
		{"hns", Fail, "cannot read HNS", func(f *Facts) { f.HNS = Failed[HNSInfo](errors.New("HNS call failed"), "") }},
		{"ovs-services", Fail, "not installed: ovs-vswitchd", func(f *Facts) { f.Services.Value[OVSVswitchdService] = ServiceState{} }},
		{"ovs-services", Fail, "not running: ovsdb-server (stopped)", func(f *Facts) {
			f.Services.Value[OVSDBService] = ServiceState{Present: true, State: "stopped"}
		}},
		{"ovs-version", Fail, "Open vSwitch 3.0.4", func(f *Facts) { f.OVSVersion = Known("3.0.4", "") }},
		{"ovs-version", Fail, "Open vSwitch 3.8.0", func(f *Facts) { f.OVSVersion = Known("3.8.0", "") }},
		{"ovs-version", Fail, "Open vSwitch 4.0.0", func(f *Facts) { f.OVSVersion = Known("4.0.0", "") }},
		{"ovs-version", Warn, "has not written its version", func(f *Facts) { f.OVSVersion = Known("", "") }},
		{"ovs-extension", Fail, `not enabled on the switch of HNS network "winnet"`, func(f *Facts) { f.HNS.Value.ExtensionEnabled = false }},
		{"driver-signing", Fail, "(ovsext) is not installed", func(f *Facts) { f.Driver.Value.Installed = false }},
		{"driver-signing", Warn, "test signing is off", func(f *Facts) { f.Driver.Value.TestSigning = false }},
		{"containerd", Fail, "containerd 1.5.18", func(f *Facts) {
			f.Node.Value.Status.NodeInfo.ContainerRuntimeVersion = "containerd://1.5.18"
		}},
		{"containerd", Fail, `"docker://20.10.9", not containerd`, func(f *Facts) {
			f.Node.Value.Status.NodeInfo.ContainerRuntimeVersion = "docker://20.10.9"
		}},
		{"containerd", Warn, "Node win-1 reports no container runtime", func(f *Facts) {
			f.Node.Value.Status.NodeInfo.ContainerRuntimeVersion = ""
		}},
		{"containerd", Warn, "Node win-1 does not exist yet", func(f *Facts) { f.Node = Known[*corev1.Node](nil, "") }},
		{"cni-config", Fail, "containerd reads 05-calico.conflist", func(f *Facts) {
			f.CNI.Value.Files = []string{"05-calico.conflist", "10-winnet.conflist"}
		}},
		{"cni-config", Fail, `containerd reads CNI configurations from C:\Program Files\containerd\cni\conf`, func(f *Facts) {
			f.Containerd = Known(ContainerdConfig{Path: DefaultContainerdConfig, ConfDir: `C:\Program Files\containerd\cni\conf`, BinDirs: []string{`C:\opt\cni\bin`}}, "")
		}},
		{"cni-config", Fail, `containerd runs CNI plugins from C:\cni\bin`, func(f *Facts) { f.Containerd.Value.BinDirs = []string{`C:\cni\bin`} }},
		{"kube-proxy", Fail, "Pod kube-system/kube-proxy-windows-x7k2p", func(f *Facts) {
			f.KubeProxyPods = Known([]string{"kube-system/kube-proxy-windows-x7k2p"}, "")
		}},
		{"kube-proxy", Warn, "HNS holds 2 load balancers", func(f *Facts) {
			f.HNS.Value.LoadBalancers = []hns.LoadBalancer{{ID: "A"}, {ID: "B"}}
		}},
		{"uplink", Fail, "no adapter holds the Node's InternalIP 10.0.0.5", func(f *Facts) { f.Uplink.Value.Adapters = nil }},
		{"uplink", Fail, "2 adapters hold the Node's InternalIP 10.0.0.5: Ethernet, Ethernet 2", func(f *Facts) {
			f.Uplink.Value.Adapters = []AdapterInfo{{Name: "Ethernet", MTU: 1500}, {Name: "Ethernet 2", MTU: 1500}}
		}},
		{"uplink", Warn, "MTU 1400: below 1500", func(f *Facts) { f.Uplink.Value.Adapters[0].MTU = 1400 }},
		{"uplink", Fail, "the Node has no InternalIP", func(f *Facts) { f.Uplink.Value.NodeIP = netip.Addr{} }},
		{"clock", Warn, "the node's clock is 2m", func(f *Facts) { f.Clock.Value.Server = now.Add(-2*time.Minute - 2*time.Second) }},
		{"clock", Fail, "the node's clock is 1h", func(f *Facts) { f.Clock.Value.Server = now.Add(time.Hour + 2*time.Second) }},
		{"directories", Fail, "not owned by the node's administrators", func(f *Facts) {
			f.Dirs.Value[0].Err = fmt.Errorf("owner S-1-5-21-1-2-3-1001: %w", securefs.ErrUntrustedOwner)
		}},
		{"directories", Warn, "is open to others", func(f *Facts) {
			f.Dirs.Value[1].Err = fmt.Errorf("BUILTIN\\Users may write: %w", securefs.ErrTooOpen)
		}},
	}
	// also are the checks that read the same broken fact.
	also := map[string][]string{"cannot read HNS": {"ovs-extension"}}
	for _, tc := range cases {
		t.Run(tc.check+"/"+tc.detail, func(t *testing.T) {
			g := NewWithT(t)
			f := fitFacts()
			tc.break_(f)
			got := run(f)
			g.Expect(got[tc.check].Status).To(Equal(tc.want), got[tc.check].Detail)
			g.Expect(got[tc.check].Detail).To(ContainSubstring(tc.detail))
			g.Expect(got[tc.check].Fix).NotTo(BeEmpty(), "a check that does not pass says what to do")
			for name, r := range got {
				if name != tc.check && !slices.Contains(also[tc.detail], name) {
					g.Expect(r.Status).To(Equal(Pass), "only %s is broken; %s: %s", tc.check, name, r.Detail)
				}
			}
		})
	}
}

// TestBeforeInstall: a fit node before winnet's install (no HNS network, no conflist, directories
// absent, the IP on the physical adapter) passes.
func TestBeforeInstall(t *testing.T) {
	g := NewWithT(t)
	f := fitFacts()
	f.HNS.Value.Network, f.HNS.Value.ExtensionEnabled = nil, false
	f.CNI.Value.Files = []string{}
	f.Dirs = Known([]DirInfo{{What: "state directory", Path: `C:\ProgramData\winnet`}}, "")
	f.Uplink.Value.Adapters = []AdapterInfo{{Name: "Ethernet", MTU: 1500}}
	got := run(f)
	for name, r := range got {
		g.Expect(r.Status).To(Equal(Pass), "%s: %s", name, r.Detail)
	}
	g.Expect(got["ovs-extension"].Detail).To(ContainSubstring("no winnet network yet"))
	g.Expect(got["cni-config"].Detail).To(ContainSubstring("holds no configuration yet"))
	g.Expect(got["uplink"].Detail).To(Equal("10.0.0.5 on Ethernet (static), MTU 1500"))
	g.Expect(got["directories"].Detail).To(ContainSubstring("absent (the agent creates it protected)"))
}

// TestNotOnPlatformSkips: what a platform does not have is SKIP, never PASS, and leaves the exit
// code alone; a warning is 1, a failure 2.
func TestNotOnPlatformSkips(t *testing.T) {
	g := NewWithT(t)
	f := fitFacts()
	f.OS = NotOnPlatform[OSInfo]("Linux has no Windows build (registry)")
	f.Features = NotOnPlatform[map[string]bool]("Linux has no Windows features (WMI)")
	f.Driver = NotOnPlatform[DriverInfo]("no driver")
	rep := Run(context.Background(), Checks(), f)
	got := run(f)
	g.Expect(got["windows-build"].Status).To(Equal(Skip))
	g.Expect(got["windows-build"].Detail).To(Equal("not checked on this platform: Linux has no Windows build (registry)"))
	g.Expect(got["windows-features"].Status).To(Equal(Skip))
	g.Expect(got["driver-signing"].Status).To(Equal(Skip))
	g.Expect(rep.ExitCode()).To(Equal(0))
	g.Expect(rep.Summary()).To(Equal("10 passed, 0 warnings, 0 failed, 3 not checked on this platform"))

	f.Driver = Known(DriverInfo{Installed: true}, "")
	g.Expect(Run(context.Background(), Checks(), f).ExitCode()).To(Equal(1))
	f.OVSVersion = Known("2.17.0", "")
	g.Expect(Run(context.Background(), Checks(), f).ExitCode()).To(Equal(2))
}

func TestReportOutput(t *testing.T) {
	g := NewWithT(t)
	f := fitFacts()
	f.HNS.Source = "HNS simulator"
	f.KubeProxyPods = Known([]string{"kube-system/kube-proxy-1"}, "")
	rep := Run(context.Background(), Checks(), f)
	var text bytes.Buffer
	g.Expect(rep.WriteText(&text)).To(Succeed())
	g.Expect(text.String()).To(ContainSubstring("PASS  hns                HNS 15.1 answered; winnet's network \"winnet\" on adapter \"Ethernet\" [HNS simulator]\n"))
	g.Expect(text.String()).To(ContainSubstring("FAIL  kube-proxy         kube-proxy serves this node: Pod kube-system/kube-proxy-1\n                         fix: keep kube-proxy off"))
	var js bytes.Buffer
	g.Expect(rep.WriteJSON(&js)).To(Succeed())
	var back Report
	g.Expect(json.Unmarshal(js.Bytes(), &back)).To(Succeed())
	g.Expect(back.Results).To(HaveLen(13))
	g.Expect(back.Results[9].Name).To(Equal("kube-proxy"))
	g.Expect(back.Results[9].Status).To(Equal(Fail))
}

func TestParseVersion(t *testing.T) {
	g := NewWithT(t)
	for in, want := range map[string][3]int{"3.0.5": {3, 0, 5}, "3.0.5-antrea.1": {3, 0, 5}, "v2.4.2": {2, 4, 2}, "1.7.20~ds1": {1, 7, 20}, "3.1": {3, 1, 0}} {
		v, ok := parseVersion(in)
		g.Expect(ok).To(BeTrue(), in)
		g.Expect(v).To(Equal(want), in)
	}
	_, ok := parseVersion("unknown")
	g.Expect(ok).To(BeFalse())
}

func TestKubeProxyPods(t *testing.T) {
	g := NewWithT(t)
	mk := func(name string, labels map[string]string, image string, phase corev1.PodPhase) corev1.Pod {
		p := corev1.Pod{}
		p.Namespace, p.Name, p.Labels, p.Status.Phase = "kube-system", name, labels, phase
		p.Spec.Containers = []corev1.Container{{Name: "c", Image: image}}
		return p
	}
	pods := []corev1.Pod{
		mk("kube-proxy-a", map[string]string{"k8s-app": "kube-proxy"}, "x", corev1.PodRunning),
		mk("kp-windows", nil, "sigwindowstools/kube-proxy:v1.32.0-calico-hostprocess", corev1.PodRunning),
		mk("coredns", nil, "registry.k8s.io/coredns/coredns:v1.12.0", corev1.PodRunning),
		mk("kube-proxy-old", map[string]string{"k8s-app": "kube-proxy"}, "x", corev1.PodSucceeded),
	}
	g.Expect(kubeProxyPods(pods)).To(Equal([]string{"kube-system/kube-proxy-a", "kube-system/kp-windows"}))
}

func TestSameDir(t *testing.T) {
	g := NewWithT(t)
	g.Expect(sameDir("c:/etc/cni/net.d", `C:\etc\cni\net.d\`)).To(BeTrue())
	g.Expect(sameDir(`C:\etc\cni\net.d`, `C:\Program Files\containerd\cni\conf`)).To(BeFalse())
	g.Expect(sameDir("/etc/cni/net.d/", "/etc/cni/net.d")).To(BeTrue())
	g.Expect(sameDir("/etc/cni/net.d", "/etc/CNI/net.d")).To(BeFalse())
}
