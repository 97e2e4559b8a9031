//go:build linux

package hns

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/winnet-io/winnet/internal/hostnet"
)

// LinuxManagementVNICName maps the management vNIC's Windows name, "vEthernet (<adapter>)", to a Linux interface
// name, which can hold no space and at most 15 bytes: "vEth(<adapter>)" when that fits, otherwise "vEth(" and
// the first 8 hex digits of the SHA-256 of the adapter name and ")".
func LinuxManagementVNICName(adapter string) string {
	if name := "vEth(" + adapter + ")"; len(name) <= 15 {
		return name
	}
	sum := sha256.Sum256([]byte(adapter))
	return "vEth(" + hex.EncodeToString(sum[:])[:8] + ")"
}

func (b *vethBackend) linkIndex(ctx context.Context, name string) (int, error) {
	l, err := b.net.LinkByName(ctx, name)
	switch {
	case errors.Is(err, hostnet.ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	}
	return l.Index, nil
}

// createNetwork does what HNS does when it creates a Transparent network on an adapter (Microsoft, "Container
// networking: Transparent"; Antrea PR 3067 and PrepareHNSNetwork): it creates the Hyper-V switch's management
// vNIC, "vEthernet (<adapter>)", which takes the adapter's MAC, MTU, addresses (static stay static, DHCP leases
// stay leases), routes and DNS servers (the model moves those); the adapter is left up and bare.
//
// The vNIC is a persistent tap device: OVS's netdev datapath adopts an existing tap named after a bridge as that
// bridge's LOCAL port with its addresses kept, as OVS on Windows adopts the renamed vNIC. Unlike Windows, OVS
// deletes the tap when it deletes the bridge (netdev-linux clears TUNSETPERSIST), so in the simulator the vNIC,
// and the host IP with it, goes with the bridge rather than with the network; deleteNetwork copes with that.
func (b *vethBackend) createNetwork(ctx context.Context, n *simNetwork) error {
	adapter, err := b.net.LinkByName(ctx, n.AdapterName)
	if err != nil {
		return fmt.Errorf("network adapter %q: %w", n.AdapterName, err)
	}
	cfg, err := b.net.ReadIPConfig(ctx, adapter.Index)
	if err != nil {
		return err
	}
	name := LinuxManagementVNICName(n.AdapterName)
	tap := &netlink.Tuntap{
		LinkAttrs: netlink.LinkAttrs{Name: name, MTU: adapter.MTU},
		Mode:      netlink.TUNTAP_MODE_TAP,
		Flags:     netlink.TUNTAP_NO_PI,
	}
	err = b.host.Do(func(ns.NetNS) error {
		if err := netlink.LinkAdd(tap); err != nil {
			return fmt.Errorf("creating the management vNIC %q: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	vnic, err := b.net.LinkByName(ctx, name)
	if err != nil {
		return err
	}
	undo := func(err error) error {
		_ = b.deleteLink(vnic.Index)
		_ = b.net.ApplyIPConfig(ctx, adapter.Index, cfg)
		return err
	}
	if err := b.net.SetMAC(ctx, vnic.Index, adapter.MAC); err != nil {
		return undo(err)
	}
	if err := b.net.SetUp(ctx, vnic.Index); err != nil {
		return undo(err)
	}
	if b.hostIPDelay > 0 {
		// Windows moves the configuration asynchronously: the adapter loses it first, and the vNIC gets it a
		// moment later (the host is unreachable meanwhile).
		if err := b.stripAdapter(ctx, adapter.Index, cfg); err != nil {
			return undo(err)
		}
		go func() {
			time.Sleep(b.hostIPDelay)
			// The network may be gone by now (the vNIC with it): then there is nothing to configure.
			_ = b.net.ApplyIPConfig(context.Background(), vnic.Index, cfg)
		}()
	} else {
		if err := b.net.ApplyIPConfig(ctx, vnic.Index, cfg); err != nil {
			return undo(err)
		}
		if err := b.stripAdapter(ctx, adapter.Index, cfg); err != nil {
			return undo(err)
		}
	}
	n.ManagementVNIC, n.vnicIndex, n.adapterConfig = name, vnic.Index, cfg
	return nil
}

// stripAdapter removes the routes and movable addresses of the adapter: HNS leaves it without IP configuration.
func (b *vethBackend) stripAdapter(ctx context.Context, index int, cfg hostnet.IPConfig) error {
	routes, err := b.net.Routes(ctx, hostnet.RouteFilter{LinkIndex: index})
	if err != nil {
		return err
	}
	for _, r := range routes {
		if err := b.net.DeleteRoute(ctx, r); err != nil {
			return err
		}
	}
	for _, a := range cfg.Addresses {
		if err := b.net.DeleteAddress(ctx, index, a); err != nil {
			return err
		}
	}
	return nil
}

// deleteLink deletes the link with this index if it is a tap (the management vNIC, whatever its name now).
func (b *vethBackend) deleteLink(index int) error {
	return b.host.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByIndex(index)
		if err != nil {
			return nil // gone already (OVS deleted the bridge that had adopted it)
		}
		if _, ok := l.(*netlink.Tuntap); !ok {
			return nil
		}
		if err := netlink.LinkDel(l); err != nil && !isLinkNotFound(err) {
			return fmt.Errorf("deleting the management vNIC %q: %w", l.Attrs().Name, err)
		}
		return nil
	})
}

// deleteNetwork does what HNS does when the network goes (deleted, or at a reboot): the switch and its
// management vNIC disappear, whatever the vNIC was renamed to, the adapter is a plain host adapter again (the
// simulator drops its switch-port mark) and gets back the configuration it had.
func (b *vethBackend) deleteNetwork(ctx context.Context, n *simNetwork) error {
	if n.vnicIndex != 0 {
		if err := b.deleteLink(n.vnicIndex); err != nil {
			return err
		}
	}
	adapter, err := b.net.LinkByName(ctx, n.AdapterName)
	if errors.Is(err, hostnet.ErrNotFound) {
		return nil // the adapter itself is gone; nothing to give back to
	} else if err != nil {
		return err
	}
	if err := b.net.SetSwitchPort(ctx, adapter.Index, false); err != nil {
		return err
	}
	if err := b.net.ApplyIPConfig(ctx, adapter.Index, n.adapterConfig); err != nil {
		return fmt.Errorf("giving adapter %q its IP configuration back: %w", n.AdapterName, err)
	}
	return nil
}

// vnicHoldsHostIP reports whether the management vNIC holds every IPv4 address the adapter had.
func (b *vethBackend) vnicHoldsHostIP(ctx context.Context, n *simNetwork) (bool, error) {
	addrs, err := b.net.Addresses(ctx, n.vnicIndex)
	if errors.Is(err, hostnet.ErrNotFound) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	have := map[string]bool{}
	for _, a := range addrs {
		have[a.String()] = true
	}
	for _, a := range n.adapterConfig.Addresses {
		if a.Addr().Is4() && !have[a.String()] {
			return false, nil
		}
	}
	return true, nil
}
