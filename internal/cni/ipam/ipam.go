// Package ipam gives Pods their addresses by delegating to the real host-local CNI plugin, as a
// CNI runtime would. It is the agent's side only: the CNI shim does not link it (nor the CNI
// library's plugin invocation and its tracing dependencies), which keeps the shim that kubelet
// runs for every call small and quick to start.
package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// Plugin is the CNI IPAM plugin the agent delegates Pod addresses to.
const Plugin = "host-local"

// ipamNetwork names host-local's directory of allocations under the data directory.
const ipamNetwork = "winnet"

// ipamCNIVersion is the CNI version the agent speaks to the IPAM plugin.
const ipamCNIVersion = "1.0.0"

// Options configure HostLocal.
type Options struct {
	// PluginDirs are searched, in order, for the host-local binary.
	PluginDirs []string
	// DataDir is host-local's data directory: it keeps one file per allocated address there.
	DataDir string
}

// HostLocal allocates Pod addresses from the node's Pod CIDR by running the real host-local plugin, as a
// CNI runtime would: one allocation per container ID and interface name, the gateway (the first
// address of the Pod CIDR) never handed out, allocations kept on disk across agent restarts.
type HostLocal struct {
	plugin  string
	dataDir string
}

// Allocation is one address host-local handed out.
type Allocation struct {
	IP          netip.Addr
	ContainerID string
	IfName      string
}

// New finds the host-local binary in opts.PluginDirs.
func New(opts Options) (*HostLocal, error) {
	if opts.DataDir == "" {
		return nil, errors.New("IPAM needs a data directory")
	}
	plugin, err := invoke.FindInPath(Plugin, opts.PluginDirs)
	if err != nil {
		return nil, fmt.Errorf("finding the %s IPAM plugin in %v (install the CNI plugins, e.g. Debian's containernetworking-plugins, or pass --cni-bin-dir): %w",
			Plugin, opts.PluginDirs, err)
	}
	return &HostLocal{plugin: plugin, dataDir: opts.DataDir}, nil
}

// Plugin returns the path of the host-local binary in use.
func (i *HostLocal) Plugin() string { return i.plugin }

// Request identifies one allocation: the container it is for and the Pod CIDR it comes from.
type Request struct {
	ContainerID string
	IfName      string
	// Netns is passed to the plugin as CNI_NETNS (host-local does not enter it).
	Netns string
	// Subnet is the node's Pod CIDR.
	Subnet netip.Prefix
	// Gateway is never allocated; invalid means the first address of Subnet.
	Gateway netip.Addr
}

// Allocate returns an address for the container from the Pod CIDR, with the Pod CIDR's prefix
// length. An allocation host-local still holds for the same container and interface (an ADD that
// failed half-way in a previous agent) is released and made again. The error of a failed
// allocation is a *types.Error carrying host-local's code and message.
func (i *HostLocal) Allocate(ctx context.Context, req Request) (netip.Prefix, error) {
	addr, err := i.allocate(ctx, req)
	if err != nil && strings.Contains(err.Error(), "duplicate allocation") {
		if rerr := i.Release(ctx, req); rerr != nil {
			return netip.Prefix{}, errors.Join(err, rerr)
		}
		addr, err = i.allocate(ctx, req)
	}
	return addr, err
}

func (i *HostLocal) allocate(ctx context.Context, req Request) (netip.Prefix, error) {
	conf, err := i.netConf(req.Subnet, req.Gateway)
	if err != nil {
		return netip.Prefix{}, err
	}
	res, err := invoke.ExecPluginWithResult(ctx, i.plugin, conf, i.args("ADD", req), nil)
	if err != nil {
		return netip.Prefix{}, pluginError(err, "allocating an address from %s for container %s", req.Subnet, req.ContainerID)
	}
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("reading the result of %s: %w", Plugin, err)
	}
	for _, ip := range cur.IPs {
		if a, ok := netip.AddrFromSlice(ip.Address.IP); ok && req.Subnet.Contains(a.Unmap()) {
			return netip.PrefixFrom(a.Unmap(), req.Subnet.Bits()), nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("%s returned no address in %s: %v", Plugin, req.Subnet, cur.IPs)
}

// releaseRange stands in for the Pod CIDR when a release does not know it: host-local releases by
// container ID and interface name, and only needs a valid range.
var releaseRange = netip.MustParsePrefix("169.254.0.0/16")

// Release gives back the container's address; releasing an address that is not allocated succeeds.
// req.Subnet may be left empty.
func (i *HostLocal) Release(ctx context.Context, req Request) error {
	subnet := req.Subnet
	if !subnet.IsValid() {
		subnet = releaseRange
	}
	conf, err := i.netConf(subnet, netip.Addr{})
	if err != nil {
		return err
	}
	if err := invoke.ExecPluginWithoutResult(ctx, i.plugin, conf, i.args("DEL", req), nil); err != nil {
		return pluginError(err, "releasing the address of container %s", req.ContainerID)
	}
	return nil
}

// Allocations lists the addresses host-local has handed out, read from its data directory.
func (i *HostLocal) Allocations() ([]Allocation, error) {
	dir := filepath.Join(i.dataDir, ipamNetwork)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing IPAM allocations in %s: %w", dir, err)
	}
	var out []Allocation
	for _, e := range entries {
		ip, err := netip.ParseAddr(e.Name())
		if err != nil || e.IsDir() {
			continue // host-local's lock and last-reserved files
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("reading IPAM allocation %s: %w", e.Name(), err)
		}
		id, ifName, _ := strings.Cut(string(b), "\r\n")
		out = append(out, Allocation{IP: ip, ContainerID: strings.TrimSpace(id), IfName: strings.TrimSpace(ifName)})
	}
	return out, nil
}

// netConf is the network configuration host-local gets: one range, the Pod CIDR, whose gateway it
// never allocates.
func (i *HostLocal) netConf(subnet netip.Prefix, gateway netip.Addr) ([]byte, error) {
	if !subnet.IsValid() || !subnet.Addr().Is4() {
		return nil, fmt.Errorf("IPAM needs an IPv4 Pod CIDR, got %q", subnet)
	}
	subnet = subnet.Masked()
	if !gateway.IsValid() {
		gateway = subnet.Addr().Next()
	}
	if !subnet.Contains(gateway) {
		return nil, fmt.Errorf("gateway %s is outside the Pod CIDR %s", gateway, subnet)
	}
	conf := map[string]any{
		"cniVersion": ipamCNIVersion,
		"name":       ipamNetwork,
		"ipam": map[string]any{
			"type":    Plugin,
			"dataDir": i.dataDir,
			"ranges": [][]map[string]string{{{
				"subnet":  subnet.String(),
				"gateway": gateway.String(),
			}}},
		},
	}
	b, err := json.Marshal(conf)
	if err != nil {
		return nil, fmt.Errorf("encoding the IPAM configuration: %w", err)
	}
	return b, nil
}

func (i *HostLocal) args(command string, req Request) *invoke.Args {
	return &invoke.Args{
		Command:     command,
		ContainerID: req.ContainerID,
		NetNS:       req.Netns,
		IfName:      req.IfName,
		Path:        filepath.Dir(i.plugin),
	}
}

// pluginError keeps the plugin's CNI error code and prefixes its message with what was being done.
func pluginError(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	var cniErr *types.Error
	if errors.As(err, &cniErr) {
		return types.NewError(cniErr.Code, fmt.Sprintf("%s: %s: %s", what, Plugin, cniErr.Msg), cniErr.Details)
	}
	return types.NewError(types.ErrInternal, fmt.Sprintf("%s: running %s: %v", what, Plugin, err), "")
}
