package podendpoint

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
)

// podPortType is the type of a Pod's OVS port. On Linux the HNS simulator's endpoint is a veth pair
// whose host end the userspace datapath opens as a system port.
const podPortType = ovsdb.PortTypeSystem

// setSwitchPort makes the host end of the endpoint a switch port only (on), so that the kernel
// leaves its packets to OVS, or releases it (off): the host end goes with the endpoint, so its mark
// is dropped in the background rather than while a CNI call waits.
func setSwitchPort(ctx context.Context, h HostNet, name string, on bool) error {
	if !on {
		return h.ReleaseSwitchPort(ctx, name)
	}
	link, err := h.LinkByName(ctx, name)
	if err != nil {
		return err
	}
	return h.SetSwitchPort(ctx, link.Index, on)
}

// vnicName is the name under which the host sees the endpoint's vNIC: in the HNS simulator the host
// end of its veth pair, named after the endpoint (which is also the port's name).
func vnicName(port string) string { return port }

// configurePodInterface sets the MTU of the Pod's interface, found by its MAC in the Pod's network
// namespace (HNS configures the rest from the endpoint).
func (p *Pods) configurePodInterface(_ context.Context, a *Attachment) error {
	mac, err := net.ParseMAC(a.MAC)
	if err != nil {
		return fmt.Errorf("MAC of endpoint %s: %w", a.EndpointName, err)
	}
	path := netnsPath(a.Netns)
	err = ns.WithNetNSPath(path, func(ns.NetNS) error {
		links, err := netlink.LinkList()
		if err != nil {
			return fmt.Errorf("listing interfaces: %w", err)
		}
		for _, l := range links {
			if l.Attrs().HardwareAddr.String() != mac.String() {
				continue
			}
			if a.MTU > 0 && l.Attrs().MTU != a.MTU {
				if err := netlink.LinkSetMTU(l, a.MTU); err != nil {
					return fmt.Errorf("setting MTU %d on %s: %w", a.MTU, l.Attrs().Name, err)
				}
			}
			return nil
		}
		return fmt.Errorf("no interface with MAC %s", mac)
	})
	if err != nil {
		return fmt.Errorf("configuring the Pod's interface in %s: %w", path, err)
	}
	return nil
}

// netnsPath resolves a CNI_NETNS to a namespace path: an absolute path as it is, a name (an HCN
// namespace GUID in the simulator) under /var/run/netns, compared case-insensitively.
func netnsPath(netns string) string {
	if filepath.IsAbs(netns) {
		return netns
	}
	path := filepath.Join(hns.DefaultNetNSDir, netns)
	if _, err := os.Stat(path); err == nil {
		return path
	}
	if entries, err := os.ReadDir(hns.DefaultNetNSDir); err == nil {
		for _, e := range entries {
			if strings.EqualFold(e.Name(), netns) {
				return filepath.Join(hns.DefaultNetNSDir, e.Name())
			}
		}
	}
	return path
}
