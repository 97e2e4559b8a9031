//go:build windows && (amd64 || arm64)

package hostnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"
)

// ipHelper implements Interface with the IP Helper API (iphlpapi.dll): no PowerShell, no
// netsh, no child process. WMI, in process, serves only what iphlpapi has no call for (see
// wmi_windows.go). It acts on the host's default compartment.
//
// The MIB_* rows golang.org/x/sys/windows declares with the right layout are used as they are
// (MIB_IPFORWARD_ROW2, MIB_UNICASTIPADDRESS_ROW, MIB_IF_ROW2, MIB_IFROW); MIB_IPINTERFACE_ROW
// and MIB_IPNET_ROW2 are declared here, and the functions x/sys does not wrap are loaded from
// iphlpapi.dll. The layouts are those of 64-bit Windows (the only Windows a Kubernetes node
// runs), checked at compile time below.
type ipHelper struct {
	opts Options
}

var _ Interface = (*ipHelper)(nil)

func newPlatform(opts Options) (Interface, error) {
	if err := iphlpapi.Load(); err != nil {
		return nil, fmt.Errorf("loading iphlpapi.dll: %w", err)
	}
	return &ipHelper{opts: opts}, nil
}

var (
	iphlpapi = windows.NewLazySystemDLL("iphlpapi.dll")

	procConvertInterfaceIndexToLuid     = iphlpapi.NewProc("ConvertInterfaceIndexToLuid")
	procInitializeUnicastIpAddressEntry = iphlpapi.NewProc("InitializeUnicastIpAddressEntry")
	procCreateUnicastIpAddressEntry     = iphlpapi.NewProc("CreateUnicastIpAddressEntry")
	procSetUnicastIpAddressEntry        = iphlpapi.NewProc("SetUnicastIpAddressEntry")
	procDeleteUnicastIpAddressEntry     = iphlpapi.NewProc("DeleteUnicastIpAddressEntry")
	procInitializeIpForwardEntry        = iphlpapi.NewProc("InitializeIpForwardEntry")
	procCreateIpForwardEntry2           = iphlpapi.NewProc("CreateIpForwardEntry2")
	procSetIpForwardEntry2              = iphlpapi.NewProc("SetIpForwardEntry2")
	procDeleteIpForwardEntry2           = iphlpapi.NewProc("DeleteIpForwardEntry2")
	procGetIpInterfaceEntry             = iphlpapi.NewProc("GetIpInterfaceEntry")
	procSetIpInterfaceEntry             = iphlpapi.NewProc("SetIpInterfaceEntry")
	procGetIpNetEntry2                  = iphlpapi.NewProc("GetIpNetEntry2")
	procResolveIpNetEntry2              = iphlpapi.NewProc("ResolveIpNetEntry2")
	procGetBestRoute2                   = iphlpapi.NewProc("GetBestRoute2")
	procSetIfEntry                      = iphlpapi.NewProc("SetIfEntry")
)

// call invokes an iphlpapi function returning a Win32 error code (NETIO_STATUS or DWORD).
func call(p *windows.LazyProc, args ...uintptr) error {
	if err := p.Find(); err != nil {
		return err
	}
	r, _, _ := syscall.SyscallN(p.Addr(), args...)
	if r != 0 {
		return windows.Errno(r)
	}
	return nil
}

// callVoid invokes an iphlpapi function that returns nothing (the Initialize* functions).
func callVoid(p *windows.LazyProc, args ...uintptr) error {
	if err := p.Find(); err != nil {
		return err
	}
	syscall.SyscallN(p.Addr(), args...)
	return nil
}

// mibIPInterfaceRow is MIB_IPINTERFACE_ROW (netioapi.h), 168 bytes. x/sys/windows declares
// TransmitOffload and ReceiveOffload as ULONG, but they are NL_INTERFACE_OFFLOAD_ROD, a struct of
// one-byte bit fields, so its row is 176 bytes and its last fields are misplaced.
type mibIPInterfaceRow struct {
	Family                               uint16
	InterfaceLuid                        uint64
	InterfaceIndex                       uint32
	MaxReassemblySize                    uint32
	InterfaceIdentifier                  uint64
	MinRouterAdvertisementInterval       uint32
	MaxRouterAdvertisementInterval       uint32
	AdvertisingEnabled                   uint8
	ForwardingEnabled                    uint8
	WeakHostSend                         uint8
	WeakHostReceive                      uint8
	UseAutomaticMetric                   uint8
	UseNeighborUnreachabilityDetection   uint8
	ManagedAddressConfigurationSupported uint8
	OtherStatefulConfigurationSupported  uint8
	AdvertiseDefaultRoute                uint8
	RouterDiscoveryBehavior              uint32
	DadTransmits                         uint32
	BaseReachableTime                    uint32
	RetransmitTime                       uint32
	PathMtuDiscoveryTimeout              uint32
	LinkLocalAddressBehavior             uint32
	LinkLocalAddressTimeout              uint32
	ZoneIndices                          [16]uint32 // ScopeLevelCount
	SitePrefixLength                     uint32
	Metric                               uint32
	NlMtu                                uint32
	Connected                            uint8
	SupportsWakeUpPatterns               uint8
	SupportsNeighborDiscovery            uint8
	SupportsRouterDiscovery              uint8
	ReachableTime                        uint32
	TransmitOffload                      uint8 // NL_INTERFACE_OFFLOAD_ROD
	ReceiveOffload                       uint8 // NL_INTERFACE_OFFLOAD_ROD
	DisableDefaultRoutes                 uint8
}

// mibIPNetRow2 is MIB_IPNET_ROW2 (netioapi.h), 88 bytes: a neighbour (ARP / ND cache) entry.
type mibIPNetRow2 struct {
	Address               windows.RawSockaddrInet // SOCKADDR_INET
	InterfaceIndex        uint32
	InterfaceLuid         uint64
	PhysicalAddress       [windows.IF_MAX_PHYS_ADDRESS_LENGTH]byte
	PhysicalAddressLength uint32
	State                 uint32 // NL_NEIGHBOR_STATE
	Flags                 uint8  // IsRouter:1, IsUnreachable:1
	ReachabilityTime      uint32 // union { LastReachable; LastUnreachable }
}

// NL_NEIGHBOR_STATE (nldef.h); NlnsUnreachable (0) and NlnsIncomplete (1) hold no usable address.
const (
	nlnsProbe     = 2
	nlnsDelay     = 3
	nlnsStale     = 4
	nlnsReachable = 5
	nlnsPermanent = 6
)

const (
	netIfAdminStatusUp = 1 // NET_IF_ADMIN_STATUS_UP, MIB_IF_ADMIN_STATUS_UP
	infiniteLifetime   = 0xffffffff
)

// Layouts checked at compile time against the Windows SDK (64-bit): a size that differs makes
// one of these array lengths negative or non-zero.
var (
	_ [0]struct{} = [unsafe.Sizeof(mibIPInterfaceRow{}) - 168]struct{}{}
	_ [0]struct{} = [unsafe.Offsetof(mibIPInterfaceRow{}.NlMtu) - 152]struct{}{}
	_ [0]struct{} = [unsafe.Offsetof(mibIPInterfaceRow{}.DisableDefaultRoutes) - 166]struct{}{}
	_ [0]struct{} = [unsafe.Sizeof(mibIPNetRow2{}) - 88]struct{}{}
	_ [0]struct{} = [unsafe.Offsetof(mibIPNetRow2{}.PhysicalAddressLength) - 72]struct{}{}
	_ [0]struct{} = [unsafe.Sizeof(windows.MibIpForwardRow2{}) - 104]struct{}{}
	_ [0]struct{} = [unsafe.Offsetof(windows.MibIpForwardRow2{}.Protocol) - 88]struct{}{}
	_ [0]struct{} = [unsafe.Sizeof(windows.MibUnicastIpAddressRow{}) - 80]struct{}{}
	_ [0]struct{} = [unsafe.Offsetof(windows.MibUnicastIpAddressRow{}.DadState) - 64]struct{}{}
	_ [0]struct{} = [unsafe.Sizeof(windows.MibIfRow{}) - 860]struct{}{}
	_ [0]struct{} = [unsafe.Sizeof(windows.RawSockaddrInet{}) - 28]struct{}{}
)

// toSockaddr fills a SOCKADDR_INET with a (no port).
func toSockaddr(a netip.Addr) windows.RawSockaddrInet {
	var sa windows.RawSockaddrInet
	a = a.Unmap()
	if a.Is4() {
		s4 := (*windows.RawSockaddrInet4)(unsafe.Pointer(&sa))
		s4.Family = windows.AF_INET
		s4.Addr = a.As4()
	} else {
		s6 := (*windows.RawSockaddrInet6)(unsafe.Pointer(&sa))
		s6.Family = windows.AF_INET6
		s6.Addr = a.As16()
	}
	return sa
}

// fromSockaddr reads the address of a SOCKADDR_INET; the zone of IPv6 link-local addresses is
// dropped (routes and neighbours carry their interface).
func fromSockaddr(sa *windows.RawSockaddrInet) netip.Addr {
	switch sa.Family {
	case windows.AF_INET:
		return netip.AddrFrom4((*windows.RawSockaddrInet4)(unsafe.Pointer(sa)).Addr)
	case windows.AF_INET6:
		return netip.AddrFrom16((*windows.RawSockaddrInet6)(unsafe.Pointer(sa)).Addr)
	}
	return netip.Addr{}
}

func family(a netip.Addr) uint16 {
	if a.Unmap().Is4() {
		return windows.AF_INET
	}
	return windows.AF_INET6
}

// luid returns the NET_LUID of the interface with this index.
func luid(index int) (uint64, error) {
	if index <= 0 {
		return 0, fmt.Errorf("interface %d: %w", index, ErrNotFound)
	}
	var l uint64
	if err := call(procConvertInterfaceIndexToLuid, uintptr(index), uintptr(unsafe.Pointer(&l))); err != nil {
		if errors.Is(err, windows.ERROR_FILE_NOT_FOUND) || errors.Is(err, windows.ERROR_NOT_FOUND) || errors.Is(err, windows.ERROR_INVALID_PARAMETER) {
			return 0, fmt.Errorf("interface %d: %w", index, ErrNotFound)
		}
		return 0, fmt.Errorf("looking up the LUID of interface %d: %w", index, err)
	}
	return l, nil
}

// adapter is what GetAdaptersAddresses reports of one interface, copied out of its buffer.
type adapter struct {
	Link
	addrs []netip.Addr
}

func adapters() ([]adapter, error) {
	const flags = windows.GAA_FLAG_SKIP_ANYCAST | windows.GAA_FLAG_SKIP_MULTICAST | windows.GAA_FLAG_SKIP_DNS_SERVER |
		windows.GAA_FLAG_INCLUDE_ALL_INTERFACES
	var out []adapter
	err := forEachAdapter(flags, func(aa *windows.IpAdapterAddresses) {
		a := adapter{Link: Link{
			Name:  windows.UTF16PtrToString(aa.FriendlyName),
			Index: adapterIndex(aa),
			MAC:   slices.Clone(net.HardwareAddr(aa.PhysicalAddress[:aa.PhysicalAddressLength])),
			MTU:   int(aa.Mtu),
			Up:    aa.OperStatus == windows.IfOperStatusUp,
		}}
		for u := aa.FirstUnicastAddress; u != nil; u = u.Next {
			if ip, ok := netip.AddrFromSlice(u.Address.IP()); ok {
				a.addrs = append(a.addrs, ip.Unmap())
			}
		}
		out = append(out, a)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// adapterIndex is the interface index of an adapter: its IPv4 one, or its IPv6 one when IPv4 is
// not bound to it.
func adapterIndex(aa *windows.IpAdapterAddresses) int {
	if aa.IfIndex != 0 {
		return int(aa.IfIndex)
	}
	return int(aa.Ipv6IfIndex)
}

// forEachAdapter calls fn with every adapter GetAdaptersAddresses reports with these flags. The
// structures fn sees live in a buffer that is valid only during the call: fn copies what it keeps.
func forEachAdapter(flags uint32, fn func(*windows.IpAdapterAddresses)) error {
	size := uint32(16 << 10)
	for range 5 {
		buf := make([]byte, size)
		first := (*windows.IpAdapterAddresses)(unsafe.Pointer(&buf[0]))
		err := windows.GetAdaptersAddresses(windows.AF_UNSPEC, flags, 0, first, &size)
		if errors.Is(err, windows.ERROR_BUFFER_OVERFLOW) {
			continue
		}
		if err != nil {
			return fmt.Errorf("listing adapters: %w", err)
		}
		for aa := first; aa != nil; aa = aa.Next {
			fn(aa)
		}
		runtime.KeepAlive(buf)
		return nil
	}
	return fmt.Errorf("listing adapters: %w", windows.ERROR_BUFFER_OVERFLOW)
}

func (h *ipHelper) LinkByName(_ context.Context, name string) (Link, error) {
	as, err := adapters()
	if err != nil {
		return Link{}, fmt.Errorf("looking up interface %q: %w", name, err)
	}
	for _, a := range as {
		if strings.EqualFold(a.Name, name) {
			return a.Link, nil
		}
	}
	return Link{}, fmt.Errorf("interface %q: %w", name, ErrNotFound)
}

func (h *ipHelper) LinkByAddress(_ context.Context, ip netip.Addr) (Link, error) {
	ip = ip.Unmap().WithZone("")
	as, err := adapters()
	if err != nil {
		return Link{}, fmt.Errorf("looking up the interface holding %s: %w", ip, err)
	}
	for _, a := range as {
		if slices.Contains(a.addrs, ip) {
			return a.Link, nil
		}
	}
	return Link{}, fmt.Errorf("interface holding %s: %w", ip, ErrNotFound)
}

// unicastRows returns the unicast address rows of an interface.
func unicastRows(index int) ([]windows.MibUnicastIpAddressRow, error) {
	var table *windows.MibUnicastIpAddressTable
	if err := windows.GetUnicastIpAddressTable(windows.AF_UNSPEC, &table); err != nil {
		return nil, fmt.Errorf("listing unicast addresses: %w", err)
	}
	defer windows.FreeMibTable(unsafe.Pointer(table))
	var out []windows.MibUnicastIpAddressRow
	for _, row := range unsafe.Slice(&table.Table[0], table.NumEntries) {
		if int(row.InterfaceIndex) == index {
			out = append(out, row)
		}
	}
	return out, nil
}

func rowPrefix(row *windows.MibUnicastIpAddressRow) netip.Prefix {
	ip := fromSockaddr((*windows.RawSockaddrInet)(unsafe.Pointer(&row.Address)))
	return netip.PrefixFrom(ip, int(row.OnLinkPrefixLength))
}

func (h *ipHelper) Addresses(_ context.Context, linkIndex int) ([]netip.Prefix, error) {
	if _, err := luid(linkIndex); err != nil {
		return nil, err
	}
	rows, err := unicastRows(linkIndex)
	if err != nil {
		return nil, fmt.Errorf("listing addresses of interface %d: %w", linkIndex, err)
	}
	out := make([]netip.Prefix, 0, len(rows))
	for i := range rows {
		if p := rowPrefix(&rows[i]); p.IsValid() {
			out = append(out, p)
		}
	}
	return out, nil
}

func (h *ipHelper) EnsureAddress(_ context.Context, linkIndex int, addr netip.Prefix) error {
	if !addr.IsValid() || addr.Addr().Is4In6() || addr.Addr().Zone() != "" {
		return fmt.Errorf("adding address %s to interface %d: invalid address", addr, linkIndex)
	}
	l, err := luid(linkIndex)
	if err != nil {
		return fmt.Errorf("adding address %s: %w", addr, err)
	}
	rows, err := unicastRows(linkIndex)
	if err != nil {
		return fmt.Errorf("adding address %s to interface %d: %w", addr, linkIndex, err)
	}
	for i := range rows {
		p := rowPrefix(&rows[i])
		if p.Addr() != addr.Addr() {
			continue
		}
		if p == addr {
			return nil
		}
		// On Windows the prefix length is a property of the address: fix it in place.
		rows[i].OnLinkPrefixLength = uint8(addr.Bits())
		if err := call(procSetUnicastIpAddressEntry, uintptr(unsafe.Pointer(&rows[i]))); err != nil {
			return fmt.Errorf("changing address %s of interface %d to %s: %w", p, linkIndex, addr, err)
		}
		return nil
	}
	row, err := newUnicastRow(l, linkIndex, addr)
	if err != nil {
		return err
	}
	// Preferred at once: no duplicate address detection for an address the host already had.
	row.DadState = windows.IpDadStatePreferred
	err = call(procCreateUnicastIpAddressEntry, uintptr(unsafe.Pointer(&row)))
	if err != nil && !errors.Is(err, windows.ERROR_OBJECT_ALREADY_EXISTS) {
		return fmt.Errorf("adding address %s to interface %d: %w", addr, linkIndex, err)
	}
	return nil
}

func (h *ipHelper) EnsureSkipAsSourceAddress(_ context.Context, linkIndex int, addr netip.Prefix) error {
	if !addr.IsValid() || !addr.IsSingleIP() || addr.Addr().Is4In6() || addr.Addr().Zone() != "" {
		return fmt.Errorf("adding address %s that is never a source to interface %d: it must be a host prefix (/32 or /128)", addr, linkIndex)
	}
	l, err := luid(linkIndex)
	if err != nil {
		return fmt.Errorf("adding address %s: %w", addr, err)
	}
	rows, err := unicastRows(linkIndex)
	if err != nil {
		return fmt.Errorf("adding address %s to interface %d: %w", addr, linkIndex, err)
	}
	for i := range rows {
		if rowPrefix(&rows[i]).Addr() != addr.Addr() {
			continue
		}
		if rows[i].DadState == windows.IpDadStateDuplicate {
			return fmt.Errorf("adding address %s to interface %d: duplicate address detection found another host holding it", addr, linkIndex)
		}
		if rowPrefix(&rows[i]) == addr && rows[i].SkipAsSource != 0 {
			return nil
		}
		// Fix the prefix length and SkipAsSource in place.
		rows[i].OnLinkPrefixLength = uint8(addr.Bits())
		rows[i].SkipAsSource = 1
		if err := call(procSetUnicastIpAddressEntry, uintptr(unsafe.Pointer(&rows[i]))); err != nil {
			return fmt.Errorf("setting SkipAsSource on address %s of interface %d: %w", addr, linkIndex, err)
		}
		return nil
	}
	row, err := newUnicastRow(l, linkIndex, addr)
	if err != nil {
		return err
	}
	row.SkipAsSource = 1
	// DadState is left to the stack (InitializeUnicastIpAddressEntry's IpDadStateInvalid): duplicate
	// address detection runs, and its ARP announces the address's new place on the segment (the
	// gratuitous ARP of a takeover). A duplicate shows in the row's DadState at the next call.
	err = call(procCreateUnicastIpAddressEntry, uintptr(unsafe.Pointer(&row)))
	if err != nil && !errors.Is(err, windows.ERROR_OBJECT_ALREADY_EXISTS) {
		return fmt.Errorf("adding address %s to interface %d: %w", addr, linkIndex, err)
	}
	return nil
}

// newUnicastRow is a new address row of the interface (InitializeUnicastIpAddressEntry's defaults)
// for addr, valid and preferred for ever.
func newUnicastRow(l uint64, linkIndex int, addr netip.Prefix) (windows.MibUnicastIpAddressRow, error) {
	var row windows.MibUnicastIpAddressRow
	if err := callVoid(procInitializeUnicastIpAddressEntry, uintptr(unsafe.Pointer(&row))); err != nil {
		return row, fmt.Errorf("adding address %s to interface %d: %w", addr, linkIndex, err)
	}
	*(*windows.RawSockaddrInet)(unsafe.Pointer(&row.Address)) = toSockaddr(addr.Addr())
	row.InterfaceLuid = l
	row.InterfaceIndex = uint32(linkIndex)
	row.OnLinkPrefixLength = uint8(addr.Bits())
	row.ValidLifetime = infiniteLifetime
	row.PreferredLifetime = infiniteLifetime
	return row, nil
}

func (h *ipHelper) DeleteAddress(_ context.Context, linkIndex int, addr netip.Prefix) error {
	if _, err := luid(linkIndex); errors.Is(err, ErrNotFound) {
		return nil
	} else if err != nil {
		return fmt.Errorf("deleting address %s: %w", addr, err)
	}
	rows, err := unicastRows(linkIndex)
	if err != nil {
		return fmt.Errorf("deleting address %s from interface %d: %w", addr, linkIndex, err)
	}
	for i := range rows {
		if rowPrefix(&rows[i]) != addr {
			continue
		}
		err := call(procDeleteUnicastIpAddressEntry, uintptr(unsafe.Pointer(&rows[i])))
		if err != nil && !errors.Is(err, windows.ERROR_NOT_FOUND) {
			return fmt.Errorf("deleting address %s from interface %d: %w", addr, linkIndex, err)
		}
	}
	return nil
}

// SetMAC is not available on Windows. The management vNIC that becomes the bridge's LOCAL port
// gets the uplink's MAC from HNS (the Transparent network's SourceMac, applied by the Hyper-V
// switch when HNS moves the host's configuration); iphlpapi has no call to change a hardware
// address, and the alternative — the adapter's NetworkAddress registry property and a restart
// of the adapter — would cut the host off the network.
func (h *ipHelper) SetMAC(_ context.Context, linkIndex int, mac net.HardwareAddr) error {
	return fmt.Errorf("setting MAC of interface %d to %s: the vNIC's MAC is set by HNS and the Hyper-V switch, not through iphlpapi: %w",
		linkIndex, mac, errors.ErrUnsupported)
}

// ipInterface reads the MIB_IPINTERFACE_ROW of an interface for one family; found is false when
// that family is not bound to the interface.
func ipInterface(l uint64, fam uint16) (row mibIPInterfaceRow, found bool, err error) {
	row = mibIPInterfaceRow{Family: fam, InterfaceLuid: l}
	err = call(procGetIpInterfaceEntry, uintptr(unsafe.Pointer(&row)))
	if errors.Is(err, windows.ERROR_NOT_FOUND) {
		return row, false, nil
	}
	return row, err == nil, err
}

func setIPInterface(row *mibIPInterfaceRow) error {
	if row.Family == windows.AF_INET {
		// SetIpInterfaceEntry rejects an IPv4 row whose SitePrefixLength is not 0.
		row.SitePrefixLength = 0
	}
	return call(procSetIpInterfaceEntry, uintptr(unsafe.Pointer(row)))
}

func (h *ipHelper) SetMTU(_ context.Context, linkIndex int, mtu int) error {
	if mtu <= 0 {
		return fmt.Errorf("setting MTU of interface %d: invalid MTU %d", linkIndex, mtu)
	}
	l, err := luid(linkIndex)
	if err != nil {
		return fmt.Errorf("setting MTU %d: %w", mtu, err)
	}
	bound := 0
	for _, fam := range []uint16{windows.AF_INET, windows.AF_INET6} {
		row, found, err := ipInterface(l, fam)
		if err != nil {
			return fmt.Errorf("setting MTU of interface %d to %d: %w", linkIndex, mtu, err)
		}
		if !found {
			continue
		}
		bound++
		if row.NlMtu == uint32(mtu) {
			continue
		}
		row.NlMtu = uint32(mtu)
		if err := setIPInterface(&row); err != nil {
			return fmt.Errorf("setting MTU of interface %d to %d: %w", linkIndex, mtu, err)
		}
	}
	if bound == 0 {
		return fmt.Errorf("setting MTU of interface %d: neither IPv4 nor IPv6 is bound to it: %w", linkIndex, ErrNotFound)
	}
	return nil
}

func (h *ipHelper) SetUp(_ context.Context, linkIndex int) error {
	l, err := luid(linkIndex)
	if err != nil {
		return fmt.Errorf("setting interface up: %w", err)
	}
	row2 := windows.MibIfRow2{InterfaceLuid: l}
	if err := windows.GetIfEntry2Ex(windows.MibIfEntryNormalWithoutStatistics, &row2); err != nil {
		return fmt.Errorf("reading interface %d: %w", linkIndex, err)
	}
	if row2.AdminStatus == netIfAdminStatusUp {
		return nil
	}
	row := windows.MibIfRow{Index: uint32(linkIndex)}
	if err := windows.GetIfEntry(&row); err != nil {
		return fmt.Errorf("reading interface %d: %w", linkIndex, err)
	}
	row.AdminStatus = netIfAdminStatusUp
	if err := call(procSetIfEntry, uintptr(unsafe.Pointer(&row))); err != nil {
		return fmt.Errorf("setting interface %d up: %w", linkIndex, err)
	}
	return nil
}

// EnsureRoutes ensures each route against one listing of the routing table: a listing per route
// would make a node's first pass over 5,000 peers' routes read the table 5,000 times (bench-scale,
// issue 64). Routes of one call with the same interface, destination and next hop are one route
// to Windows: the first one counts.
func (h *ipHelper) EnsureRoutes(_ context.Context, routes []Route) error {
	if len(routes) == 0 {
		return nil
	}
	existing, err := h.listRoutes(RouteFilter{})
	if err != nil {
		return fmt.Errorf("ensuring routes: %w", err)
	}
	byID := map[windowsRouteID][]systemRoute{}
	for _, e := range existing {
		byID[windowsID(e.Route)] = append(byID[windowsID(e.Route)], e)
	}
	var errs []error
	done := map[windowsRouteID]bool{}
	for _, r := range routes {
		if err := r.validate(); err != nil {
			errs = append(errs, fmt.Errorf("ensuring route: %w", err))
			continue
		}
		r = r.normalize()
		id := windowsID(r)
		if done[id] {
			continue
		}
		done[id] = true
		if err := h.ensureRoute(r, byID[id]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SetSwitchPort changes nothing on Windows: the Hyper-V switch owns the adapters bound to it and
// the management vNIC is the host's only interface on the switch.
func (h *ipHelper) SetSwitchPort(context.Context, int, bool) error { return nil }

// ReleaseSwitchPort changes nothing on Windows, for the same reason.
func (h *ipHelper) ReleaseSwitchPort(context.Context, string) error { return nil }

func (h *ipHelper) EnsureForwarding(_ context.Context, linkIndex int) error {
	l, err := luid(linkIndex)
	if err != nil {
		return fmt.Errorf("enabling forwarding: %w", err)
	}
	row, found, err := ipInterface(l, windows.AF_INET)
	if err == nil && !found {
		err = fmt.Errorf("IPv4 is not bound to it: %w", ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("enabling IPv4 forwarding on interface %d: %w", linkIndex, err)
	}
	if row.ForwardingEnabled != 0 {
		return nil
	}
	row.ForwardingEnabled = 1
	if err := setIPInterface(&row); err != nil {
		return fmt.Errorf("enabling IPv4 forwarding on interface %d: %w", linkIndex, err)
	}
	return nil
}

// systemRoute is a route as Routes reports it with the row it came from.
type systemRoute struct {
	Route
	row windows.MibIpForwardRow2
}

// windowsRouteID is how Windows identifies a route: its interface, destination and next hop (metric
// and protocol are properties of the route).
type windowsRouteID struct {
	link    int
	dst     netip.Prefix
	gateway netip.Addr
}

func windowsID(r Route) windowsRouteID { return windowsRouteID{r.LinkIndex, r.Dst, r.Gateway} }

func ownedMetric(metric uint32) bool {
	return metric >= WindowsOwnedMetricBase && metric < WindowsOwnedMetricBase+WindowsOwnedMetricSpan
}

func (h *ipHelper) listRoutes(filter RouteFilter) ([]systemRoute, error) {
	var table *windows.MibIpForwardTable2
	if err := windows.GetIpForwardTable2(windows.AF_UNSPEC, &table); err != nil {
		return nil, fmt.Errorf("listing routes: %w", err)
	}
	defer windows.FreeMibTable(unsafe.Pointer(table))
	var out []systemRoute
	for _, row := range table.Rows() {
		if filter.LinkIndex != 0 && int(row.InterfaceIndex) != filter.LinkIndex {
			continue
		}
		// Routes the stack derives from addresses and interfaces (subnet, host, broadcast and
		// multicast routes) are not configuration.
		if row.Loopback != 0 || row.Origin == windows.NlroWellKnown || row.Protocol == windows.MIB_IPPROTO_LOCAL {
			continue
		}
		dst := fromSockaddr(&row.DestinationPrefix.Prefix)
		if !dst.IsValid() {
			continue
		}
		r := Route{
			Dst:       netip.PrefixFrom(dst, int(row.DestinationPrefix.PrefixLength)).Masked(),
			LinkIndex: int(row.InterfaceIndex),
			Metric:    int(row.Metric),
		}
		if gw := fromSockaddr(&row.NextHop); gw.IsValid() && !gw.IsUnspecified() {
			r.Gateway = gw
		}
		if row.Protocol == windows.MIB_IPPROTO_NETMGMT && ownedMetric(row.Metric) {
			r.Owned = true
			r.Metric -= WindowsOwnedMetricBase
		}
		if filter.OwnedOnly && !r.Owned {
			continue
		}
		out = append(out, systemRoute{Route: r, row: row})
	}
	return out, nil
}

func (h *ipHelper) Routes(_ context.Context, filter RouteFilter) ([]Route, error) {
	srs, err := h.listRoutes(filter)
	if err != nil {
		return nil, err
	}
	out := make([]Route, len(srs))
	for i, sr := range srs {
		out[i] = sr.Route
	}
	return out, nil
}

// systemMetric is the metric of the route row for r, with winnet's band for an owned route.
func systemMetric(r Route) (uint32, error) {
	if r.Owned {
		if r.Metric >= WindowsOwnedMetricSpan {
			return 0, fmt.Errorf("route %s: an owned route's metric must be below %d on Windows", r, WindowsOwnedMetricSpan)
		}
		return uint32(WindowsOwnedMetricBase + r.Metric), nil
	}
	if ownedMetric(uint32(r.Metric)) {
		return 0, fmt.Errorf("route %s: metrics %d-%d mark winnet's routes on Windows", r,
			WindowsOwnedMetricBase, WindowsOwnedMetricBase+WindowsOwnedMetricSpan-1)
	}
	return uint32(r.Metric), nil
}

func (h *ipHelper) EnsureRoute(_ context.Context, r Route) error {
	if err := r.validate(); err != nil {
		return fmt.Errorf("ensuring route: %w", err)
	}
	r = r.normalize()
	if r.LinkIndex == 0 {
		return fmt.Errorf("ensuring route %s: Windows needs the interface of a route", r)
	}
	existing, err := h.listRoutes(RouteFilter{LinkIndex: r.LinkIndex})
	if err != nil {
		return fmt.Errorf("ensuring route %s: %w", r, err)
	}
	return h.ensureRoute(r, slices.DeleteFunc(existing, func(e systemRoute) bool { return windowsID(e.Route) != windowsID(r) }))
}

// ensureRoute creates r (validated and normalized), or changes the existing route with its
// interface, destination and next hop (same: the listed routes with r's windowsID) to it.
func (h *ipHelper) ensureRoute(r Route, same []systemRoute) error {
	if r.LinkIndex == 0 {
		return fmt.Errorf("ensuring route %s: Windows needs the interface of a route", r)
	}
	metric, err := systemMetric(r)
	if err != nil {
		return fmt.Errorf("ensuring route: %w", err)
	}
	l, err := luid(r.LinkIndex)
	if err != nil {
		return fmt.Errorf("ensuring route %s: %w", r, err)
	}
	// Windows identifies a route by interface, destination and next hop; metric and protocol
	// are properties.
	for _, e := range same {
		row := e.row
		if r.Owned && row.Protocol != windows.MIB_IPPROTO_NETMGMT {
			// The protocol cannot be changed in place: replace the route by ours.
			if err := call(procDeleteIpForwardEntry2, uintptr(unsafe.Pointer(&row))); err != nil && !errors.Is(err, windows.ERROR_NOT_FOUND) {
				return fmt.Errorf("replacing route %s by %s: %w", e.Route, r, err)
			}
			break
		}
		if row.Metric == metric {
			return nil
		}
		row.Metric = metric
		if err := call(procSetIpForwardEntry2, uintptr(unsafe.Pointer(&row))); err != nil {
			return fmt.Errorf("changing route %s to %s: %w", e.Route, r, err)
		}
		return nil
	}
	var row windows.MibIpForwardRow2
	if err := callVoid(procInitializeIpForwardEntry, uintptr(unsafe.Pointer(&row))); err != nil {
		return fmt.Errorf("adding route %s: %w", r, err)
	}
	row.InterfaceLuid = l
	row.InterfaceIndex = uint32(r.LinkIndex)
	row.DestinationPrefix.Prefix = toSockaddr(r.Dst.Addr())
	row.DestinationPrefix.PrefixLength = uint8(r.Dst.Bits())
	if r.Gateway.IsValid() {
		row.NextHop = toSockaddr(r.Gateway)
	} else if r.Dst.Addr().Is4() {
		row.NextHop = toSockaddr(netip.IPv4Unspecified())
	} else {
		row.NextHop = toSockaddr(netip.IPv6Unspecified())
	}
	row.Metric = metric
	row.Protocol = windows.MIB_IPPROTO_NETMGMT
	row.Origin = windows.NlroManual
	row.ValidLifetime = infiniteLifetime
	row.PreferredLifetime = infiniteLifetime
	if err := call(procCreateIpForwardEntry2, uintptr(unsafe.Pointer(&row))); err != nil {
		return fmt.Errorf("adding route %s: %w", r, err)
	}
	return nil
}

func (h *ipHelper) DeleteRoute(_ context.Context, r Route) error {
	if err := r.validate(); err != nil {
		return fmt.Errorf("deleting route: %w", err)
	}
	r = r.normalize()
	existing, err := h.listRoutes(RouteFilter{LinkIndex: r.LinkIndex})
	if err != nil {
		return fmt.Errorf("deleting route %s: %w", r, err)
	}
	for _, e := range existing {
		// The metric of an owned route is an offset in winnet's band: ownership is part of it.
		if !routeMatches(r, e.Route) || e.Owned != r.Owned {
			continue
		}
		row := e.row
		if err := call(procDeleteIpForwardEntry2, uintptr(unsafe.Pointer(&row))); err != nil && !errors.Is(err, windows.ERROR_NOT_FOUND) {
			return fmt.Errorf("deleting route %s: %w", e.Route, err)
		}
	}
	return nil
}

func (h *ipHelper) ReconcileRoutes(ctx context.Context, desired []Route) error {
	return reconcileRoutes(ctx, h, desired, func(r Route) Route { return r })
}

func (h *ipHelper) Neighbor(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
	ip = ip.Unmap().WithZone("")
	if !ip.IsValid() {
		return nil, fmt.Errorf("resolving neighbour: invalid address")
	}
	ctx, cancel := context.WithTimeout(ctx, h.opts.NeighborTimeout)
	defer cancel()

	dst := toSockaddr(ip)
	var best windows.MibIpForwardRow2
	var src windows.RawSockaddrInet
	if err := call(procGetBestRoute2, 0, 0, 0, uintptr(unsafe.Pointer(&dst)), 0,
		uintptr(unsafe.Pointer(&best)), uintptr(unsafe.Pointer(&src))); err != nil {
		return nil, fmt.Errorf("resolving neighbour %s: looking up its route: %w", ip, err)
	}
	if fromSockaddr(&src) == ip || best.Loopback != 0 {
		return nil, fmt.Errorf("resolving neighbour %s: it is a local address", ip)
	}
	if gw := fromSockaddr(&best.NextHop); gw.IsValid() && !gw.IsUnspecified() {
		return nil, fmt.Errorf("resolving neighbour %s: it is not on-link (routed via %s)", ip, gw)
	}

	row := mibIPNetRow2{Address: dst, InterfaceIndex: best.InterfaceIndex, InterfaceLuid: best.InterfaceLuid}
	err := call(procGetIpNetEntry2, uintptr(unsafe.Pointer(&row)))
	if err == nil && usableNeighbor(&row) {
		return neighborMAC(&row), nil
	}
	if err != nil && !errors.Is(err, windows.ERROR_NOT_FOUND) {
		return nil, fmt.Errorf("resolving neighbour %s: reading the neighbour cache: %w", ip, err)
	}

	// ResolveIpNetEntry2 sends ARP / neighbour solicitations and blocks until an answer or the
	// stack's own timeout (a few seconds); it cannot be cancelled, so it runs on its own
	// goroutine and a caller whose context ends first gets its error at once.
	type result struct {
		mac net.HardwareAddr
		err error
	}
	done := make(chan result, 1)
	go func() {
		row := mibIPNetRow2{Address: dst, InterfaceIndex: best.InterfaceIndex, InterfaceLuid: best.InterfaceLuid}
		err := call(procResolveIpNetEntry2, uintptr(unsafe.Pointer(&row)), 0)
		switch {
		case errors.Is(err, windows.ERROR_BAD_NET_NAME), err == nil && row.PhysicalAddressLength == 0:
			done <- result{err: fmt.Errorf("no answer (state %d): %w", row.State, ErrNotFound)}
		case err != nil:
			done <- result{err: err}
		default:
			done <- result{mac: neighborMAC(&row)}
		}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			return nil, fmt.Errorf("resolving neighbour %s on interface %d: %w", ip, best.InterfaceIndex, res.err)
		}
		return res.mac, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("resolving neighbour %s on interface %d: %w", ip, best.InterfaceIndex, errors.Join(ErrNotFound, ctx.Err()))
	}
}

func usableNeighbor(row *mibIPNetRow2) bool {
	switch row.State {
	case nlnsProbe, nlnsDelay, nlnsStale, nlnsReachable, nlnsPermanent:
		return row.PhysicalAddressLength > 0
	}
	return false
}

func neighborMAC(row *mibIPNetRow2) net.HardwareAddr {
	n := min(int(row.PhysicalAddressLength), len(row.PhysicalAddress))
	return slices.Clone(net.HardwareAddr(row.PhysicalAddress[:n]))
}

// WatchLinks is not available on Windows: the agent polls for a Pod's vNIC there, as Antrea's agent
// does (it looks the adapter up until it appears). NotifyIpInterfaceChange reports IP interfaces of
// the host's compartment, and nothing here proves that a container's vNIC raises one.
func (h *ipHelper) WatchLinks(context.Context) (<-chan struct{}, error) {
	return nil, fmt.Errorf("watching links on Windows: %w", errors.ErrUnsupported)
}

// Links lists every adapter of the host.
func (h *ipHelper) Links(context.Context) ([]Link, error) {
	as, err := adapters()
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	out := make([]Link, 0, len(as))
	for _, a := range as {
		out = append(out, a.Link)
	}
	return out, nil
}
