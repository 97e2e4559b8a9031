//go:build linux

package simnode

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/winnet-io/winnet/internal/ovs/ovstest"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// Topology (all names are per-test unique; everything lives in namespaces, nothing in the root one):
//
//	underlay ns "sn<rand>-u":  br0 (Linux bridge, holds the gateway address, first host of CIDR)
//	                           ├── p1 ── veth ── uplink0  in node ns "sn<rand>-<name>"  (node IP, default via gateway)
//	                           ├── p2 ── veth ── uplink0  in node ns ...
//	                           └── x1 ── veth ── eth0     in host ns "sn<rand>-<name>"  (the external host)
//
// The veths are created directly inside their namespaces (`ip link add ... netns A type veth peer ...
// netns B`), so their names never touch the root namespace and cannot collide with other tests.

const (
	// NSPrefix starts every namespace name this package creates.
	NSPrefix = "sn"
	// UplinkName is the name of a node's uplink veth inside its namespace.
	UplinkName = "uplink0"
	// HostIfName is the name of a host's underlay veth inside its namespace.
	HostIfName = "eth0"
	// BridgeName is the Linux bridge in the underlay namespace.
	BridgeName = "br0"
	// ExternalName is the name of the external host created with every underlay.
	ExternalName = "ext"
)

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,15}$`)

// Underlay is a shared L2 segment (a Linux bridge in its own netns) that nodes' uplinks plug into, plus
// an "external" host namespace on the same segment (a stand-in for the internet / datacenter router).
type Underlay struct {
	// NS is the name of the underlay network namespace (holding the bridge BridgeName).
	NS string
	// CIDR is the underlay subnet.
	CIDR netip.Prefix
	// Gateway is the first host address of CIDR, held by the bridge; nodes' default route points at it.
	Gateway netip.Addr
	// ExternalIP is the address of the external host: the last host address of CIDR (.254 in a /24).
	ExternalIP netip.Addr

	prefix   string // NSPrefix + random suffix; all namespaces of this underlay start with it
	mu       sync.Mutex
	ports    int
	names    map[string]bool
	ips      map[netip.Addr]string
	external *Host
}

// Node is one simulated node: a netns with loopback up and an uplink veth UplinkName (MAC derived from
// the node IP) holding the node IP/prefix and a default route via the underlay's gateway, plugged into
// the underlay bridge. OVS is set when NodeOptions.StartOVS was given.
type Node struct {
	Name   string
	NS     string
	NSPath string
	// Uplink is the uplink interface in NS (UplinkName).
	Uplink    string
	UplinkMAC net.HardwareAddr
	NodeIP    netip.Prefix
	// UnderlayPort is the peer of Uplink, a port of the bridge in the underlay namespace
	// (e.g. for `ip link set <port> down` to cut the node off).
	UnderlayPort string
	OVS          *ovstest.OVS
}

// NodeOptions configures AddNode.
type NodeOptions struct {
	// StartOVS starts a private ovsdb-server + ovs-vswitchd (userspace datapath) in the node namespace.
	StartOVS bool
}

// Host is a plain namespace on the underlay (the external host), also usable for "Pod" namespaces later.
type Host struct {
	Name   string
	NS     string
	NSPath string
	// IfName is the interface on the underlay in NS (HostIfName).
	IfName string
	MAC    net.HardwareAddr
	IP     netip.Prefix
	// UnderlayPort is the peer of IfName, a port of the bridge in the underlay namespace.
	UnderlayPort string
}

// CheckPrerequisites reports why simulated nodes cannot be built here, or nil.
func CheckPrerequisites() error {
	var problems []string
	if os.Geteuid() != 0 {
		problems = append(problems, "must run as root (network namespaces, veths, bridges)")
	}
	for _, b := range []string{"ip", "ping"} {
		if err := hostcmd.Check(b); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// NewUnderlay creates the underlay namespace with its bridge (holding the gateway address) and the
// external host. cidr must be IPv4 with room for the gateway, the external host and nodes (at most /29).
// Everything is deleted in t.Cleanup.
func NewUnderlay(t testing.TB, cidr netip.Prefix) *Underlay {
	t.Helper()
	if err := CheckPrerequisites(); err != nil {
		t.Fatalf("cannot build simulated nodes: %v; install iproute2 and iputils-ping and run as root: run hack/setup-test-deps.sh", err)
	}
	cidr = cidr.Masked()
	if !cidr.IsValid() || !cidr.Addr().Is4() || cidr.Bits() > 29 {
		t.Fatalf("simnode: underlay CIDR %v must be IPv4 with a prefix length of at most 29", cidr)
	}
	gw := cidr.Addr().Next()
	ext := lastAddr(cidr).Prev()
	u := &Underlay{
		CIDR: cidr, Gateway: gw, ExternalIP: ext,
		names: map[string]bool{}, ips: map[netip.Addr]string{gw: "gateway"},
	}
	for range 5 {
		u.prefix = NSPrefix + randHex(3)
		if !prefixInUse(u.prefix) {
			break
		}
	}
	u.NS = u.prefix + "-u"
	if _, err := Exec("", "ip", "netns", "add", u.NS); err != nil {
		t.Fatalf("simnode: creating underlay namespace: %v", err)
	}
	t.Cleanup(func() { deleteNS(t, u.NS) })
	mustRun(t, u.NS,
		[]string{"ip", "link", "set", "lo", "up"},
		// forward_delay 0 with STP off: ports forward at once; no multicast snooping.
		[]string{"ip", "link", "add", BridgeName, "address", macFor(gw).String(), "type", "bridge",
			"stp_state", "0", "forward_delay", "0", "mcast_snooping", "0"},
		[]string{"ip", "addr", "add", netip.PrefixFrom(gw, cidr.Bits()).String(), "dev", BridgeName},
		[]string{"ip", "link", "set", BridgeName, "up"},
	)
	u.external = u.AddHost(t, ExternalName, netip.PrefixFrom(ext, cidr.Bits()))
	return u
}

// External is the external host: HostIfName holds ExternalIP/len, default route via the gateway.
func (u *Underlay) External() *Host { return u.external }

// AddNode creates a node namespace plugged into the underlay. nodeIP must be inside the underlay CIDR
// and not the gateway, the external host or another node. name is short: [a-z0-9-], at most 16 bytes.
func (u *Underlay) AddNode(t testing.TB, name string, nodeIP netip.Prefix, opts NodeOptions) *Node {
	t.Helper()
	ns, port := u.reserve(t, name, nodeIP, "p")
	mac := macFor(nodeIP.Addr())
	u.plug(t, ns, UplinkName, mac, nodeIP, port)
	n := &Node{
		Name: name, NS: ns, NSPath: nsPath(ns), Uplink: UplinkName, UplinkMAC: mac,
		NodeIP: nodeIP, UnderlayPort: port,
	}
	if opts.StartOVS {
		n.OVS = ovstest.Start(t, ovstest.Options{NetNS: ns})
	}
	return n
}

// AddHost creates a plain namespace plugged into the underlay with ip on HostIfName and a default
// route via the gateway (the external host is one).
func (u *Underlay) AddHost(t testing.TB, name string, ip netip.Prefix) *Host {
	t.Helper()
	ns, port := u.reserve(t, name, ip, "x")
	mac := macFor(ip.Addr())
	u.plug(t, ns, HostIfName, mac, ip, port)
	return &Host{Name: name, NS: ns, NSPath: nsPath(ns), IfName: HostIfName, MAC: mac, IP: ip, UnderlayPort: port}
}

// reserve validates name and ip, records them and returns the namespace and the bridge port names.
func (u *Underlay) reserve(t testing.TB, name string, ip netip.Prefix, portPrefix string) (ns, port string) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if !nameRE.MatchString(name) || name == "u" {
		t.Fatalf("simnode: name %q must match %s and not be \"u\"", name, nameRE)
	}
	if u.names[name] {
		t.Fatalf("simnode: name %q is already used on this underlay", name)
	}
	if !ip.IsValid() || !u.CIDR.Contains(ip.Addr()) || ip.Addr() == u.CIDR.Addr() || ip.Addr() == lastAddr(u.CIDR) {
		t.Fatalf("simnode: address %v of %s must be a host address inside the underlay %v", ip, name, u.CIDR)
	}
	if ip.Bits() != u.CIDR.Bits() {
		t.Fatalf("simnode: address %v of %s must have the underlay's prefix length /%d", ip, name, u.CIDR.Bits())
	}
	if other, ok := u.ips[ip.Addr()]; ok {
		t.Fatalf("simnode: address %v of %s is already held by %s", ip.Addr(), name, other)
	}
	u.names[name] = true
	u.ips[ip.Addr()] = name
	u.ports++
	return u.prefix + "-" + name, portPrefix + strconv.Itoa(u.ports)
}

// plug creates namespace ns (deleted in t.Cleanup) with ifName (MAC mac, address ip, default route via
// the gateway) veth-paired with port on the underlay bridge.
func (u *Underlay) plug(t testing.TB, ns, ifName string, mac net.HardwareAddr, ip netip.Prefix, port string) {
	t.Helper()
	if _, err := Exec("", "ip", "netns", "add", ns); err != nil {
		t.Fatalf("simnode: creating namespace: %v", err)
	}
	t.Cleanup(func() { deleteNS(t, ns) })
	mustRun(t, "", []string{"ip", "link", "add", ifName, "netns", ns, "address", mac.String(), "type", "veth",
		"peer", "name", port, "netns", u.NS})
	mustRun(t, u.NS,
		[]string{"ip", "link", "set", port, "master", BridgeName},
		[]string{"ip", "link", "set", port, "up"},
	)
	mustRun(t, ns,
		[]string{"ip", "link", "set", "lo", "up"},
		[]string{"ip", "addr", "add", ip.String(), "dev", ifName},
		[]string{"ip", "link", "set", ifName, "up"},
		[]string{"ip", "route", "add", "default", "via", u.Gateway.String(), "dev", ifName},
	)
}

// Exec runs `ip netns exec <ns> args...` and returns the combined output.
func (n *Node) Exec(args ...string) (string, error) { return Exec(n.NS, args...) }

// MustExec is Exec failing the test on error.
func (n *Node) MustExec(t testing.TB, args ...string) string {
	t.Helper()
	return mustExec(t, n.NS, args...)
}

// Exec runs `ip netns exec <ns> args...` and returns the combined output.
func (h *Host) Exec(args ...string) (string, error) { return Exec(h.NS, args...) }

// MustExec is Exec failing the test on error.
func (h *Host) MustExec(t testing.TB, args ...string) string {
	t.Helper()
	return mustExec(t, h.NS, args...)
}

// Exec runs args inside network namespace ns (`ip netns exec ns args...`; in the current namespace
// when ns is empty) and returns the combined output. The error includes the command and its output.
func Exec(ns string, args ...string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("simnode: Exec without a command")
	}
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	out, err := hostcmd.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Output runs `ip netns exec <ns> args...` and returns its standard output alone: what a caller
// parses or compares, without the warnings a tool prints on standard error (ip prints "Peer netns
// reference is invalid" for a veth whose peer's namespace is going away, for example).
func Output(ns string, args ...string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("simnode: Output without a command")
	}
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	var stderr strings.Builder
	cmd := hostcmd.Command(args[0], args[1:]...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

var pingStats = regexp.MustCompile(`(\d+) packets transmitted, (\d+) (?:packets )?received`)

// Ping sends count echo requests from namespace ns to dst (`ping -c count -i 0.2 -W 1`) and returns how
// many were sent and answered. Loss is not an error; a ping that cannot run or prints no statistics is.
func Ping(ns string, dst netip.Addr, count int) (sent, received int, err error) {
	if count < 1 {
		count = 1
	}
	out, err := Exec(ns, "ping", "-n", "-c", strconv.Itoa(count), "-i", "0.2", "-W", "1", dst.String())
	m := pingStats.FindStringSubmatch(out)
	if m == nil {
		if err == nil {
			err = fmt.Errorf("ping %s from %s printed no statistics: %s", dst, ns, out)
		}
		return 0, 0, err
	}
	sent, _ = strconv.Atoi(m[1])
	received, _ = strconv.Atoi(m[2])
	return sent, received, nil
}

func mustExec(t testing.TB, ns string, args ...string) string {
	t.Helper()
	out, err := Exec(ns, args...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return out
}

func mustRun(t testing.TB, ns string, cmds ...[]string) {
	t.Helper()
	for _, c := range cmds {
		mustExec(t, ns, c...)
	}
}

// deleteNS deletes a namespace; its veths go with it (their peers too). Processes still inside keep
// the namespace alive, which is why OVS (started after the namespace) is stopped before this runs.
func deleteNS(t testing.TB, ns string) {
	if out, err := hostcmd.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
		t.Errorf("simnode: deleting namespace %s: %v: %s", ns, err, out)
	}
}

func nsPath(ns string) string { return "/run/netns/" + ns }

// prefixInUse reports whether a namespace whose name starts with prefix exists (a leftover).
func prefixInUse(prefix string) bool {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			return true
		}
	}
	return false
}

// macFor derives a stable, locally administered unicast MAC from an IPv4 address: 02:5e:a.b.c.d.
func macFor(ip netip.Addr) net.HardwareAddr {
	b := ip.As16()
	return net.HardwareAddr{0x02, 0x5e, b[12], b[13], b[14], b[15]}
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
