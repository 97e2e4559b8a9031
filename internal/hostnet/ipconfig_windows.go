//go:build windows && (amd64 || arm64)

package hostnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/sys/windows"
)

var (
	procConvertInterfaceLuidToGuid = iphlpapi.NewProc("ConvertInterfaceLuidToGuid")
	// SetInterfaceDnsSettings exists from Windows 10 build 19041 (Windows Server 2022) on; on
	// older systems (Windows Server 2019) its Find fails and the WMI fallback is used.
	procSetInterfaceDnsSettings = iphlpapi.NewProc("SetInterfaceDnsSettings")
)

// ipAdapterDHCPEnabled is IP_ADAPTER_DHCP_ENABLED (iptypes.h), a bit of IP_ADAPTER_ADDRESSES
// Flags: the adapter's IPv4 configuration comes from DHCP.
const ipAdapterDHCPEnabled = 0x4

// dnsInterfaceSettings is DNS_INTERFACE_SETTINGS (netioapi.h), version 1, 64 bytes.
type dnsInterfaceSettings struct {
	Version             uint32
	Flags               uint64
	Domain              *uint16
	NameServer          *uint16
	SearchList          *uint16
	RegistrationEnabled uint32
	RegisterAdapterName uint32
	EnableLLMNR         uint32
	QueryAdapterName    uint32
	ProfileNameServer   *uint16
}

const (
	dnsInterfaceSettingsVersion1 = 1      // DNS_INTERFACE_SETTINGS_VERSION1
	dnsSettingIPv6               = 0x0001 // DNS_SETTING_IPV6: the settings are those of IPv6
	dnsSettingNameServer         = 0x0002 // DNS_SETTING_NAMESERVER: NameServer is set
)

var (
	_ [0]struct{} = [unsafe.Sizeof(dnsInterfaceSettings{}) - 64]struct{}{}
	_ [0]struct{} = [unsafe.Offsetof(dnsInterfaceSettings{}.NameServer) - 24]struct{}{}
	_ [0]struct{} = [unsafe.Sizeof(windows.GUID{}) - 16]struct{}{}
)

// RenameLink changes the interface's alias with MSFT_NetAdapter.Rename (WMI: iphlpapi has no
// call for it). Windows keeps the interface's index, addresses and routes across a rename.
func (h *ipHelper) RenameLink(ctx context.Context, linkIndex int, name string) error {
	if name == "" {
		return fmt.Errorf("renaming interface %d: the new name is empty", linkIndex)
	}
	s, err := readAdapterSettings(linkIndex)
	if err != nil {
		return fmt.Errorf("renaming interface %d to %q: %w", linkIndex, name, err)
	}
	if s.name == name {
		return nil
	}
	rename := wmiCall{
		Namespace: wmiStandardCimv2,
		Class:     "MSFT_NetAdapter",
		Where:     fmt.Sprintf("InterfaceIndex = %d", linkIndex),
		Method:    "Rename",
		Params:    []wmiParam{{Name: "NewName", Value: name}},
	}
	if err := checkReturns(rename.Invoke(ctx)); err != nil {
		return fmt.Errorf("renaming %q (interface %d) to %q: %w", s.name, linkIndex, name, err)
	}
	return nil
}

// ReadIPConfig reads the interface's addresses (Movable ones the system did not derive from
// router advertisements: those it configures again by itself on whatever link receives them, as
// it does link-local ones), its routes (see Routes), its DNS servers and its IPv4 DHCP flag.
func (h *ipHelper) ReadIPConfig(ctx context.Context, linkIndex int) (IPConfig, error) {
	if _, err := luid(linkIndex); err != nil {
		return IPConfig{}, fmt.Errorf("reading IP configuration: %w", err)
	}
	rows, err := unicastRows(linkIndex)
	if err != nil {
		return IPConfig{}, fmt.Errorf("reading IP configuration of interface %d: %w", linkIndex, err)
	}
	var cfg IPConfig
	for i := range rows {
		p := rowPrefix(&rows[i])
		if !Movable(p) || rows[i].PrefixOrigin == windows.IpPrefixOriginRouterAdvertisement {
			continue
		}
		cfg.Addresses = append(cfg.Addresses, p)
	}
	if cfg.Routes, err = h.Routes(ctx, RouteFilter{LinkIndex: linkIndex}); err != nil {
		return IPConfig{}, fmt.Errorf("reading IP configuration of interface %d: %w", linkIndex, err)
	}
	s, err := readAdapterSettings(linkIndex)
	if err != nil {
		return IPConfig{}, fmt.Errorf("reading IP configuration of interface %d: %w", linkIndex, err)
	}
	cfg.DNSServers, cfg.DHCP = s.dnsServers, s.dhcp
	return cfg, nil
}

// ApplyIPConfig gives the interface the configuration:
//   - DHCP: Win32_NetworkAdapterConfiguration.EnableDHCP (WMI: iphlpapi has no call to switch an
//     interface to DHCP) when the interface is not on DHCP yet; its IPv4 addresses then come with
//     the lease and are not added. Otherwise every address is ensured.
//   - The routes through the interface, those without a gateway first.
//   - The DNS servers, per family, when they differ from the interface's: SetInterfaceDnsSettings
//     (Windows 10 build 19041 on), else Win32_NetworkAdapterConfiguration.SetDNSServerSearchOrder
//     (IPv4 only). They are set even on a DHCP configuration, which cannot tell servers of the
//     lease from static ones: a static server of a DHCP adapter must not be lost. An empty list
//     leaves the interface's servers alone.
func (h *ipHelper) ApplyIPConfig(ctx context.Context, linkIndex int, cfg IPConfig) error {
	if err := h.SetUp(ctx, linkIndex); err != nil {
		return fmt.Errorf("applying IP configuration: %w", err)
	}
	s, err := readAdapterSettings(linkIndex)
	if err != nil {
		return fmt.Errorf("applying IP configuration to interface %d: %w", linkIndex, err)
	}
	if cfg.DHCP && !s.dhcp {
		enable := wmiCall{
			Namespace: wmiCimv2,
			Class:     "Win32_NetworkAdapterConfiguration",
			Where:     fmt.Sprintf("InterfaceIndex = %d", linkIndex),
			Method:    "EnableDHCP",
		}
		if err := checkWin32Returns(enable.Invoke(ctx)); err != nil {
			return fmt.Errorf("applying IP configuration to %q: enabling DHCP: %w", s.name, err)
		}
	}
	for _, a := range cfg.Addresses {
		if cfg.DHCP && a.Addr().Is4() {
			continue
		}
		if err := h.EnsureAddress(ctx, linkIndex, a); err != nil {
			return fmt.Errorf("applying IP configuration to %q: %w", s.name, err)
		}
	}
	if err := applyRoutes(ctx, h, linkIndex, cfg.Routes); err != nil {
		return fmt.Errorf("applying IP configuration to %q: %w", s.name, err)
	}
	for _, is4 := range []bool{true, false} {
		want := familyAddrs(cfg.DNSServers, is4)
		if len(want) == 0 || slices.Equal(want, familyAddrs(s.dnsServers, is4)) {
			continue
		}
		if err := setDNSServers(ctx, linkIndex, is4, want); err != nil {
			return fmt.Errorf("applying IP configuration to %q: setting DNS servers %v: %w", s.name, want, err)
		}
	}
	return nil
}

// adapterSettings is what ReadIPConfig needs of GetAdaptersAddresses for one interface.
type adapterSettings struct {
	name       string
	dnsServers []netip.Addr
	dhcp       bool
}

// readAdapterSettings reads the alias, DNS servers and IPv4 DHCP flag of the interface.
func readAdapterSettings(index int) (adapterSettings, error) {
	if _, err := luid(index); err != nil {
		return adapterSettings{}, err
	}
	const flags = windows.GAA_FLAG_SKIP_UNICAST | windows.GAA_FLAG_SKIP_ANYCAST | windows.GAA_FLAG_SKIP_MULTICAST |
		windows.GAA_FLAG_INCLUDE_ALL_INTERFACES
	var (
		out   adapterSettings
		found bool
	)
	err := forEachAdapter(flags, func(aa *windows.IpAdapterAddresses) {
		if found || adapterIndex(aa) != index {
			return
		}
		found = true
		out.name = windows.UTF16PtrToString(aa.FriendlyName)
		out.dhcp = aa.Flags&ipAdapterDHCPEnabled != 0
		for d := aa.FirstDnsServerAddress; d != nil; d = d.Next {
			ip, ok := netip.AddrFromSlice(d.Address.IP())
			if ok && !placeholderDNSServer(ip.Unmap()) {
				out.dnsServers = append(out.dnsServers, ip.Unmap().WithZone(""))
			}
		}
	})
	if err != nil {
		return adapterSettings{}, fmt.Errorf("reading interface %d: %w", index, err)
	}
	if !found {
		return adapterSettings{}, fmt.Errorf("interface %d: %w", index, ErrNotFound)
	}
	return out, nil
}

// placeholderDNSServer reports the site-local addresses fec0:0:0:ffff::1 to ::3 that Windows lists
// as the IPv6 DNS servers of an interface that has none configured.
func placeholderDNSServer(ip netip.Addr) bool {
	for i := byte(1); i <= 3; i++ {
		if ip.WithZone("") == netip.AddrFrom16([16]byte{0xfe, 0xc0, 6: 0xff, 7: 0xff, 15: i}) {
			return true
		}
	}
	return false
}

func familyAddrs(addrs []netip.Addr, is4 bool) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if a.Unmap().Is4() == is4 {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// setDNSServers sets the interface's DNS servers of one family.
func setDNSServers(ctx context.Context, index int, is4 bool, servers []netip.Addr) error {
	list := make([]string, len(servers))
	for i, s := range servers {
		list[i] = s.String()
	}
	if procSetInterfaceDnsSettings.Find() != nil {
		if !is4 {
			return fmt.Errorf("IPv6 DNS servers need SetInterfaceDnsSettings (Windows 10 build 19041 or later): %w",
				errors.ErrUnsupported)
		}
		set := wmiCall{
			Namespace: wmiCimv2,
			Class:     "Win32_NetworkAdapterConfiguration",
			Where:     fmt.Sprintf("InterfaceIndex = %d", index),
			Method:    "SetDNSServerSearchOrder",
			Params:    []wmiParam{{Name: "DNSServerSearchOrder", Value: list}},
		}
		return checkWin32Returns(set.Invoke(ctx))
	}
	guid, err := interfaceGUID(index)
	if err != nil {
		return err
	}
	nameServer, err := windows.UTF16PtrFromString(strings.Join(list, ","))
	if err != nil {
		return err
	}
	settings := dnsInterfaceSettings{
		Version:    dnsInterfaceSettingsVersion1,
		Flags:      dnsSettingNameServer,
		NameServer: nameServer,
	}
	if !is4 {
		settings.Flags |= dnsSettingIPv6
	}
	// SetInterfaceDnsSettings takes the GUID by value: on amd64 a 16-byte argument is passed as a
	// pointer to a copy, on arm64 in two registers.
	switch runtime.GOARCH {
	case "arm64":
		q := (*[2]uint64)(unsafe.Pointer(&guid))
		err = call(procSetInterfaceDnsSettings, uintptr(q[0]), uintptr(q[1]), uintptr(unsafe.Pointer(&settings)))
	default:
		err = call(procSetInterfaceDnsSettings, uintptr(unsafe.Pointer(&guid)), uintptr(unsafe.Pointer(&settings)))
	}
	runtime.KeepAlive(nameServer)
	runtime.KeepAlive(&settings)
	if err != nil {
		return fmt.Errorf("SetInterfaceDnsSettings: %w", err)
	}
	return nil
}

// interfaceGUID returns the GUID of the interface with this index.
func interfaceGUID(index int) (windows.GUID, error) {
	l, err := luid(index)
	if err != nil {
		return windows.GUID{}, err
	}
	var guid windows.GUID
	if err := call(procConvertInterfaceLuidToGuid, uintptr(unsafe.Pointer(&l)), uintptr(unsafe.Pointer(&guid))); err != nil {
		return windows.GUID{}, fmt.Errorf("looking up the GUID of interface %d: %w", index, err)
	}
	return guid, nil
}

// checkReturns checks the ReturnValue of each instance a WMI method was called on: 0 is success.
func checkReturns(returns []uint32, err error) error {
	if err != nil {
		return err
	}
	for _, rv := range returns {
		if rv != 0 {
			return fmt.Errorf("the WMI method returned %d", rv)
		}
	}
	return nil
}

// checkWin32Returns is checkReturns for the methods of Win32_NetworkAdapterConfiguration, whose
// ReturnValue 1 is a success that takes full effect after a reboot.
func checkWin32Returns(returns []uint32, err error) error {
	if err != nil {
		return err
	}
	for _, rv := range returns {
		if rv > 1 {
			return fmt.Errorf("the WMI method returned %d", rv)
		}
	}
	return nil
}
