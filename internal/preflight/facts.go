package preflight

import (
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/winnet-io/winnet/internal/hns"
)

// Fact is one gathered fact: its value, or why it could not be gathered (Err), or that this
// platform has no such thing (Unavailable, which makes its checks SKIP). Source names who answered
// when it is not the node's own Windows: "HNS simulator", "Linux host".
type Fact[T any] struct {
	Value       T
	Err         error
	Unavailable string
	Source      string
}

// Known returns a fact with a value.
func Known[T any](v T, source string) Fact[T] { return Fact[T]{Value: v, Source: source} }

// Failed returns a fact that could not be gathered.
func Failed[T any](err error, source string) Fact[T] { return Fact[T]{Err: err, Source: source} }

// NotOnPlatform returns a fact this platform does not have.
func NotOnPlatform[T any](why string) Fact[T] { return Fact[T]{Unavailable: why} }

// OSInfo is the Windows build (registry HKLM\SOFTWARE\Microsoft\Windows NT\CurrentVersion).
type OSInfo struct {
	ProductName    string `json:"productName"`
	DisplayVersion string `json:"displayVersion,omitempty"`
	Build          int    `json:"build"`
	UBR            int    `json:"ubr,omitempty"`
}

// ServiceState is a service or driver as the service control manager reports it.
type ServiceState struct {
	Present bool   `json:"present"`
	Running bool   `json:"running"`
	State   string `json:"state,omitempty"`
}

// HNSInfo is what HNS answered: its version, winnet's network (nil: none yet) and whether the OVS
// extension is enabled on that network's switch, and the host's HNS load balancers.
type HNSInfo struct {
	Version          hns.Version        `json:"version"`
	Network          *hns.Network       `json:"network,omitempty"`
	ExtensionEnabled bool               `json:"extensionEnabled"`
	LoadBalancers    []hns.LoadBalancer `json:"loadBalancers,omitempty"`
}

// DriverInfo is the OVS extension's driver and the boot's driver signing.
type DriverInfo struct {
	// Installed: the extension's driver service (OVSExtDriverService) is registered.
	Installed bool `json:"installed"`
	// TestSigning: the boot loader's options (HKLM\SYSTEM\CurrentControlSet\Control
	// SystemStartOptions) hold TESTSIGNING.
	TestSigning bool `json:"testSigning"`
}

// ContainerdConfig is what containerd's config.toml says of CNI.
type ContainerdConfig struct {
	Path    string `json:"path"`
	Found   bool   `json:"found"`
	ConfDir string `json:"confDir,omitempty"`
	// BinDirs are the directories containerd runs CNI plugins from (bin_dir, or 2.x's bin_dirs).
	BinDirs []string `json:"binDirs,omitempty"`
}

// CNIDir is the CNI configuration directory winnet writes its conflist into.
type CNIDir struct {
	Dir string `json:"dir"`
	// Files are the network configurations in it (.conf, .conflist, .json), sorted by name, as
	// containerd's libcni lists them.
	Files []string `json:"files"`
}

// AdapterInfo is a host adapter that holds the Node's InternalIP.
type AdapterInfo struct {
	Name string `json:"name"`
	MTU  int    `json:"mtu"`
	DHCP bool   `json:"dhcp"`
}

// UplinkInfo is the Node's InternalIP and the adapters holding it.
type UplinkInfo struct {
	NodeIP   netip.Addr    `json:"nodeIP"`
	Adapters []AdapterInfo `json:"adapters"`
}

// ClockInfo compares the node's clock with the API server's (the Date header of its answer).
type ClockInfo struct {
	Local  time.Time `json:"local"`
	Server time.Time `json:"server"`
	// RTT is the request's round trip; Local is taken half-way.
	RTT time.Duration `json:"rtt"`
}

// DirInfo is one of the agent's directories as securefs checks it.
type DirInfo struct {
	What   string `json:"what"`
	Path   string `json:"path"`
	Exists bool   `json:"exists"`
	// Err is securefs.CheckDir's error (wrapping ErrUntrustedOwner or ErrTooOpen); nil when fit.
	Err error `json:"-"`
}

// Facts are everything the checks read, as Gather collects them (tests build them by hand: a
// check reads a zero Fact as a gathered zero value).
type Facts struct {
	NodeName string
	Platform string
	Now      time.Time
	// Bridge is winnet's bridge (the management vNIC's name on a converged node).
	Bridge string

	OS       Fact[OSInfo]
	Features Fact[map[string]bool]
	HNS      Fact[HNSInfo]
	// Services are the services the checks ask the service control manager for, by name.
	Services   Fact[map[string]ServiceState]
	OVSVersion Fact[string]
	Driver     Fact[DriverInfo]
	// Node is the Node object (status.nodeInfo, addresses).
	Node Fact[*corev1.Node]
	// KubeProxyPods are the kube-proxy Pods bound to the node.
	KubeProxyPods Fact[[]string]
	Containerd    Fact[ContainerdConfig]
	CNI           Fact[CNIDir]
	// CNIBinDir is the directory winnet's shim is installed in (the chart's cni.binDir), if known.
	CNIBinDir string
	Uplink    Fact[UplinkInfo]
	Clock     Fact[ClockInfo]
	Dirs      Fact[[]DirInfo]
}
