package preflight

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path/filepath"
	"time"

	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/securefs"
)

// hostSource marks the facts a Linux node answers from its own host (real netlink, the OVS
// processes' pid files), not from a Windows API.
const hostSource = "Linux host"

// simSource marks what the HNS simulator answered.
const simSource = "HNS simulator"

// DefaultContainerdConfig is containerd's configuration on Linux.
const DefaultContainerdConfig = "/etc/containerd/config.toml"

// DefaultOVSRunDir is where Debian's Open vSwitch keeps its control sockets.
const DefaultOVSRunDir = "/var/run/openvswitch"

func platformName(opts Options) string {
	if opts.NetNSPath != "" {
		return "linux, simulated node " + opts.NetNSPath + " (HNS simulator)"
	}
	return "linux (HNS simulator)"
}

// containerdDefaults: a Linux node without a containerd configuration is taken as a simulated node
// whose runtime is the test harness: not compared.
func containerdDefaults() (confDir, binDir string, ok bool) { return "", "", false }

// defaultContainerdConfig is the host's containerd configuration, but none for a simulated node
// (--netns): its runtime, if any, is not the host's.
func defaultContainerdConfig(opts Options) (path, unavailable string) {
	if opts.NetNSPath != "" {
		return "", "a simulated node's runtime is not the host's containerd (give --containerd-config)"
	}
	return DefaultContainerdConfig, ""
}

func gatherOS(context.Context) Fact[OSInfo] {
	return NotOnPlatform[OSInfo]("Linux has no Windows build (registry)")
}

func gatherFeatures(context.Context) Fact[map[string]bool] {
	return NotOnPlatform[map[string]bool]("Linux has no Windows features (WMI)")
}

func gatherDriver(context.Context) Fact[DriverInfo] {
	return NotOnPlatform[DriverInfo]("Linux runs the userspace datapath: no extension driver, no driver signing")
}

// gatherServices looks for the control sockets ovsdb-server and ovs-vswitchd serve in OVS's run
// directory (<name>.ctl, or <name>.<pid>.ctl as Debian's packages start them) and connects to each:
// a socket that answers is a running daemon; one left behind refuses the connection.
func gatherServices(_ context.Context, opts Options) Fact[map[string]ServiceState] {
	dir := opts.OVSRunDir
	if dir == "" {
		dir = DefaultOVSRunDir
	}
	out := map[string]ServiceState{}
	for _, name := range []string{OVSDBService, OVSVswitchdService} {
		socks, err := filepath.Glob(filepath.Join(dir, name+".*ctl"))
		if err != nil {
			return Failed[map[string]ServiceState](err, hostSource)
		}
		s := ServiceState{}
		for _, sock := range socks {
			s.Present, s.State = true, "not answering on "+filepath.Base(sock)
			if c, err := net.DialTimeout("unix", sock, 2*time.Second); err == nil {
				_ = c.Close()
				s.Running, s.State = true, "answering on "+filepath.Base(sock)
				break
			}
		}
		out[name] = s
	}
	return Known(out, hostSource+", control sockets in "+dir)
}

// gatherHNS reads the HNS simulator's state file, as the agent keeps it in its state directory,
// without starting a simulator: winnet's network and its extension. The simulator answers its
// version (hns.SimVersion) and the load balancers of its state: only kube-proxy's, seeded on a node
// taken over from it (winnet makes none).
func gatherHNS(_ context.Context, opts Options) Fact[HNSInfo] {
	info := HNSInfo{Version: hns.SimVersion}
	b, err := securefs.ReadFile(filepath.Join(opts.StateDir, SimStateFile), securefs.Private, 64<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return Known(info, simSource)
	} else if err != nil {
		return Failed[HNSInfo](err, simSource)
	}
	networks, err := hns.ReadSimNetworks(b)
	if err != nil {
		return Failed[HNSInfo](err, simSource)
	}
	if info.LoadBalancers, err = hns.ReadSimLoadBalancers(b); err != nil {
		return Failed[HNSInfo](err, simSource)
	}
	for _, n := range networks {
		if n.Name == opts.HNSNetwork {
			info.Network = &n.Network
			info.ExtensionEnabled = n.OVSExtension
			break
		}
	}
	return Known(info, simSource)
}

// SimStateFile is the HNS simulator's state file in the agent's state directory.
const SimStateFile = "hns-sim.json"

// dialVswitchd connects to ovs-vswitchd's control socket in OVS's run directory.
func dialVswitchd(ctx context.Context, opts Options) (net.Conn, error) {
	dir := opts.OVSRunDir
	if dir == "" {
		dir = DefaultOVSRunDir
	}
	socks, err := filepath.Glob(filepath.Join(dir, OVSVswitchdService+".*ctl"))
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	for _, sock := range socks {
		if c, err := d.DialContext(ctx, "unix", sock); err == nil {
			return c, nil
		}
	}
	return nil, fmt.Errorf("no control socket of ovs-vswitchd answers in %s", dir)
}
