package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/internal/hns"
)

// The stacks `winnet-agent takeover --from` knows.
const (
	StackFlannel   = "flannel"
	StackKubeProxy = "kube-proxy"
)

// TakeoverStacks are the stacks Takeover knows, in the order it names them.
var TakeoverStacks = []string{StackFlannel, StackKubeProxy}

// ErrTakeoverRefused is returned (wrapped) when Takeover finds something it does not recognise, or Pods
// still attached: it then changes nothing.
var ErrTakeoverRefused = errors.New("takeover refused, nothing changed")

// TakeoverOptions configure Takeover.
type TakeoverOptions struct {
	// From are the stacks whose leftovers to remove: StackFlannel, StackKubeProxy or both.
	From []string
	// FlannelNetworks are the names of flannel's HNS networks (its Backend.Name). Empty means flannel's
	// defaults and the names the documented configurations use: "flannel.<VNI>" and "vxlan0" (Overlay,
	// vxlan backend), "cbr0" (L2Bridge, host-gw backend).
	FlannelNetworks []string
	// KubeProxyNetwork is the network kube-proxy served (its --network-name, $KUBE_NETWORK); empty means
	// flannel's network found on the node.
	KubeProxyNetwork string
	// SourceVIP is kube-proxy's --source-vip; invalid means the one its load balancers carry, or the one of
	// SourceVIPFile.
	SourceVIP netip.Addr
	// SourceVIPFile, optional, is the host-local result the documented kube-proxy start-up scripts keep the
	// source VIP in (sig-windows-tools: c:\sourcevip\sourceVip.json): removed with kube-proxy's leftovers.
	SourceVIPFile string
	// CNIConfDir is the runtime's CNI configuration directory; empty means DefaultCNIConfDir.
	CNIConfDir string
	// FlannelSubnetFile is flanneld's --subnet-file; empty means DefaultFlannelSubnetFile.
	FlannelSubnetFile string
	// DryRun lists what Takeover would remove, and what it refuses, and changes nothing.
	DryRun bool
	// Out receives one line per thing removed (or to remove), left alone or refused; nil discards them.
	Out io.Writer
}

func (o TakeoverOptions) withDefaults() TakeoverOptions {
	if o.CNIConfDir == "" {
		o.CNIConfDir = DefaultCNIConfDir
	}
	if o.FlannelSubnetFile == "" {
		o.FlannelSubnetFile = DefaultFlannelSubnetFile
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return o
}

// ParseTakeoverStacks parses --from: a comma-separated list of TakeoverStacks.
func ParseTakeoverStacks(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(TakeoverStacks, f) {
			return nil, fmt.Errorf("--from %q: want %s, or both separated by a comma", f, strings.Join(TakeoverStacks, " or "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// flannelDefaultName matches the name flannel's vxlan backend gives its network by default
// ("flannel.<VNI>", pkg/backend/vxlan/vxlan_windows.go).
var flannelDefaultName = regexp.MustCompile(`^flannel\.[0-9]+$`)

// flannelPluginTypes are the CNI plugin types of flannel's Windows configurations: the flannel plugin and
// the Windows plugins it delegates to (containernetworking/plugins win-overlay and win-bridge, and their
// successors in microsoft/windows-container-networking, sdnoverlay and sdnbridge).
var flannelPluginTypes = []string{"flannel", "win-overlay", "win-bridge", "sdnoverlay", "sdnbridge"}

// Takeover removes, without the API server, exactly what flannel (win-overlay or host-gw) and kube-proxy
// (winkernel) left on this Windows node, so that winnet's agent can build its network: kube-proxy's HNS
// load balancers, its remote endpoints and source-VIP endpoint; flannel's Overlay or L2Bridge network
// (whose RemoteSubnetRoute and HostRoute policies go with it), its host endpoint and the endpoints of Pods
// gone without a CNI DEL; flannel's CNI configuration and subnet file; and, when named, kube-proxy's source
// VIP file. It first decides everything, and refuses (ErrTakeoverRefused, every reason written to
// opts.Out) without changing anything when it finds an endpoint still attached to a Pod, or something on
// those networks, a load balancer, a CNI configuration or a file it does not recognise as theirs. Networks,
// load balancers and files of no stack named in opts.From are left alone and listed. It is idempotent.
func Takeover(ctx context.Context, inv hns.Inventory, opts TakeoverOptions) ([]string, error) {
	opts = opts.withDefaults()
	if len(opts.From) == 0 {
		return nil, errors.New("no stack to take over from: --from " + strings.Join(TakeoverStacks, ","))
	}
	t := &takeover{inv: inv, opts: opts}
	if err := t.plan(ctx); err != nil {
		return nil, err
	}
	for _, l := range t.left {
		fmt.Fprintln(opts.Out, "leaving: "+l)
	}
	if len(t.refusals) > 0 {
		for _, r := range t.refusals {
			fmt.Fprintln(opts.Out, "refusing: "+r)
		}
		if opts.DryRun {
			for _, s := range t.steps {
				fmt.Fprintln(opts.Out, "would remove (once the above is resolved): "+s.what)
			}
		}
		return nil, fmt.Errorf("%w: %d reason(s): %s", ErrTakeoverRefused, len(t.refusals), strings.Join(t.refusals, "; "))
	}
	var done []string
	for _, s := range t.steps {
		line := "removed: " + s.what
		if opts.DryRun {
			line = "would remove: " + s.what
		} else if err := s.do(ctx); err != nil {
			return done, fmt.Errorf("removing %s: %w", s.what, err)
		}
		done = append(done, line)
		fmt.Fprintln(opts.Out, line)
	}
	if len(done) == 0 {
		fmt.Fprintf(opts.Out, "nothing to remove: %s left nothing on this node\n", strings.Join(opts.From, " and "))
	}
	return done, nil
}

type takeoverStep struct {
	what string
	do   func(context.Context) error
}

type takeover struct {
	inv      hns.Inventory
	opts     TakeoverOptions
	steps    []takeoverStep
	refusals []string
	left     []string
}

func (t *takeover) from(stack string) bool { return slices.Contains(t.opts.From, stack) }

func (t *takeover) refuse(format string, args ...any) {
	t.refusals = append(t.refusals, fmt.Sprintf(format, args...))
}

func (t *takeover) add(what string, do func(context.Context) error) {
	t.steps = append(t.steps, takeoverStep{what: what, do: do})
}

// isFlannelName reports whether name is one flannel gives its networks (TakeoverOptions.FlannelNetworks).
func (t *takeover) isFlannelName(name string) bool {
	if len(t.opts.FlannelNetworks) > 0 {
		return slices.Contains(t.opts.FlannelNetworks, name)
	}
	return name == "vxlan0" || name == "cbr0" || flannelDefaultName.MatchString(name)
}

// plan decides every step, or the refusals, changing nothing.
func (t *takeover) plan(ctx context.Context) error {
	nets, err := t.inv.ListNetworks(ctx)
	if err != nil {
		return err
	}
	lbs, err := t.inv.ListLoadBalancers(ctx)
	if err != nil {
		return err
	}
	// flannel's networks, found by name and type; the one kube-proxy served.
	var flannelNets []hns.NetworkInfo
	var kpNet *hns.NetworkInfo
	for i, n := range nets {
		switch {
		case t.opts.KubeProxyNetwork != "" && n.Name == t.opts.KubeProxyNetwork:
			kpNet = &nets[i]
		case !t.isFlannelName(n.Name):
			continue
		case n.Type != hns.Overlay && n.Type != hns.L2Bridge:
			if t.from(StackFlannel) {
				t.refuse("network %q (%s) has a name flannel uses, but flannel makes Overlay (vxlan) or L2Bridge (host-gw) networks: remove it yourself or name flannel's with --flannel-network", n.Name, n.Type)
			}
			continue
		}
		if t.isFlannelName(n.Name) && (n.Type == hns.Overlay || n.Type == hns.L2Bridge) {
			flannelNets = append(flannelNets, n)
			if kpNet == nil && t.opts.KubeProxyNetwork == "" {
				kpNet = &nets[i]
			}
		}
	}
	if t.from(StackKubeProxy) && t.opts.KubeProxyNetwork != "" && kpNet == nil {
		t.left = append(t.left, fmt.Sprintf("no network %q (--kube-proxy-network) on this node", t.opts.KubeProxyNetwork))
	}
	removing := map[string]bool{} // networks whose endpoints go, by upper-case ID
	if t.from(StackFlannel) {
		for _, n := range flannelNets {
			removing[strings.ToUpper(n.ID)] = true
		}
	}
	if kpNet != nil && t.from(StackKubeProxy) {
		removing[strings.ToUpper(kpNet.ID)] = true
	}
	for _, n := range nets {
		if !removing[strings.ToUpper(n.ID)] {
			t.left = append(t.left, fmt.Sprintf("network %q (%s): not %s's", n.Name, n.Type, strings.Join(t.opts.From, "'s or ")))
		}
	}

	// The endpoints of those networks, by ID.
	epNet := map[string]hns.NetworkInfo{}
	eps := map[string][]hns.Endpoint{}
	for _, n := range nets {
		if !removing[strings.ToUpper(n.ID)] {
			continue
		}
		list, err := t.inv.ListEndpoints(ctx, n.ID)
		if err != nil {
			return err
		}
		eps[n.ID] = list
		for _, ep := range list {
			epNet[strings.ToUpper(ep.ID)] = n
		}
	}

	// kube-proxy's source VIP: given, from its file, or carried by its load balancers.
	sourceVIP := t.opts.SourceVIP
	if t.opts.SourceVIPFile != "" {
		vip, ok, err := readSourceVIPFile(t.opts.SourceVIPFile)
		switch {
		case err != nil:
			t.refuse("%v", err)
		case ok && t.from(StackKubeProxy):
			if !sourceVIP.IsValid() {
				sourceVIP = vip
			}
			t.add(fmt.Sprintf("kube-proxy's source VIP file %s (%s)", t.opts.SourceVIPFile, vip), removeFile(t.opts.SourceVIPFile))
		case ok:
			t.left = append(t.left, fmt.Sprintf("kube-proxy's source VIP file %s: not taking over from kube-proxy", t.opts.SourceVIPFile))
		}
	}

	// kube-proxy gives all its load balancers its one source VIP.
	for _, lb := range lbs {
		onRemoved := slices.ContainsFunc(lb.Endpoints, func(id string) bool { _, ok := epNet[strings.ToUpper(id)]; return ok })
		if vip, err := netip.ParseAddr(lb.SourceVIP); err == nil && onRemoved && !sourceVIP.IsValid() {
			sourceVIP = vip
		}
	}
	// (1) Load balancers: kube-proxy's when every backend is an endpoint of the networks it served.
	for _, lb := range lbs {
		on, off := 0, 0
		for _, id := range lb.Endpoints {
			if _, ok := epNet[strings.ToUpper(id)]; ok {
				on++
			} else {
				off++
			}
		}
		what := fmt.Sprintf("HNS load balancer %s (frontends %s, source VIP %s, %d endpoints)", lb.ID, orNone(lb.FrontendVIPs), orNone([]string{lb.SourceVIP}), len(lb.Endpoints))
		switch {
		case on == 0:
			t.left = append(t.left, what+": none of its endpoints is on a network being removed")
		case !t.from(StackKubeProxy):
			t.refuse("%s balances to endpoints of flannel's network: it is kube-proxy's, add --from kube-proxy", what)
		case off > 0:
			t.refuse("%s balances to endpoints of other networks too: not recognised as kube-proxy's", what)
		default:
			t.add(what+" (kube-proxy)", func(ctx context.Context) error { return t.inv.DeleteLoadBalancer(ctx, lb.ID) })
		}
	}

	// (2) The endpoints, then (3) the networks.
	for _, n := range nets {
		if !removing[strings.ToUpper(n.ID)] {
			continue
		}
		isFlannel := slices.ContainsFunc(flannelNets, func(f hns.NetworkInfo) bool { return strings.EqualFold(f.ID, n.ID) }) && t.from(StackFlannel)
		for _, ep := range eps[n.ID] {
			if owner, ok := t.endpointOwner(n, ep, sourceVIP, isFlannel); ok {
				t.add(fmt.Sprintf("%s's HNS endpoint %s on network %q", owner, describeEndpoint(ep), n.Name),
					func(ctx context.Context) error { return t.inv.DeleteEndpoint(ctx, ep.ID) })
			}
		}
		if !isFlannel {
			continue
		}
		what := fmt.Sprintf("flannel's HNS network %q (%s, %s, adapter %q)", n.Name, n.Type, n.Subnet, n.AdapterName)
		var policies []string
		for _, p := range n.RemoteSubnets {
			policies = append(policies, fmt.Sprintf("%s via %s (VNI %d, DR MAC %s)", p.DestinationPrefix, p.ProviderAddress, p.IsolationID, p.DRMAC))
		}
		if len(policies) > 0 {
			what += " with its RemoteSubnetRoute policies " + strings.Join(policies, ", ")
		}
		if n.HostRoute {
			what += " and its HostRoute policy"
		}
		t.add(what, func(ctx context.Context) error { return t.inv.DeleteNetwork(ctx, n.ID) })
	}

	// (4) Files.
	if t.from(StackFlannel) {
		if err := t.planConfigs(); err != nil {
			return err
		}
		t.planSubnetFile()
	}
	return nil
}

// endpointOwner says whose an endpoint of a network being removed is; when it is nobody's it records why.
func (t *takeover) endpointOwner(n hns.NetworkInfo, ep hns.Endpoint, sourceVIP netip.Addr, flannelNet bool) (string, bool) {
	desc := fmt.Sprintf("HNS endpoint %s on network %q", describeEndpoint(ep), n.Name)
	switch {
	case ep.Remote:
		// kube-proxy's remote endpoints: Service backends on other nodes (winkernel hns.go createEndpoint).
		if !t.from(StackKubeProxy) {
			t.refuse("%s is a remote endpoint, kube-proxy's: add --from kube-proxy", desc)
			return "", false
		}
		return StackKubeProxy, true
	case ep.NamespaceID != "" && !(n.Type == hns.L2Bridge && ep.Name == n.Name+"_ep"):
		t.refuse("%s is attached to namespace %s: a Pod still uses it; cordon and drain the node and stop its Pods (their sandboxes) first", desc, ep.NamespaceID)
		return "", false
	case sourceVIP.IsValid() && ep.IP == sourceVIP:
		// kube-proxy's source VIP endpoint (winkernel proxier.go: a local endpoint with the host's MAC).
		if !t.from(StackKubeProxy) {
			t.refuse("%s holds kube-proxy's source VIP: add --from kube-proxy", desc)
			return "", false
		}
		return StackKubeProxy, true
	case !flannelNet:
		// kube-proxy's network is not being removed (not flannel's, or flannel is not taken over):
		// what is not kube-proxy's on it stays.
		t.left = append(t.left, desc+": not kube-proxy's, and its network stays")
		return "", false
	case n.Type == hns.L2Bridge && ep.Name == n.Name+"_ep":
		// flannel host-gw's bridge endpoint (hostgw_windows.go: "<network>_ep", the subnet's .2).
		return StackFlannel, true
	case ep.Name != "" && strings.HasSuffix(ep.Name, "_"+n.Name):
		// A Pod endpoint whose DEL never came: the win-overlay and win-bridge plugins name them
		// "<sandbox container ID>_<network>" (containernetworking/plugins pkg/hns/endpoint_windows.go,
		// ConstructEndpointName).
		return StackFlannel, true
	default:
		t.refuse("%s is neither flannel's nor kube-proxy's (no Pod endpoint name, not the source VIP): not recognised", desc)
		return "", false
	}
}

func describeEndpoint(ep hns.Endpoint) string {
	name := ep.Name
	if name == "" {
		name = "(unnamed)"
	}
	return fmt.Sprintf("%s %s (%s)", name, ep.ID, ep.IP)
}

func orNone(s []string) string {
	s = slices.DeleteFunc(slices.Clone(s), func(v string) bool { return v == "" })
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}

func removeFile(path string) func(context.Context) error {
	return func(context.Context) error {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
}

// planConfigs removes flannel's CNI configurations and refuses any other plugin's but winnet's: the
// runtime reads the first file by name, and another plugin's would keep the node from winnet.
func (t *takeover) planConfigs() error {
	entries, err := os.ReadDir(t.opts.CNIConfDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing %s: %w", t.opts.CNIConfDir, err)
	}
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".conf" && ext != ".conflist" && ext != ".json") || e.Name() == cni.ConfListName {
			continue
		}
		path := filepath.Join(t.opts.CNIConfDir, e.Name())
		types, err := cniPluginTypes(path)
		if err != nil {
			t.refuse("CNI configuration %s: %v: not recognised", path, err)
			continue
		}
		flannel := 0
		for _, ty := range types {
			if slices.Contains(flannelPluginTypes, ty) {
				flannel++
			}
		}
		switch {
		case flannel > 0 && flannel == len(types):
			t.add(fmt.Sprintf("flannel's CNI configuration %s (plugins %s)", path, strings.Join(types, ",")), removeFile(path))
		case flannel > 0:
			t.refuse("CNI configuration %s has flannel's plugins and others (%s): not recognised", path, strings.Join(types, ","))
		default:
			t.refuse("CNI configuration %s is another plugin's (%s): the runtime may read it before winnet's; remove it yourself", path, strings.Join(types, ","))
		}
	}
	return nil
}

// cniPluginTypes returns the plugin types a network configuration (.conf) or list (.conflist) names, with
// the flannel plugin's delegate.
func cniPluginTypes(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	type plugin struct {
		Type     string `json:"type"`
		Delegate *struct {
			Type string `json:"type"`
		} `json:"delegate"`
	}
	var conf struct {
		plugin
		Plugins []plugin `json:"plugins"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	var types []string
	for _, p := range append([]plugin{conf.plugin}, conf.Plugins...) {
		if p.Type != "" {
			types = append(types, p.Type)
		}
		if p.Delegate != nil && p.Delegate.Type != "" {
			types = append(types, p.Delegate.Type)
		}
	}
	if len(types) == 0 {
		return nil, errors.New("names no plugin")
	}
	return types, nil
}

// planSubnetFile removes flanneld's subnet file when it is one (FLANNEL_NETWORK and FLANNEL_SUBNET, only
// FLANNEL_ keys: flannel main.go WriteSubnetFile).
func (t *takeover) planSubnetFile() {
	path := t.opts.FlannelSubnetFile
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		t.refuse("flannel's subnet file %s: %v", path, err)
		return
	}
	keys := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(k, "FLANNEL_") {
			t.refuse("%s has a line %q that flanneld does not write: not recognised as its subnet file", path, line)
			return
		}
		keys[k] = v
	}
	if keys["FLANNEL_NETWORK"] == "" || keys["FLANNEL_SUBNET"] == "" {
		t.refuse("%s has no FLANNEL_NETWORK or FLANNEL_SUBNET: not recognised as flanneld's subnet file", path)
		return
	}
	t.add(fmt.Sprintf("flanneld's subnet file %s (FLANNEL_SUBNET=%s)", path, keys["FLANNEL_SUBNET"]), removeFile(path))
}

// readSourceVIPFile reads the host-local result the documented kube-proxy start-up scripts keep kube-proxy's
// source VIP in ({"ip4":{"ip":"10.244.1.3/24"}}, sig-windows-tools hostprocess/flannel kube-proxy start.ps1).
// A file that does not exist is (invalid, false, nil).
func readSourceVIPFile(path string) (netip.Addr, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return netip.Addr{}, false, nil
	}
	if err != nil {
		return netip.Addr{}, false, fmt.Errorf("kube-proxy's source VIP file %s: %w", path, err)
	}
	var r struct {
		IP4 struct {
			IP string `json:"ip"`
		} `json:"ip4"`
	}
	if json.Unmarshal(b, &r) != nil {
		return netip.Addr{}, false, fmt.Errorf("%s is not a host-local result: not recognised as kube-proxy's source VIP file", path)
	}
	p, err := netip.ParsePrefix(r.IP4.IP)
	if err != nil {
		return netip.Addr{}, false, fmt.Errorf("%s has no ip4.ip prefix: not recognised as kube-proxy's source VIP file", path)
	}
	return p.Addr(), true, nil
}

// NewTakeoverHNS opens the host's HNS as the agent does (the simulator on Linux) and returns its
// Inventory view. The returned function closes it.
func NewTakeoverHNS(opts HostOptions) (hns.Inventory, func(), error) {
	opts = opts.withDefaults()
	h, err := newHNS(opts)
	if err != nil {
		return nil, nil, err
	}
	inv, ok := hns.AsInventory(h)
	if !ok {
		closeHNS(h)
		return nil, nil, fmt.Errorf("this HNS client (%T) lists no networks or load balancers", h)
	}
	return inv, func() { closeHNS(h) }, nil
}
