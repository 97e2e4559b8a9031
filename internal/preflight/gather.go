package preflight

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
	"github.com/winnet-io/winnet/internal/securefs"
)

// Options say where the facts are: the agent's own flags, and the API server.
type Options struct {
	NodeName string
	// HNSNetwork is winnet's HNS network name; Bridge its OVS bridge (the management vNIC's name on
	// a converged node).
	HNSNetwork string
	Bridge     string
	// StateDir, CNIConfDir and AuditLogDir are the agent's directories; CNIBinDir the directory of
	// the shim winnet installed (empty: unknown, not compared).
	StateDir    string
	CNIConfDir  string
	CNIBinDir   string
	AuditLogDir string
	// LogDir, optional, is the Windows service's log directory.
	LogDir string
	// OVSDBAddress and OVSRunDir are the agent's --ovsdb and --ovs-rundir (empty: the platform's).
	OVSDBAddress string
	OVSRunDir    string
	// NetNSPath, Linux only, is the simulated node's network namespace.
	NetNSPath string
	// ContainerdConfig is containerd's config.toml (empty: the platform's default path; none on a
	// simulated node).
	ContainerdConfig string
	// Reader reads the Node and its Pods; nil: no API server (those checks warn).
	Reader client.Reader
	// ServerTime asks the API server its time; nil: no API server.
	ServerTime func(ctx context.Context) (ClockInfo, error)
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// errNoAPIServer is the fact of everything the API server tells when there is none.
var errNoAPIServer = errors.New("no API server (--no-api-server)")

// Gather collects every fact. Nothing in it changes the node.
func Gather(ctx context.Context, opts Options) *Facts {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	f := &Facts{NodeName: opts.NodeName, Platform: platformName(opts), Now: opts.Now(), Bridge: opts.Bridge, CNIBinDir: opts.CNIBinDir}
	f.OS = gatherOS(ctx)
	f.Features = gatherFeatures(ctx)
	f.Services = gatherServices(ctx, opts)
	f.Driver = gatherDriver(ctx)
	f.HNS = gatherHNS(ctx, opts)
	f.OVSVersion = gatherOVSVersion(ctx, opts)
	f.Node, f.KubeProxyPods = gatherNode(ctx, opts)
	f.Containerd = gatherContainerd(opts)
	f.CNI = gatherCNIDir(opts.CNIConfDir)
	f.Uplink = gatherUplink(ctx, opts, f.Node)
	f.Clock = gatherClock(ctx, opts)
	f.Dirs = gatherDirs(opts)
	return f
}

func gatherOVSVersion(ctx context.Context, opts Options) Fact[string] {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	db, err := ovsdb.New(ctx, ovsdb.Options{Address: opts.OVSDBAddress, SocketDir: filepath.Join(opts.StateDir, "run"), Timeout: 10 * time.Second})
	if err != nil {
		return Failed[string](fmt.Errorf("connecting to ovsdb-server: %w", err), hostSource)
	}
	defer db.Close()
	v, err := db.OVSVersion(ctx)
	if err != nil {
		return Failed[string](err, hostSource)
	}
	if v == "" {
		// Written by OVS's start scripts (ovs-ctl, the Windows installer's), not by ovs-vswitchd.
		if v, err = vswitchdVersion(ctx, opts); err != nil {
			return Failed[string](fmt.Errorf("OVSDB holds no ovs_version, and ovs-vswitchd did not answer: %w", err), hostSource)
		}
		return Known(v, strings.TrimPrefix(hostSource+", ", ", ")+"ovs-vswitchd's version command")
	}
	return Known(v, hostSource)
}

func gatherNode(ctx context.Context, opts Options) (Fact[*corev1.Node], Fact[[]string]) {
	if opts.Reader == nil {
		return Failed[*corev1.Node](errNoAPIServer, ""), Failed[[]string](errNoAPIServer, "")
	}
	var node Fact[*corev1.Node]
	n := &corev1.Node{}
	switch err := opts.Reader.Get(ctx, client.ObjectKey{Name: opts.NodeName}, n); {
	case apierrors.IsNotFound(err):
		node = Known[*corev1.Node](nil, "")
	case err != nil:
		node = Failed[*corev1.Node](err, "")
	default:
		node = Known(n, "")
	}
	pods := &corev1.PodList{}
	if err := opts.Reader.List(ctx, pods, client.MatchingFields{"spec.nodeName": opts.NodeName}); err != nil {
		return node, Failed[[]string](fmt.Errorf("listing the node's Pods: %w", err), "")
	}
	return node, Known(kubeProxyPods(pods.Items), "")
}

// containerdCNI is the part of containerd's config.toml that names the CNI directories: version 2
// (containerd 1.x) and 3 (2.x).
type containerdCNI struct {
	ConfDir string   `toml:"conf_dir"`
	BinDir  string   `toml:"bin_dir"`
	BinDirs []string `toml:"bin_dirs"`
}

func gatherContainerd(opts Options) Fact[ContainerdConfig] {
	path := opts.ContainerdConfig
	if path == "" {
		var why string
		if path, why = defaultContainerdConfig(opts); why != "" {
			return NotOnPlatform[ContainerdConfig](why)
		}
	}
	cfg := ContainerdConfig{Path: path}
	var doc struct {
		Plugins map[string]struct {
			CNI *containerdCNI `toml:"cni"`
		} `toml:"plugins"`
	}
	_, err := toml.DecodeFile(path, &doc)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		conf, bin, ok := containerdDefaults()
		if !ok {
			return NotOnPlatform[ContainerdConfig](fmt.Sprintf("no containerd configuration at %s (a simulated node's runtime may be the test harness)", path))
		}
		cfg.ConfDir, cfg.BinDirs = conf, []string{bin}
		return Known(cfg, "")
	case err != nil:
		return Failed[ContainerdConfig](fmt.Errorf("reading %s: %w", path, err), "")
	}
	cfg.Found = true
	conf, bin, _ := containerdDefaults()
	cfg.ConfDir, cfg.BinDirs = conf, []string{bin}
	for _, name := range []string{"io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri"} {
		c := doc.Plugins[name].CNI
		if c == nil {
			continue
		}
		if c.ConfDir != "" {
			cfg.ConfDir = c.ConfDir
		}
		if len(c.BinDirs) > 0 {
			cfg.BinDirs = c.BinDirs
		} else if c.BinDir != "" {
			cfg.BinDirs = []string{c.BinDir}
		}
		break
	}
	return Known(cfg, "")
}

func gatherCNIDir(dir string) Fact[CNIDir] {
	c := CNIDir{Dir: dir, Files: []string{}}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return Known(c, "")
	} else if err != nil {
		return Failed[CNIDir](err, "")
	}
	for _, e := range entries {
		// libcni's ConfFiles: regular files with these extensions, sorted by name.
		if e.Type().IsRegular() && slices.Contains([]string{".conf", ".conflist", ".json"}, filepath.Ext(e.Name())) {
			c.Files = append(c.Files, e.Name())
		}
	}
	slices.Sort(c.Files)
	return Known(c, "")
}

func gatherUplink(ctx context.Context, opts Options, node Fact[*corev1.Node]) Fact[UplinkInfo] {
	if node.Err != nil {
		return Failed[UplinkInfo](node.Err, "")
	}
	if node.Value == nil {
		return Failed[UplinkInfo](fmt.Errorf("Node %s does not exist yet", opts.NodeName), "")
	}
	u := UplinkInfo{Adapters: []AdapterInfo{}}
	for _, a := range node.Value.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
			u.NodeIP = ip
			break
		}
	}
	if !u.NodeIP.IsValid() {
		return Known(u, hostSource)
	}
	h, err := hostnet.New(hostnet.Options{NetNSPath: opts.NetNSPath})
	if err != nil {
		return Failed[UplinkInfo](fmt.Errorf("opening the host network stack: %w", err), hostSource)
	}
	lister, ok := h.(hostnet.LinkLister)
	if !ok {
		return Failed[UplinkInfo](errors.New("the host network stack cannot list links"), hostSource)
	}
	links, err := lister.Links(ctx)
	if err != nil {
		return Failed[UplinkInfo](fmt.Errorf("listing links: %w", err), hostSource)
	}
	for _, l := range links {
		addrs, err := h.Addresses(ctx, l.Index)
		if err != nil {
			continue
		}
		if !slices.ContainsFunc(addrs, func(p netip.Prefix) bool { return p.Addr() == u.NodeIP }) {
			continue
		}
		a := AdapterInfo{Name: l.Name, MTU: l.MTU}
		if cfg, err := h.ReadIPConfig(ctx, l.Index); err == nil {
			a.DHCP = cfg.DHCP
		}
		u.Adapters = append(u.Adapters, a)
	}
	return Known(u, hostSource)
}

func gatherClock(ctx context.Context, opts Options) Fact[ClockInfo] {
	if opts.ServerTime == nil {
		return Failed[ClockInfo](errNoAPIServer, "")
	}
	c, err := opts.ServerTime(ctx)
	if err != nil {
		return Failed[ClockInfo](err, "")
	}
	return Known(c, "")
}

// APIServerTime returns ServerTime for the API server of cfg: a GET of /version with cfg's
// credentials, its Date header against the local clock half-way through the round trip.
func APIServerTime(cfg *rest.Config, now func() time.Time) func(ctx context.Context) (ClockInfo, error) {
	if now == nil {
		now = time.Now
	}
	return func(ctx context.Context) (ClockInfo, error) {
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return ClockInfo{}, err
		}
		u, _, err := rest.DefaultServerUrlFor(cfg)
		if err != nil {
			return ClockInfo{}, err
		}
		u.Path = strings.TrimRight(u.Path, "/") + "/version"
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return ClockInfo{}, err
		}
		start := now()
		resp, err := hc.Do(req)
		if err != nil {
			return ClockInfo{}, fmt.Errorf("asking the API server its time: %w", err)
		}
		end := now()
		_ = resp.Body.Close()
		date, err := http.ParseTime(resp.Header.Get("Date"))
		if err != nil {
			return ClockInfo{}, fmt.Errorf("the API server's answer has no Date header: %w", err)
		}
		rtt := end.Sub(start)
		return ClockInfo{Local: start.Add(rtt / 2), Server: date, RTT: rtt}, nil
	}
}

func gatherDirs(opts Options) Fact[[]DirInfo] {
	dirs := []struct {
		what, path string
		access     securefs.Access
	}{
		{"state directory", opts.StateDir, securefs.Private},
		{"CNI configuration directory", opts.CNIConfDir, securefs.Public},
		{"CNI binary directory", opts.CNIBinDir, securefs.Public},
		{"audit log directory", opts.AuditLogDir, securefs.Private},
		{"log directory", opts.LogDir, securefs.Private},
	}
	var out []DirInfo
	for _, d := range dirs {
		if d.path == "" {
			continue
		}
		info := DirInfo{What: d.what, Path: d.path}
		if _, err := os.Lstat(d.path); errors.Is(err, fs.ErrNotExist) {
			out = append(out, info)
			continue
		}
		info.Exists = true
		info.Err = securefs.CheckDir(d.path, d.access)
		out = append(out, info)
	}
	return Known(out, "")
}
