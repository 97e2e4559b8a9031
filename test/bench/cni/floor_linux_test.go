//go:build linux && bench

package cni

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/hostcmd"
	"github.com/winnet-io/winnet/test/simnode"
)

// floorBridge is the bridge the floor uses on the node's ovs-vswitchd: the same switch (and userspace
// datapath) as winnet's br-int, apart so that the agent never sees the floor's ports and flows.
const floorBridge = "br-floor"

// floorRun does, for every Pod, the host work a Pod needs without winnet, at the same concurrency and
// driven the same way as cniRun and split where winnet's work is split: ADD is `ovs-ofctl --bundle
// add-flows` of the Pod's flows as the pipeline builds them; the sandbox's start (the vnic latencies)
// is the endpoint's veth pair with the container end in the worker's namespace (MAC, address, up: what
// the HNS simulator does) and `ovs-vsctl add-port` of the host end, which waits for ovs-vswitchd to
// give it its ofport; DEL is `ovs-ofctl --bundle del-flows` of the flows, `ovs-vsctl del-port` and the
// veth's deletion. Each OVS step is one process and one new connection, as the issue that asked for
// this floor defines it; winnet keeps its connections open, so the floor is not a lower bound of
// what a persistent client could do.
func floorRun(t *testing.T, node *simnode.Node, conc int, namespaces []string) *latencies {
	t.Helper()
	node.OVS.MustVsctl(t, "--may-exist", "add-br", floorBridge, "--", "set", "bridge", floorBridge,
		"datapath_type=netdev", "protocols=OpenFlow15")
	hostNS, err := netns.GetFromPath(node.NSPath)
	if err != nil {
		t.Fatal(err)
	}
	defer hostNS.Close()
	host, err := netlink.NewHandleAt(hostNS)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	workers := make([]*netlink.Handle, len(namespaces))
	workerNS := make([]netns.NsHandle, len(namespaces))
	for i, name := range namespaces {
		if workerNS[i], err = netns.GetFromName(name); err != nil {
			t.Fatal(err)
		}
		defer workerNS[i].Close()
		if workers[i], err = netlink.NewHandleAt(workerNS[i]); err != nil {
			t.Fatal(err)
		}
		defer workers[i].Close()
	}
	pipe := pipeline.Node{GatewayMAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 1}}
	prefix := netip.MustParsePrefix(podCIDR)
	vnic := &latencies{}
	l, err := parallel(conc, func(w, i int) (time.Duration, time.Duration, error) {
		hostName, mac := fmt.Sprintf("fl%d-%03d", conc, i), net.HardwareAddr{0x02, 0xf1, 0, byte(conc), byte(i >> 8), byte(i)}
		ip := prefix.Addr().Next()
		for range i + 2 {
			ip = ip.Next()
		}
		// ADD: the Pod's flows, for the ofport the port will have (winnet's ADD also installs them
		// for a requested ofport and creates the port unbound; the vNIC comes with the sandbox).
		port := uint32(1000 + i)
		cookie := uint64(conc)<<32 | uint64(i+1)
		var flows bytes.Buffer
		for _, f := range pipe.PodFlows(pipeline.Pod{OFPort: port, MAC: mac, IP: ip, Incarnation: 1}) {
			f.Cookie = cookie
			flows.WriteString(f.String())
			flows.WriteByte('\n')
		}
		start := time.Now()
		if err := ofctlStdin(node, &flows, "--bundle", "add-flows", floorBridge, "-"); err != nil {
			return 0, 0, err
		}
		added := time.Since(start)

		// The sandbox starts: its vNIC (the veth, configured in the Pod's namespace) appears and
		// becomes the port, which forwards once ovs-vswitchd gave it its ofport (ovs-vsctl waits).
		vnicStart := time.Now()
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostName, Flags: net.FlagUp},
			PeerName: "eth0", PeerHardwareAddr: mac, PeerNamespace: netlink.NsFd(int(workerNS[w]))}
		if err := host.LinkAdd(veth); err != nil {
			return 0, 0, fmt.Errorf("floor: creating %s: %w", hostName, err)
		}
		if err := host.LinkSetUp(veth); err != nil {
			return 0, 0, fmt.Errorf("floor: setting %s up: %w", hostName, err)
		}
		eth0, err := workers[w].LinkByName("eth0")
		if err != nil {
			return 0, 0, fmt.Errorf("floor: %w", err)
		}
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(prefix.Bits(), 32)}}
		if err := workers[w].AddrAdd(eth0, addr); err != nil {
			return 0, 0, fmt.Errorf("floor: address of %s: %w", hostName, err)
		}
		if err := workers[w].LinkSetUp(eth0); err != nil {
			return 0, 0, fmt.Errorf("floor: %w", err)
		}
		if err := vsctl(node, "add-port", floorBridge, hostName, "--", "set", "Interface", hostName, fmt.Sprintf("ofport_request=%d", port)); err != nil {
			return 0, 0, err
		}
		vnic.vnicMu.Lock()
		vnic.d = append(vnic.d, time.Since(vnicStart))
		vnic.vnicMu.Unlock()

		start = time.Now()
		if err := ofctlStdin(node, nil, "--bundle", "del-flows", floorBridge, fmt.Sprintf("cookie=%#x/-1", cookie)); err != nil {
			return 0, 0, err
		}
		if err := vsctl(node, "del-port", floorBridge, hostName); err != nil {
			return 0, 0, err
		}
		if err := host.LinkDel(veth); err != nil {
			return 0, 0, fmt.Errorf("floor: deleting %s: %w", hostName, err)
		}
		return added, time.Since(start), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	l.vnic = vnic
	return l
}

// ofctlStdin runs ovs-ofctl -O OpenFlow15 args on the node's switch, with stdin as its input.
func ofctlStdin(node *simnode.Node, stdin *bytes.Buffer, args ...string) error {
	for i, a := range args {
		if a == floorBridge {
			args[i] = "unix:" + node.OVS.MgmtSocket(floorBridge)
		}
	}
	cmd := hostcmd.Command("ovs-ofctl", append([]string{"-O", "OpenFlow15"}, args...)...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ovs-ofctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// vsctl runs ovs-vsctl on the node's database socket directly (no namespace to enter: the socket is a
// file), so that the floor pays one exec per call; it waits for ovs-vswitchd to apply the change.
func vsctl(node *simnode.Node, args ...string) error {
	cmd := hostcmd.Command("ovs-vsctl", append([]string{"--db=unix:" + node.OVS.DBSocket(), "--timeout=10"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ovs-vsctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
