package podendpoint

import (
	"context"
	"fmt"
	"net"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
)

// podPortType is the type of a Pod's OVS port. On Linux the HNS simulator's endpoint is a veth pair
// whose host end the userspace datapath opens as a system port.
const podPortType = ovsdb.PortTypeSystem

// setSwitchPort makes the host end of the endpoint a switch port only (on), so that the kernel
// leaves its packets to OVS, or releases it (off): the host end goes with the endpoint, so its mark
// is dropped in the background rather than while a CNI call waits.
func setSwitchPort(ctx context.Context, h hostnet.Interface, name string, on bool) error {
	if !on {
		return h.ReleaseSwitchPort(ctx, name)
	}
	link, err := h.LinkByName(ctx, name)
	if err != nil {
		return err
	}
	return h.SetSwitchPort(ctx, link.Index, on)
}

// configurePodInterface sets the MTU of the Pod's interface, found by its MAC in the Pod's network
// namespace, and returns the interface's name there.
func configurePodInterface(netnsPath string, mac net.HardwareAddr, mtu int) (string, error) {
	var name string
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		links, err := netlink.LinkList()
		if err != nil {
			return fmt.Errorf("listing interfaces: %w", err)
		}
		for _, l := range links {
			if l.Attrs().HardwareAddr.String() != mac.String() {
				continue
			}
			name = l.Attrs().Name
			if mtu > 0 && l.Attrs().MTU != mtu {
				if err := netlink.LinkSetMTU(l, mtu); err != nil {
					return fmt.Errorf("setting MTU %d on %s: %w", mtu, name, err)
				}
			}
			return nil
		}
		return fmt.Errorf("no interface with MAC %s", mac)
	})
	if err != nil {
		return "", fmt.Errorf("configuring the Pod's interface in %s: %w", netnsPath, err)
	}
	return name, nil
}
