package preflight

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/securefs"
)

// Names of the services and features the checks ask for.
const (
	// OVSDBService and OVSVswitchdService are the services Open vSwitch for Windows installs.
	OVSDBService       = "ovsdb-server"
	OVSVswitchdService = "ovs-vswitchd"
	// OVSExtDriverService is the kernel driver service of the OVS Hyper-V extension (ovsext.sys).
	OVSExtDriverService = "ovsext"
	// ContainersFeature and HyperVFeature are the Windows optional features winnet needs
	// (Win32_OptionalFeature names).
	ContainersFeature = "Containers"
	HyperVFeature     = "Microsoft-Hyper-V"
)

// Bounds the checks hold.
var (
	// MinWindowsBuild is Windows Server 2019 (1809).
	MinWindowsBuild = 17763
	// MinOVS and MaxOVS bound the Open vSwitch versions winnet supports on Windows: 3.0.5 up to,
	// not including, 3.8 (upstream removed the Windows datapath in 4.0 and deprecated it in 3.7).
	MinOVS = [3]int{3, 0, 5}
	MaxOVS = [3]int{3, 8, 0}
	// MinContainerd is the oldest containerd whose libcni accepts winnet's conflist.
	MinContainerd = [3]int{1, 6, 0}
	// ClockWarn and ClockFail bound the difference between the node's and the API server's clocks.
	ClockWarn = 30 * time.Second
	ClockFail = 5 * time.Minute
)

// Checks returns every check, in the order the report lists them.
func Checks() []Check {
	return []Check{
		check{"windows-build", checkWindowsBuild},
		check{"windows-features", checkFeatures},
		check{"hns", checkHNS},
		check{"ovs-services", checkOVSServices},
		check{"ovs-version", checkOVSVersion},
		check{"ovs-extension", checkOVSExtension},
		check{"driver-signing", checkDriverSigning},
		check{"containerd", checkContainerd},
		check{"cni-config", checkCNIConfig},
		check{"kube-proxy", checkKubeProxy},
		check{"uplink", checkUplink},
		check{"clock", checkClock},
		check{"directories", checkDirectories},
	}
}

type check struct {
	name string
	run  func(f *Facts) Result
}

func (c check) Name() string                           { return c.name }
func (c check) Run(_ context.Context, f *Facts) Result { return c.run(f) }

// unknown answers for a fact without a value: SKIP when the platform has no such thing, otherwise
// status with the error and the fix. ok is false when the fact has a value.
func unknown[T any](fact Fact[T], what string, status Status, fix string) (Result, bool) {
	switch {
	case fact.Unavailable != "":
		return Result{Status: Skip, Detail: "not checked on this platform: " + fact.Unavailable, Source: fact.Source}, true
	case fact.Err != nil:
		return Result{Status: status, Detail: fmt.Sprintf("cannot read %s: %v", what, fact.Err), Fix: fix, Source: fact.Source}, true
	}
	return Result{}, false
}

func pass(detail, source string) Result { return Result{Status: Pass, Detail: detail, Source: source} }

func checkWindowsBuild(f *Facts) Result {
	if r, done := unknown(f.OS, `the Windows build (registry HKLM\SOFTWARE\Microsoft\Windows NT\CurrentVersion)`, Fail, "run preflight as an Administrator on the node"); done {
		return r
	}
	os := f.OS.Value
	name := strings.TrimSpace(fmt.Sprintf("%s %s", os.ProductName, os.DisplayVersion))
	if os.Build < MinWindowsBuild {
		return Result{Status: Fail, Detail: fmt.Sprintf("%s, build %d: older than Windows Server 2019 (1809, build %d)", name, os.Build, MinWindowsBuild),
			Fix: "run the node on Windows Server 2019 (1809) or later", Source: f.OS.Source}
	}
	return pass(fmt.Sprintf("%s, build %d.%d", name, os.Build, os.UBR), f.OS.Source)
}

func checkFeatures(f *Facts) Result {
	if r, done := unknown(f.Features, "the Windows features (WMI Win32_OptionalFeature)", Warn, "check by hand: Get-WindowsOptionalFeature -Online -FeatureName Containers,Microsoft-Hyper-V"); done {
		return r
	}
	var missing []string
	for _, name := range []string{ContainersFeature, HyperVFeature} {
		if !f.Features.Value[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return Result{Status: Fail, Detail: "not enabled: " + strings.Join(missing, ", "),
			Fix: "Install-WindowsFeature -Name Containers,Hyper-V and restart (a VM without nested virtualization: see getting-started)", Source: f.Features.Source}
	}
	return pass(ContainersFeature+" and "+HyperVFeature+" enabled", f.Features.Source)
}

func checkHNS(f *Facts) Result {
	if r, done := unknown(f.HNS, "HNS", Fail, "start the Host Network Service (Start-Service hns); it comes with the Containers feature"); done {
		return r
	}
	h := f.HNS.Value
	if !h.Version.AtLeast(hns.V2APIVersion) {
		return Result{Status: Fail, Detail: fmt.Sprintf("HNS %s: older than %s, the first with the V2 API winnet calls", h.Version, hns.V2APIVersion),
			Fix: "run Windows Server 2019 (1809) or later with its updates", Source: f.HNS.Source}
	}
	network := "no winnet network yet"
	if h.Network != nil {
		network = fmt.Sprintf("winnet's network %q on adapter %q", h.Network.Name, h.Network.AdapterName)
	}
	return pass(fmt.Sprintf("HNS %s answered; %s", h.Version, network), f.HNS.Source)
}

func checkOVSServices(f *Facts) Result {
	if r, done := unknown(f.Services, "the Open vSwitch services", Fail, "run preflight as an Administrator on the node"); done {
		return r
	}
	var absent, stopped []string
	for _, name := range []string{OVSDBService, OVSVswitchdService} {
		s := f.Services.Value[name]
		switch {
		case !s.Present:
			absent = append(absent, name)
		case !s.Running:
			stopped = append(stopped, fmt.Sprintf("%s (%s)", name, orNone(s.State)))
		}
	}
	switch {
	case len(absent) > 0:
		return Result{Status: Fail, Detail: "not installed: " + strings.Join(absent, ", "),
			Fix: "install Open vSwitch for Windows 3.0.5 to 3.7.x (its installer registers ovsdb-server and ovs-vswitchd)", Source: f.Services.Source}
	case len(stopped) > 0:
		return Result{Status: Fail, Detail: "not running: " + strings.Join(stopped, ", "),
			Fix: "Start-Service ovsdb-server,ovs-vswitchd (or set ovs.enabled=true in the chart)", Source: f.Services.Source}
	}
	return pass(OVSDBService+" and "+OVSVswitchdService+" running", f.Services.Source)
}

// parseVersion reads the leading major.minor.patch of v ("3.0.5-antrea.1", "v2.4.2", "1.7.20~ds1").
func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return out, false
	}
	for i, p := range parts {
		end := strings.IndexFunc(p, func(r rune) bool { return r < '0' || r > '9' })
		if end == 0 {
			return out, false
		}
		if end > 0 {
			p = p[:end]
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

func less(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

func checkOVSVersion(f *Facts) Result {
	if r, done := unknown(f.OVSVersion, "Open vSwitch's version from ovsdb-server", Fail, "start ovsdb-server and ovs-vswitchd, then run preflight again"); done {
		return r
	}
	v := f.OVSVersion.Value
	if v == "" {
		return Result{Status: Warn, Detail: "ovs-vswitchd has not written its version into OVSDB (never started?)",
			Fix: "start ovs-vswitchd, then run preflight again", Source: f.OVSVersion.Source}
	}
	n, ok := parseVersion(v)
	if !ok {
		return Result{Status: Warn, Detail: fmt.Sprintf("Open vSwitch %q: not a version winnet can read", v),
			Fix: "use an Open vSwitch for Windows build 3.0.5 to 3.7.x", Source: f.OVSVersion.Source}
	}
	if less(n, MinOVS) || !less(n, MaxOVS) {
		return Result{Status: Fail, Detail: fmt.Sprintf("Open vSwitch %s: outside 3.0.5 to 3.7.x, the builds winnet supports on Windows", v),
			Fix: "install an Open vSwitch for Windows build 3.0.5 to 3.7.x (Antrea's 3.0.5 is the common one)", Source: f.OVSVersion.Source}
	}
	return pass("Open vSwitch "+v, f.OVSVersion.Source)
}

func checkOVSExtension(f *Facts) Result {
	if r, done := unknown(f.HNS, "the switch's extensions from HNS", Fail, "start the Host Network Service (Start-Service hns)"); done {
		return r
	}
	h := f.HNS.Value
	if h.Network == nil {
		return pass("no winnet network yet: the agent enables the extension on the switch it creates", f.HNS.Source)
	}
	if !h.ExtensionEnabled {
		return Result{Status: Fail, Detail: fmt.Sprintf("the Open vSwitch extension is not enabled on the switch of HNS network %q", h.Network.Name),
			Fix: "restart winnet-agent (it enables it once the host IP is on the vNIC); if it stays off, check the driver (driver-signing) and the agent's log", Source: f.HNS.Source}
	}
	return pass(fmt.Sprintf("enabled on the switch of HNS network %q", h.Network.Name), f.HNS.Source)
}

func checkDriverSigning(f *Facts) Result {
	if r, done := unknown(f.Driver, "the OVS extension's driver", Warn, "run preflight as an Administrator on the node"); done {
		return r
	}
	d := f.Driver.Value
	if !d.Installed {
		return Result{Status: Fail, Detail: "the OVS extension's driver (" + OVSExtDriverService + ") is not installed",
			Fix: "install Open vSwitch for Windows with its Hyper-V extension driver", Source: f.Driver.Source}
	}
	if !d.TestSigning {
		return Result{Status: Warn, Detail: "test signing is off: a test-signed OVS extension (the public builds) does not load",
			Fix: "bcdedit /set TESTSIGNING ON and reboot (Secure Boot off), unless your build is production-signed", Source: f.Driver.Source}
	}
	return pass("driver "+OVSExtDriverService+" installed; test signing on", f.Driver.Source)
}

func checkContainerd(f *Facts) Result {
	if r, done := unknown(f.Node, "the Node", Warn, "join the node to the cluster (kubelet registers it), or give preflight a kubeconfig"); done {
		return r
	}
	if f.Node.Value == nil {
		return Result{Status: Warn, Detail: fmt.Sprintf("Node %s does not exist yet", f.NodeName),
			Fix: "join the node to the cluster; kubelet reports the runtime's version in the Node's status", Source: f.Node.Source}
	}
	rv := f.Node.Value.Status.NodeInfo.ContainerRuntimeVersion
	if rv == "" {
		return Result{Status: Warn, Detail: fmt.Sprintf("Node %s reports no container runtime (status.nodeInfo.containerRuntimeVersion)", f.NodeName),
			Fix: "start kubelet with containerd on the node, then run preflight again", Source: f.Node.Source}
	}
	runtime, version, _ := strings.Cut(rv, "://")
	if runtime != "containerd" {
		return Result{Status: Fail, Detail: fmt.Sprintf("the Node's runtime is %q, not containerd", rv),
			Fix: "run containerd 1.6 or later on the node", Source: f.Node.Source}
	}
	n, ok := parseVersion(version)
	if !ok || less(n, MinContainerd) {
		return Result{Status: Fail, Detail: fmt.Sprintf("containerd %s: older than 1.6, whose libcni first accepts winnet's conflist (cniVersion 1.0.0)", version),
			Fix: "upgrade containerd to 1.6, 1.7 or 2.x", Source: f.Node.Source}
	}
	return pass("containerd "+version+" (the Node's status.nodeInfo)", f.Node.Source)
}

func checkCNIConfig(f *Facts) Result {
	if r, done := unknown(f.CNI, "the CNI configuration directory", Fail, "run preflight as an Administrator with the agent's --cni-conf-dir"); done {
		return r
	}
	c := f.CNI.Value
	var notes []string
	status, fix := Pass, ""
	if f.Containerd.Unavailable == "" && f.Containerd.Err == nil {
		cfg := f.Containerd.Value
		where := cfg.Path
		if !cfg.Found {
			where = "containerd's default (no " + cfg.Path + ")"
		}
		if cfg.ConfDir != "" && !sameDir(cfg.ConfDir, c.Dir) {
			return Result{Status: Fail, Detail: fmt.Sprintf("containerd reads CNI configurations from %s (%s), winnet writes into %s", cfg.ConfDir, where, c.Dir),
				Fix: fmt.Sprintf("set the chart's cni.confDir to %s (or containerd's conf_dir to %s)", cfg.ConfDir, c.Dir), Source: f.CNI.Source}
		}
		if len(cfg.BinDirs) > 0 && f.CNIBinDir != "" && !slices.ContainsFunc(cfg.BinDirs, func(d string) bool { return sameDir(d, f.CNIBinDir) }) {
			return Result{Status: Fail, Detail: fmt.Sprintf("containerd runs CNI plugins from %s (%s), winnet installs its shim into %s", strings.Join(cfg.BinDirs, ", "), where, f.CNIBinDir),
				Fix: fmt.Sprintf("set the chart's cni.binDir to %s (or containerd's bin_dir to %s)", cfg.BinDirs[0], f.CNIBinDir), Source: f.CNI.Source}
		}
		notes = append(notes, "containerd's CNI directories match ("+where+")")
	} else if f.Containerd.Err != nil {
		status, fix = Warn, "check containerd's conf_dir and bin_dir against the chart's cni.confDir and cni.binDir by hand"
		notes = append(notes, fmt.Sprintf("cannot read containerd's configuration: %v", f.Containerd.Err))
	}
	switch {
	case len(c.Files) == 0:
		notes = append([]string{c.Dir + " holds no configuration yet: the agent writes " + cni.ConfListName + " once the node network is Ready"}, notes...)
	case c.Files[0] != cni.ConfListName:
		return Result{Status: Fail, Detail: fmt.Sprintf("containerd reads %s, the first configuration by name in %s, instead of winnet's %s", c.Files[0], c.Dir, cni.ConfListName),
			Fix: fmt.Sprintf("remove %s (another network plugin's) from %s", filepath.Join(c.Dir, c.Files[0]), c.Dir), Source: f.CNI.Source}
	default:
		first := c.Dir + ": containerd reads " + cni.ConfListName + " first"
		if len(c.Files) > 1 {
			first += fmt.Sprintf(" (%d others after it are ignored)", len(c.Files)-1)
		}
		notes = append([]string{first}, notes...)
	}
	return Result{Status: status, Detail: strings.Join(notes, "; "), Fix: fix, Source: f.CNI.Source}
}

// sameDir compares two directories; Windows paths (a drive letter or a backslash) case-insensitively
// and with / as \ (containerd's configurations often write c:/etc/cni/net.d).
func sameDir(a, b string) bool {
	if windowsPath(a) || windowsPath(b) {
		norm := func(p string) string { return strings.TrimRight(strings.ReplaceAll(p, "/", `\`), `\`) }
		return strings.EqualFold(norm(a), norm(b))
	}
	return filepath.Clean(a) == filepath.Clean(b)
}

func windowsPath(p string) bool {
	return strings.Contains(p, `\`) || len(p) >= 2 && p[1] == ':' && (p[0]|0x20 >= 'a' && p[0]|0x20 <= 'z')
}

func checkKubeProxy(f *Facts) Result {
	var pods []string
	var notes []string
	if r, done := unknown(f.KubeProxyPods, "the node's Pods", Warn, "give preflight a kubeconfig that may list Pods"); done {
		if r.Status == Skip {
			notes = append(notes, r.Detail)
		} else {
			return r
		}
	} else {
		pods = f.KubeProxyPods.Value
	}
	if len(pods) > 0 {
		return Result{Status: Fail, Detail: "kube-proxy serves this node: Pod " + strings.Join(pods, ", "),
			Fix: "keep kube-proxy off Windows nodes: nodeSelector kubernetes.io/os: linux on its DaemonSet (winnet serves Services)", Source: f.KubeProxyPods.Source}
	}
	src := f.KubeProxyPods.Source
	if f.HNS.Err == nil && f.HNS.Unavailable == "" {
		if lbs := f.HNS.Value.LoadBalancers; len(lbs) > 0 {
			return Result{Status: Warn, Detail: fmt.Sprintf("no kube-proxy Pod, but HNS holds %d load balancers (kube-proxy's winkernel mode makes them; winnet makes none), the first %s", len(lbs), lbs[0].ID),
				Fix: "remove kube-proxy's leftovers: winnet-agent takeover --from kube-proxy --dry-run, then without --dry-run", Source: f.HNS.Source}
		}
		notes = append(notes, "no HNS load balancer")
		if f.HNS.Source != "" {
			src = strings.Trim(src+", "+f.HNS.Source, ", ")
		}
	}
	if f.KubeProxyPods.Unavailable == "" {
		notes = append([]string{"no kube-proxy Pod on the node"}, notes...)
	}
	return pass(strings.Join(notes, "; "), src)
}

func checkUplink(f *Facts) Result {
	if r, done := unknown(f.Uplink, "the uplink", Warn, "give preflight a kubeconfig (the Node's InternalIP names the uplink)"); done {
		return r
	}
	u := f.Uplink.Value
	if !u.NodeIP.IsValid() {
		return Result{Status: Fail, Detail: "the Node has no InternalIP", Fix: "start kubelet with --node-ip set to the uplink adapter's address", Source: f.Uplink.Source}
	}
	switch len(u.Adapters) {
	case 0:
		return Result{Status: Fail, Detail: fmt.Sprintf("no adapter holds the Node's InternalIP %s", u.NodeIP),
			Fix: "give the uplink adapter the Node's InternalIP, or kubelet --node-ip the uplink's address", Source: f.Uplink.Source}
	case 1:
	default:
		var names []string
		for _, a := range u.Adapters {
			names = append(names, a.Name)
		}
		return Result{Status: Fail, Detail: fmt.Sprintf("%d adapters hold the Node's InternalIP %s: %s", len(names), u.NodeIP, strings.Join(names, ", ")),
			Fix: "keep the address on one adapter only", Source: f.Uplink.Source}
	}
	a := u.Adapters[0]
	how := "static"
	if a.DHCP {
		how = "DHCP"
	}
	where := fmt.Sprintf("%s on %s (%s), MTU %d", u.NodeIP, a.Name, how, a.MTU)
	if f.Bridge != "" && a.Name == f.Bridge {
		where = fmt.Sprintf("%s on %s, the management vNIC winnet renamed (converged; %s), MTU %d", u.NodeIP, a.Name, how, a.MTU)
	}
	if a.MTU < 1500 {
		return Result{Status: Warn, Detail: where + ": below 1500, Pods get the MTU less the tunnel's 50 bytes",
			Fix: "raise the uplink's MTU to 1500 or more, or expect Pods' MTU " + strconv.Itoa(a.MTU-50), Source: f.Uplink.Source}
	}
	return pass(where, f.Uplink.Source)
}

func checkClock(f *Facts) Result {
	if r, done := unknown(f.Clock, "the API server's time", Warn, "give preflight a kubeconfig"); done {
		return r
	}
	c := f.Clock.Value
	skew := c.Local.Sub(c.Server)
	if skew < 0 {
		skew = -skew
	}
	// The Date header has a resolution of one second; half the round trip is unknown.
	slack := time.Second + c.RTT/2
	skew -= min(skew, slack)
	switch {
	case skew > ClockFail:
		return Result{Status: Fail, Detail: fmt.Sprintf("the node's clock is %s off the API server's: certificates and tokens fail", skew.Round(time.Second)),
			Fix: "synchronise the node's clock (w32tm /resync; NTP)", Source: f.Clock.Source}
	case skew > ClockWarn:
		return Result{Status: Warn, Detail: fmt.Sprintf("the node's clock is %s off the API server's", skew.Round(time.Second)),
			Fix: "synchronise the node's clock (w32tm /resync; NTP)", Source: f.Clock.Source}
	}
	return pass(fmt.Sprintf("within %s of the API server's (Date header, round trip %s)", slack.Round(time.Millisecond), c.RTT.Round(time.Millisecond)), f.Clock.Source)
}

func checkDirectories(f *Facts) Result {
	if r, done := unknown(f.Dirs, "the agent's directories", Fail, "run preflight as an Administrator on the node"); done {
		return r
	}
	status := Pass
	var notes, fixes []string
	for _, d := range f.Dirs.Value {
		switch {
		case !d.Exists:
			notes = append(notes, fmt.Sprintf("%s %s absent (the agent creates it protected)", d.What, d.Path))
		case d.Err == nil:
			notes = append(notes, fmt.Sprintf("%s %s protected", d.What, d.Path))
		case errors.Is(d.Err, securefs.ErrTooOpen):
			if status == Pass {
				status = Warn
			}
			notes = append(notes, fmt.Sprintf("%s %s is open to others (the agent narrows it at start)", d.What, d.Path))
			fixes = append(fixes, "start winnet-agent (it repairs "+d.Path+") or narrow it to SYSTEM and Administrators")
		default:
			status = Fail
			notes = append(notes, fmt.Sprintf("%s %s: %v", d.What, d.Path, d.Err))
			fixes = append(fixes, "an administrator removes "+d.Path+" or gives it to SYSTEM (root): the agent refuses it")
		}
	}
	return Result{Status: status, Detail: strings.Join(notes, "; "), Fix: strings.Join(fixes, "; "), Source: f.Dirs.Source}
}

// kubeProxyPods returns the names of the Pods that are kube-proxy: a container named kube-proxy or
// running a kube-proxy image, or the label k8s-app=kube-proxy (kubeadm's, kops').
func kubeProxyPods(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		is := p.Labels["k8s-app"] == "kube-proxy"
		for _, c := range p.Spec.Containers {
			if c.Name == "kube-proxy" || strings.Contains(c.Image, "/kube-proxy") || strings.HasPrefix(c.Image, "kube-proxy") {
				is = true
			}
		}
		if is {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	return out
}
