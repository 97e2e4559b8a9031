//go:build linux

package simnode

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Snapshot is what a simulated node shows of its network, to compare a node before winnet and after
// winnet left: the uplink's IPv4 addresses, the routes, the links and the OVS bridges.
type Snapshot struct {
	UplinkAddrs, Routes, Links, Bridges string
}

// routeProto drops the routes' protocol: the HNS simulator gives the routes back with protocol
// "static" where the node had them from "boot" (ip's default, not shown).
var routeProto = regexp.MustCompile(` proto (static|boot)`)

// Snapshot reads the node's Snapshot.
func (n *Node) Snapshot() (Snapshot, error) {
	var firstErr error
	run := func(args ...string) string {
		out, err := Output(n.NS, args...) // standard output only: ip's warnings are not the node's state
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("%v: %w", args, err)
		}
		return out
	}
	links := []string{}
	for _, l := range strings.Split(strings.TrimSpace(run("ip", "-o", "link", "show")), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			// ovs-netdev is the userspace datapath's own device, which ovs-vswitchd creates with
			// the first netdev bridge and keeps: Open vSwitch's, not winnet's.
			if name := strings.TrimSuffix(strings.SplitN(f[1], "@", 2)[0], ":"); name != "ovs-netdev" {
				links = append(links, name)
			}
		}
	}
	addrs := []string{}
	for _, l := range strings.Split(run("ip", "-4", "-o", "addr", "show", "dev", UplinkName), "\n") {
		if f := strings.Fields(l); len(f) > 3 {
			addrs = append(addrs, f[3]) // inet <address/len>
		}
	}
	s := Snapshot{
		UplinkAddrs: strings.Join(addrs, " "),
		Routes:      routeProto.ReplaceAllString(run("ip", "route"), ""),
		Links:       strings.Join(links, " "),
		Bridges:     run("ovs-vsctl", "--db=unix:"+n.OVS.DBSocket(), "list-br"),
	}
	return s, firstErr
}

// Files lists every file and directory under the dirs (not the dirs themselves), sorted: what a node
// holds on disk (the agent's state, the CNI configuration directory).
func Files(dirs ...string) ([]string, error) {
	var out []string
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if os.IsNotExist(err) && path == dir {
				return filepath.SkipDir
			}
			if err != nil {
				return err
			}
			if path != dir {
				out = append(out, path)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", dir, err)
		}
	}
	slices.Sort(out)
	return out, nil
}
