package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/winnet-io/winnet/controllers/egress"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/controllers/podendpoint"
	"github.com/winnet-io/winnet/controllers/service"
	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/hostport"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// DefaultHNSNetwork is the HNS network name a WindowsNodeNetwork gets by default.
const DefaultHNSNetwork = "winnet"

// resetAddressWait bounds how long Reset waits for HNS to give the adapter its address back after
// the HNS network is deleted, before it re-applies the recorded configuration.
const resetAddressWait = nodenetwork.AdapterIPWait

// ResetOVSDB is what Reset needs of Open vSwitch's database: the bridges carrying winnet's
// ownership mark (ovsdb.OwnerKey), their external_ids, and deleting them (absent is a no-op).
type ResetOVSDB interface {
	Bridges(ctx context.Context) ([]string, error)
	BridgeExternalIDs(ctx context.Context, bridge string) (map[string]string, error)
	DeleteBridge(ctx context.Context, name string) (bool, error)
	// WaitApplied waits until ovs-vswitchd has applied the database (the bridges' ports are gone).
	WaitApplied(ctx context.Context) error
}

var _ ResetOVSDB = (*ovsdb.Client)(nil)

// ResetNet is what Reset needs of the host network: the uplink and the management vNIC (links and
// addresses), the adapter's recorded IP configuration, and the switch-port mark. It never touches
// routes: HNS gives them back with the adapter's configuration.
type ResetNet interface {
	hostnet.Links
	hostnet.Adapters
	hostnet.SwitchPorts
}

// ResetHost is the node's host plumbing Reset acts on, the same the agent uses.
type ResetHost struct {
	OVSDB ResetOVSDB
	HNS   hns.Interface
	Net   ResetNet
	// NodePorts is the host's NAT of its own NodePorts (hostnet.NodePortNAT), which outlives the
	// HNS network (a NetNat is the host's); nil leaves it.
	NodePorts hostnet.NodePortNAT
}

// ResetOptions configure Reset.
type ResetOptions struct {
	// HNSNetwork is the name of winnet's HNS network; empty means DefaultHNSNetwork.
	HNSNetwork string
	// StateDir is the agent's state directory; empty means DefaultStateDir.
	StateDir string
	// CNIConfDir is where the agent wrote its conflist; empty means DefaultCNIConfDir.
	CNIConfDir string
	// CNIShimPath is the shim binary winnet installed (the agent's --cni-shim-path): removed with the
	// conflist, or with the last sandbox when some are left; empty leaves the shim alone.
	CNIShimPath string
	// DryRun lists what Reset would do and changes nothing.
	DryRun bool
	// Out receives one line per thing removed (or, with DryRun, to remove); nil discards them.
	Out io.Writer
}

func (o ResetOptions) withDefaults() ResetOptions {
	if o.HNSNetwork == "" {
		o.HNSNetwork = DefaultHNSNetwork
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if o.CNIConfDir == "" {
		o.CNIConfDir = DefaultCNIConfDir
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return o
}

// NewResetHost connects to the host's Open vSwitch, HNS and network stack as the agent does
// (SetupNodeNetwork). The returned function closes the connections.
func NewResetHost(ctx context.Context, opts HostOptions) (ResetHost, func(), error) {
	opts = opts.withDefaults()
	db, err := ovsdb.New(ctx, ovsdb.Options{Address: opts.OVSDBAddress, SocketDir: filepath.Join(opts.StateDir, "run")})
	if err != nil {
		return ResetHost{}, nil, fmt.Errorf("connecting to ovsdb-server: %w", err)
	}
	hnsClient, err := newHNS(opts)
	if err != nil {
		db.Close()
		return ResetHost{}, nil, err
	}
	netClient, err := hostnet.New(hostnet.Options{NetNSPath: opts.NetNSPath})
	if err != nil {
		db.Close()
		closeHNS(hnsClient)
		return ResetHost{}, nil, fmt.Errorf("opening the host network stack: %w", err)
	}
	nat := hostnet.NewNodePortNAT(hostnet.Options{NetNSPath: opts.NetNSPath})
	return ResetHost{OVSDB: db, HNS: hnsClient, Net: netClient, NodePorts: nat}, func() { db.Close(); closeHNS(hnsClient) }, nil
}

func closeHNS(h hns.Interface) {
	if c, ok := h.(io.Closer); ok {
		_ = c.Close()
	}
}

// Reset removes, without the API server, everything winnet created on this node, from what the
// node holds, and gives the uplink adapter its configuration back, in the Windows order: the
// bridges winnet owns, the uplink's switch-port mark, the HNS network (whose deletion removes the
// management vNIC and gives the adapter its IP configuration back), a check that the adapter holds
// its recorded IPv4 address again (re-applying the record if not), then the adapter record, the
// host's NAT of its own NodePorts (ResetHost.NodePorts, not listed), the conflist and the agent's
// state (ipam/, pods/). It writes one line per step to opts.Out and
// returns them; none means there was nothing to remove. It is idempotent. The HNS simulator's own
// state file is the simulated HNS's, not winnet's, and stays.
func Reset(ctx context.Context, host ResetHost, opts ResetOptions) ([]string, error) {
	opts = opts.withDefaults()
	r := &resetter{host: host, opts: opts}
	if err := r.run(ctx); err != nil {
		return r.done, err
	}
	if len(r.done) == 0 {
		fmt.Fprintln(opts.Out, "nothing to remove: winnet left nothing on this node")
	}
	return r.done, nil
}

type resetter struct {
	host ResetHost
	opts ResetOptions
	done []string
	// uplinks are the adapters winnet bound, from the bridges, the HNS network and the records.
	uplinks []string
}

// step reports one thing removed (or, in a dry run, to remove): "removed: <what>", "would remove:
// <what>".
func (r *resetter) step(format string, args ...any) {
	r.stepAs("removed", "would remove", format, args...)
}

func (r *resetter) stepAs(did, would, format string, args ...any) {
	verb := did
	if r.opts.DryRun {
		verb = would
	}
	line := verb + ": " + fmt.Sprintf(format, args...)
	r.done = append(r.done, line)
	fmt.Fprintln(r.opts.Out, line)
}

func (r *resetter) addUplink(name string) {
	if name != "" && !slices.Contains(r.uplinks, name) {
		r.uplinks = append(r.uplinks, name)
	}
}

func (r *resetter) run(ctx context.Context) error {
	records, err := filepath.Glob(nodenetwork.AdapterRecordFile(r.opts.StateDir, "*"))
	if err != nil {
		return fmt.Errorf("listing adapter records in %s: %w", r.opts.StateDir, err)
	}
	recorded := map[string]nodenetwork.AdapterRecord{}
	for _, path := range records {
		rec, err := nodenetwork.ReadAdapterRecord(path)
		if err != nil {
			return err
		}
		recorded[path] = rec
		r.addUplink(rec.Adapter)
	}
	// (1) The bridges winnet owns.
	bridges, err := r.host.OVSDB.Bridges(ctx)
	if err != nil {
		return fmt.Errorf("listing winnet's OVS bridges: %w", err)
	}
	for _, br := range bridges {
		ids, err := r.host.OVSDB.BridgeExternalIDs(ctx, br)
		if err != nil && !errors.Is(err, ovsdb.ErrNotFound) {
			return fmt.Errorf("reading bridge %q: %w", br, err)
		}
		r.addUplink(ids[nodenetwork.UplinkKey])
		r.step("OVS bridge %s (uplink %q)", br, ids[nodenetwork.UplinkKey])
		if !r.opts.DryRun {
			if _, err := r.host.OVSDB.DeleteBridge(ctx, br); err != nil {
				return fmt.Errorf("deleting bridge %q: %w", br, err)
			}
		}
	}
	if len(bridges) > 0 && !r.opts.DryRun {
		if err := r.host.OVSDB.WaitApplied(ctx); err != nil {
			return fmt.Errorf("waiting for ovs-vswitchd to remove the bridges: %w", err)
		}
	}
	var networks []*hns.Network
	network, err := r.host.HNS.GetNetworkByName(ctx, r.opts.HNSNetwork)
	switch {
	case err == nil:
		networks = append(networks, network)
		r.addUplink(network.AdapterName)
	case !errors.Is(err, hns.ErrNotFound):
		return fmt.Errorf("looking up HNS network %s: %w", r.opts.HNSNetwork, err)
	}
	// (2) The uplinks are host interfaces again (a no-op on Windows, where the switch owned them).
	links := map[string]hostnet.Link{}
	for _, name := range r.uplinks {
		link, err := r.host.Net.LinkByName(ctx, name)
		if errors.Is(err, hostnet.ErrNotFound) {
			continue
		} else if err != nil {
			return fmt.Errorf("looking up adapter %s: %w", name, err)
		}
		links[name] = link
		if len(bridges) == 0 && len(networks) == 0 {
			continue // nothing bound it: only a record is left
		}
		r.stepAs("released", "would release", "adapter %s from the virtual switch", name)
		if !r.opts.DryRun {
			if err := r.host.Net.SetSwitchPort(ctx, link.Index, false); err != nil {
				return fmt.Errorf("releasing adapter %s from the switch: %w", name, err)
			}
		}
	}
	// (3) The HNS network: HNS removes the management vNIC and gives the adapter its configuration
	// back. HNS does not enforce unique names: delete every network with the name.
	for len(networks) > 0 {
		n := networks[0]
		networks = networks[1:]
		r.step("HNS network %s (%s) on adapter %s, with its endpoints and management vNIC", n.Name, n.ID, n.AdapterName)
		if r.opts.DryRun {
			break
		}
		if err := r.host.HNS.DeleteNetwork(ctx, n.ID); err != nil {
			return fmt.Errorf("deleting HNS network %s: %w", n.Name, err)
		}
		next, err := r.host.HNS.GetNetworkByName(ctx, r.opts.HNSNetwork)
		switch {
		case err == nil && next.ID != n.ID:
			networks = append(networks, next)
		case err == nil:
			return fmt.Errorf("HNS network %s (%s) is still there after it was deleted", n.Name, n.ID)
		case !errors.Is(err, hns.ErrNotFound):
			return fmt.Errorf("looking up HNS network %s: %w", r.opts.HNSNetwork, err)
		}
	}
	// (4) The adapters hold their recorded IPv4 address again; (5) then their records go.
	for _, path := range records {
		rec := recorded[path]
		if link, ok := links[rec.Adapter]; ok {
			if err := r.verifyAdapter(ctx, link, rec.IPConfig); err != nil {
				return err
			}
		}
		r.step("adapter record %s", path)
		if !r.opts.DryRun {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("removing the adapter record: %w", err)
			}
		}
	}
	// (5) The host's NAT of its own NodePorts (the NetNat winnet-nodeport and its static mappings on
	// Windows, the nftables table on Linux): removed whether or not it exists, and not listed, as
	// ReconcileNodePorts does not tell.
	if r.host.NodePorts != nil && !r.opts.DryRun {
		if err := r.host.NodePorts.ReconcileNodePorts(ctx, pipeline.NodePortVirtualIP, nil); err != nil {
			return fmt.Errorf("removing the host's NAT of its NodePorts: %w", err)
		}
	}
	// (6) The conflist, unless sandboxes are left (the shim removes it with the last one), and the
	// agent's state (the Service numbers name groups and zones of the switch reset took apart).
	removals := []string{filepath.Join(r.opts.StateDir, "ipam"), filepath.Join(r.opts.StateDir, "pods"),
		filepath.Join(r.opts.StateDir, hostport.DirName), filepath.Join(r.opts.StateDir, service.IDsFileName),
		filepath.Join(r.opts.StateDir, podendpoint.IncarnationsFileName), filepath.Join(r.opts.StateDir, egress.RecordFileName)}
	keep, err := r.retireCNI(ctx)
	if err != nil {
		return err
	}
	if !keep {
		removals = append([]string{filepath.Join(r.opts.CNIConfDir, cni.ConfListName)}, removals...)
	}
	if err := cni.ValidateShimPath(r.opts.CNIShimPath); err != nil {
		return err
	}
	shim := !keep && r.opts.CNIShimPath != ""
	if shim {
		removals = append(removals, r.opts.CNIShimPath)
	}
	for _, path := range removals {
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		r.step("%s", path)
		if r.opts.DryRun {
			continue
		}
		if shim && path == r.opts.CNIShimPath {
			if err := cni.RemoveShim(path); err != nil {
				return err
			}
		} else if err := os.RemoveAll(path); err != nil {
			return fmt.Errorf("removing %s: %w", path, err)
		}
	}
	return nil
}

// retireCNI records the sandboxes the agent attached, when any are left, for the shim, which then
// answers their DEL without the agent and removes the conflist with the last one (cni.Retire). It
// reports whether the conflist stays: sandboxes are left, or a retirement already waits for them.
func (r *resetter) retireCNI(_ context.Context) (bool, error) {
	sandboxes, err := attachedSandboxes(filepath.Join(r.opts.StateDir, "pods"))
	if err != nil {
		return false, err
	}
	_, retired, err := cni.ReadRetirement(r.opts.StateDir)
	if err != nil {
		return false, err
	}
	if len(sandboxes) == 0 {
		return retired, nil
	}
	confList := filepath.Join(r.opts.CNIConfDir, cni.ConfListName)
	r.stepAs("kept", "would keep", "%s while %d sandboxes are left: the shim answers their DEL and removes it with the last", confList, len(sandboxes))
	if r.opts.CNIShimPath != "" {
		r.stepAs("kept", "would keep", "%s while %d sandboxes are left: it answers their DEL and removes itself with the last", r.opts.CNIShimPath, len(sandboxes))
	}
	if r.opts.DryRun {
		return true, nil
	}
	_, err = cni.Retire(r.opts.StateDir, r.opts.CNIConfDir, cni.Retirement{Shim: r.opts.CNIShimPath, By: "winnet-agent reset", Time: time.Now()}, sandboxes)
	return true, err
}

// attachedSandboxes returns the sandbox IDs of the attachments the agent recorded in dir (its
// podendpoint.Store); none when dir does not exist.
func attachedSandboxes(dir string) ([]string, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	store, err := podendpoint.OpenStore(dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, a := range store.List() {
		ids = append(ids, a.SandboxID)
	}
	return ids, nil
}

// verifyAdapter waits, bounded, for the adapter to hold the recorded IPv4 address again and
// re-applies the recorded configuration when HNS did not give it back.
func (r *resetter) verifyAdapter(ctx context.Context, link hostnet.Link, cfg hostnet.IPConfig) error {
	var ip netip.Addr
	for _, a := range cfg.Addresses {
		if a.Addr().Is4() {
			ip = a.Addr()
			break
		}
	}
	if !ip.IsValid() {
		return nil // nothing to check against
	}
	if r.opts.DryRun {
		if ok, err := holds(ctx, r.host.Net, link.Index, ip); err != nil {
			return err
		} else if !ok {
			r.stepAs("checked", "would check", "adapter %s gets %s back, re-applying its recorded IP configuration if not", link.Name, ip)
		}
		return nil
	}
	reapplied, err := nodenetwork.RestoreAdapter(ctx, r.host.Net, link, cfg, ip, resetAddressWait)
	if reapplied {
		r.stepAs("re-applied", "would re-apply", "the recorded IP configuration of adapter %s: HNS did not give %s back", link.Name, ip)
	}
	return err
}

func holds(ctx context.Context, h hostnet.Links, linkIndex int, ip netip.Addr) (bool, error) {
	addrs, err := h.Addresses(ctx, linkIndex)
	if err != nil {
		return false, fmt.Errorf("reading the addresses of link %d: %w", linkIndex, err)
	}
	return slices.ContainsFunc(addrs, func(a netip.Prefix) bool { return a.Addr() == ip }), nil
}
