//go:build linux

package cluster

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/winnet-io/winnet/test/hostcmd"
	"github.com/winnet-io/winnet/test/simnode"
)

// Names inside the namespaces of a run. Every interface is created directly inside its namespace, so no name
// ever touches the root namespace; namespaces carry the run prefix.
const (
	underlayBridge = "br0"
	uplinkName     = "uplink0"
	hostIfName     = "eth0"
)

// Host is a plain namespace on the underlay: the external host.
type Host struct {
	Name   string
	NS     string
	NSPath string
	IP     netip.Prefix
}

// Exec runs a command inside the host's namespace.
func (h *Host) Exec(args ...string) (string, error) { return simnode.Exec(h.NS, args...) }

func nsPath(ns string) string { return "/run/netns/" + ns }

// run runs commands in namespace ns (the current one when empty), stopping at the first failure.
func run(ns string, cmds ...[]string) error {
	for _, c := range cmds {
		if _, err := simnode.Exec(ns, c...); err != nil {
			return err
		}
	}
	return nil
}

// addNS creates a namespace with lo up.
func addNS(ns string) error {
	if err := run("", []string{"ip", "netns", "add", ns}); err != nil {
		return err
	}
	return run(ns, []string{"ip", "link", "set", "lo", "up"})
}

// deleteNS kills the processes inside a namespace and deletes it; a namespace that is gone is no error.
func deleteNS(ns string) error {
	if _, err := os.Stat(nsPath(ns)); os.IsNotExist(err) {
		return nil
	}
	if out, err := hostcmd.Command("ip", "netns", "pids", ns).Output(); err == nil {
		pids := map[int]string{}
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				pids[pid] = ""
			}
		}
		waitGone(pids)
	}
	out, err := hostcmd.Command("ip", "netns", "del", ns).CombinedOutput()
	if err != nil {
		return fmt.Errorf("deleting namespace %s: %w: %s", ns, err, out)
	}
	// The namespace's own /etc files (the resolv.conf the HNS simulator wrote for a Pod's DNS settings), which
	// `ip netns del` leaves behind.
	return os.RemoveAll(filepath.Join("/etc/netns", ns))
}

// macFor derives a stable, locally administered MAC from an IPv4 address: 02:5e:a.b.c.d.
func macFor(ip netip.Addr) net.HardwareAddr {
	b := ip.As4()
	return net.HardwareAddr{0x02, 0x5e, b[0], b[1], b[2], b[3]}
}

// plug creates ifName in namespace ns (MAC derived from ip, address ip, default route via gw) veth-paired with
// port on the underlay bridge.
func plug(underlayNS, ns, ifName, port string, ip netip.Prefix, gw netip.Addr) error {
	if err := run("", []string{"ip", "link", "add", ifName, "netns", ns, "address", macFor(ip.Addr()).String(),
		"type", "veth", "peer", "name", port, "netns", underlayNS}); err != nil {
		return err
	}
	if err := run(underlayNS, []string{"ip", "link", "set", port, "master", underlayBridge},
		[]string{"ip", "link", "set", port, "up"}); err != nil {
		return err
	}
	return run(ns, []string{"ip", "addr", "add", ip.String(), "dev", ifName}, []string{"ip", "link", "set", ifName, "up"},
		[]string{"ip", "route", "add", "default", "via", gw.String(), "dev", ifName})
}

// newUnderlay creates the underlay namespace with its bridge, holding gw.
func newUnderlay(ns string, cidr netip.Prefix, gw netip.Addr) error {
	if err := addNS(ns); err != nil {
		return err
	}
	return run(ns,
		[]string{"ip", "link", "add", underlayBridge, "address", macFor(gw).String(), "type", "bridge",
			"stp_state", "0", "forward_delay", "0", "mcast_snooping", "0"},
		[]string{"ip", "addr", "add", netip.PrefixFrom(gw, cidr.Bits()).String(), "dev", underlayBridge},
		[]string{"ip", "link", "set", underlayBridge, "up"},
	)
}

// waitFor polls cond every interval until it returns nil or timeout passes, and returns its last error.
func waitFor(timeout, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(interval)
	}
}
