//go:build windows

package hns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"unsafe"

	"github.com/Microsoft/hcsshim"
	"github.com/Microsoft/hcsshim/hcn"
	"github.com/go-logr/logr"
	"golang.org/x/sys/windows"
)

// New returns a client of the real Host Networking Service (HNS v2 through hcsshim/hcn; HNS v1 for the switch
// extension, which hcn does not expose). Every call is bounded by opts.Timeouts.
func New(opts Options) (Interface, error) {
	return newBounded(hcnClient{}, opts.Timeouts), nil
}

const defaultRoute = "0.0.0.0/0"

// hcnClient is the raw adapter; the hcn calls ignore contexts, which is why bounded wraps it.
type hcnClient struct{}

var _ Interface = hcnClient{}

// isNotFound reports HNS "not found" errors: hcsshim's NotFound error types and ERROR_NOT_FOUND (0x490).
func isNotFound(err error) bool {
	return hcn.IsNotFoundError(err) || hcn.IsElementNotFoundError(err)
}

func mapNotFound(err error) error {
	if err != nil && isNotFound(err) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// isInvalidParameter reports HRESULT 0x80070057 (ERROR_INVALID_PARAMETER), which hcsshim turns into Errno 0x57;
// HNS v1 only passes its message on.
func isInvalidParameter(err error) bool {
	var errno windows.Errno
	if errors.As(err, &errno) && errno == windows.ERROR_INVALID_PARAMETER {
		return true
	}
	if hcn.CheckErrorWithCode(err, hcn.ErrorCode(windows.ERROR_INVALID_PARAMETER)) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "0x57") || strings.Contains(msg, "The parameter is incorrect")
}

// hnsMAC formats a MAC the way HNS does: 00-15-5D-0A-0B-0C.
func hnsMAC(mac net.HardwareAddr) string {
	return strings.ToUpper(strings.ReplaceAll(mac.String(), ":", "-"))
}

func policySettings(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshalling HNS policy settings %T: %v", v, err)) // plain structs of strings: cannot fail
	}
	return b
}

// fromHCNNetwork converts what HNS reports; fields HNS does not report (or reports in a form we cannot parse)
// stay zero.
func fromHCNNetwork(n *hcn.HostComputeNetwork) *Network {
	out := &Network{ID: n.Id, Name: n.Name}
	for _, p := range n.Policies {
		if p.Type != hcn.NetAdapterName {
			continue
		}
		var s hcn.NetAdapterNameNetworkPolicySetting
		if json.Unmarshal(p.Settings, &s) == nil {
			out.AdapterName = s.NetworkAdapterName
		}
	}
	if out.AdapterName != "" {
		out.ManagementVNIC = WindowsManagementVNICName(out.AdapterName)
	}
	for _, ipam := range n.Ipams {
		for _, subnet := range ipam.Subnets {
			prefix, err := netip.ParsePrefix(subnet.IpAddressPrefix)
			if err != nil || !prefix.Addr().Is4() || out.Subnet.IsValid() {
				continue
			}
			out.Subnet = prefix
			for _, r := range subnet.Routes {
				if r.DestinationPrefix == defaultRoute {
					out.Gateway, _ = netip.ParseAddr(r.NextHop)
				}
			}
		}
	}
	return out
}

func fromHCNEndpoint(ep *hcn.HostComputeEndpoint) Endpoint {
	out := Endpoint{ID: ep.Id, Name: ep.Name, NetworkID: ep.HostComputeNetwork, NamespaceID: ep.HostComputeNamespace}
	for _, c := range ep.IpConfigurations {
		ip, err := netip.ParseAddr(c.IpAddress)
		if err == nil && ip.Is4() {
			out.IP, out.PrefixLength = ip, int(c.PrefixLength)
			break
		}
	}
	out.MAC, _ = net.ParseMAC(ep.MacAddress)
	out.Remote = ep.Flags&hcn.EndpointFlagsRemoteEndpoint != 0
	for _, r := range ep.Routes {
		if r.DestinationPrefix == defaultRoute {
			out.Gateway, _ = netip.ParseAddr(r.NextHop)
		}
	}
	return out
}

func (hcnClient) GetNetworkByName(_ context.Context, name string) (*Network, error) {
	n, err := hcn.GetNetworkByName(name)
	if err != nil {
		return nil, mapNotFound(err)
	}
	return fromHCNNetwork(n), nil
}

// CreateTransparentNetwork creates the network non-persistent (EnableNonPersistent), so that HNS behaves the
// same on every Windows version: the network is gone after a reboot and the agent rebuilds it.
//
// HNS answers 0x80070057 when the adapter is already bound to another network or is the management vNIC of
// another network; the error then names that network (see adapterHolder). The spec is validated first, so that an
// invalid parameter of ours is not mistaken for that case.
func (hcnClient) CreateTransparentNetwork(ctx context.Context, spec NetworkSpec) (*Network, error) {
	if err := validateNetworkSpec(spec); err != nil {
		return nil, err
	}
	policies := []hcn.NetworkPolicy{{
		Type:     hcn.NetAdapterName,
		Settings: policySettings(hcn.NetAdapterNameNetworkPolicySetting{NetworkAdapterName: spec.AdapterName}),
	}}
	if spec.SourceMAC != nil {
		policies = append(policies, hcn.NetworkPolicy{
			Type:     hcn.SourceMacAddress,
			Settings: policySettings(hcn.SourceMacAddressNetworkPolicySetting{SourceMacAddress: hnsMAC(spec.SourceMAC)}),
		})
	}
	network := &hcn.HostComputeNetwork{
		Name:     spec.Name,
		Type:     hcn.Transparent,
		Flags:    hcn.EnableNonPersistent,
		Policies: policies,
		Ipams: []hcn.Ipam{{
			Type: "Static",
			Subnets: []hcn.Subnet{{
				IpAddressPrefix: spec.Subnet.Masked().String(),
				Routes:          []hcn.Route{{NextHop: spec.Gateway.String(), DestinationPrefix: defaultRoute}},
			}},
		}},
		SchemaVersion: hcn.V2SchemaVersion(),
	}
	logr.FromContextOrDiscard(ctx).Info("Creating HNS Transparent network", "network", spec.Name,
		"adapter", spec.AdapterName, "cidr", spec.Subnet.Masked().String())
	created, err := network.Create()
	if err != nil {
		if isInvalidParameter(err) {
			return nil, fmt.Errorf("%w: HNS returned 0x80070057 (%w); %s", ErrAdapterInUse, err, adapterHolder(spec.AdapterName))
		}
		return nil, err
	}
	out := fromHCNNetwork(created)
	if out.AdapterName == "" {
		out.AdapterName = spec.AdapterName
		out.ManagementVNIC = WindowsManagementVNICName(spec.AdapterName)
	}
	return out, nil
}

// adapterHolder says which existing HNS network holds the adapter, for the 0x57 HNS answers when a network is
// created on an adapter that is not free: one whose switch is bound to the adapter (its NetAdapterName policy,
// or for networks created through HNS v1 its NetworkAdapterName), or one whose management vNIC the adapter is.
// The adapter found by the node IP is such a vNIC when another HNS network, an L2Bridge one for instance, took
// the node IP first (Antrea issue 2213): it is named "vEthernet (<that network's adapter>)", or holds that
// network's ManagementIP when it was renamed.
func adapterHolder(adapter string) string {
	networks, err := hcn.ListNetworks()
	if err != nil {
		return fmt.Sprintf("listing the HNS networks to find the one holding adapter %q failed: %v", adapter, err)
	}
	type candidate struct {
		name, id, adapter, managementIP string
	}
	byID := make(map[string]*candidate, len(networks))
	all := make([]*candidate, 0, len(networks))
	for i := range networks {
		n := fromHCNNetwork(&networks[i])
		c := &candidate{name: n.Name, id: n.ID, adapter: n.AdapterName}
		byID[strings.ToLower(n.ID)] = c
		all = append(all, c)
	}
	// HNS v1 also reports the adapter of networks created without the policy, and their management IP.
	if v1, err := hcsshim.HNSListNetworkRequest("GET", "", ""); err == nil {
		for _, n := range v1 {
			if c := byID[strings.ToLower(n.Id)]; c != nil {
				if c.adapter == "" {
					c.adapter = n.NetworkAdapterName
				}
				c.managementIP = n.ManagementIP
			}
		}
	}
	var adapterIPs []netip.Addr
	if iface, err := net.InterfaceByName(adapter); err == nil {
		if addrs, err := iface.Addrs(); err == nil {
			for _, a := range addrs {
				if p, err := netip.ParsePrefix(a.String()); err == nil {
					adapterIPs = append(adapterIPs, p.Addr().Unmap())
				}
			}
		}
	}
	for _, c := range all {
		if c.adapter != "" && strings.EqualFold(c.adapter, adapter) {
			return fmt.Sprintf("adapter %q is bound to HNS network %q (%s)", adapter, c.name, c.id)
		}
	}
	for _, c := range all {
		mgmtIP, _ := netip.ParseAddr(c.managementIP)
		isVNIC := c.adapter != "" && strings.EqualFold(WindowsManagementVNICName(c.adapter), adapter)
		holdsIP := mgmtIP.IsValid() && slices.Contains(adapterIPs, mgmtIP.Unmap())
		if isVNIC || holdsIP {
			return fmt.Sprintf("adapter %q is the management vNIC of HNS network %q (%s), whose switch is bound to adapter %q",
				adapter, c.name, c.id, c.adapter)
		}
	}
	return fmt.Sprintf("no HNS network names adapter %q as its adapter or management vNIC", adapter)
}

func (hcnClient) DeleteNetwork(ctx context.Context, networkID string) error {
	n, err := hcn.GetNetworkByID(networkID)
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return err
	}
	logr.FromContextOrDiscard(ctx).Info("Deleting HNS network", "network", n.Name, "networkID", n.Id)
	if err := n.Delete(); err != nil && !isNotFound(err) {
		return err
	}
	return nil
}

// hnsV1Extension is an entry of the Extensions of an HNS v1 network (the Hyper-V switch extensions).
type hnsV1Extension struct {
	ID        string `json:"Id"`
	IsEnabled bool
}

type hnsV1Extensions struct {
	Extensions []hnsV1Extension `json:"Extensions"`
}

// EnableOVSExtension posts the extension settings to the HNS v1 network, as Antrea does: hcn has no typed call
// for switch extensions.
func (hcnClient) EnableOVSExtension(ctx context.Context, networkID string) error {
	if _, err := hcn.GetNetworkByID(networkID); err != nil {
		return mapNotFound(err)
	}
	body, err := json.Marshal(hnsV1Extensions{Extensions: []hnsV1Extension{{ID: OVSExtensionID, IsEnabled: true}}})
	if err != nil {
		return err
	}
	logr.FromContextOrDiscard(ctx).Info("Enabling the OVS extension", "networkID", networkID)
	if _, err := hcsshim.HNSNetworkRequest("POST", networkID, string(body)); err != nil {
		return err
	}
	return nil
}

// OVSExtensionEnabled reads the Extensions of the HNS v1 network, which hcsshim's types drop.
func (hcnClient) OVSExtensionEnabled(_ context.Context, networkID string) (bool, error) {
	if _, err := hcn.GetNetworkByID(networkID); err != nil {
		return false, mapNotFound(err)
	}
	out, err := hnsV1Call("GET", "/networks/"+networkID, "")
	if err != nil {
		return false, err
	}
	var exts hnsV1Extensions
	if err := json.Unmarshal(out, &exts); err != nil {
		return false, fmt.Errorf("decoding the extensions of network %q: %w", networkID, err)
	}
	for _, e := range exts.Extensions {
		if strings.EqualFold(e.ID, OVSExtensionID) {
			return e.IsEnabled, nil
		}
	}
	return false, nil
}

func (hcnClient) CreateEndpoint(ctx context.Context, spec EndpointSpec) (*Endpoint, error) {
	if spec.Name == "" {
		return nil, errors.New("endpoint name is empty")
	}
	n, err := hcn.GetNetworkByID(spec.NetworkID)
	if err != nil {
		return nil, mapNotFound(err)
	}
	network := fromHCNNetwork(n)
	if !spec.IP.IsValid() || !spec.IP.Is4() {
		return nil, fmt.Errorf("IP %q is not an IPv4 address", spec.IP)
	}
	prefixLength, gateway := spec.PrefixLength, spec.Gateway
	if prefixLength == 0 && network.Subnet.IsValid() {
		prefixLength = network.Subnet.Bits()
	}
	if prefixLength < 1 || prefixLength > 32 {
		return nil, fmt.Errorf("prefix length %d is out of range", prefixLength)
	}
	if !gateway.IsValid() {
		gateway = network.Gateway
	}
	ep := &hcn.HostComputeEndpoint{
		Name:               spec.Name,
		HostComputeNetwork: n.Id,
		IpConfigurations:   []hcn.IpConfig{{IpAddress: spec.IP.String(), PrefixLength: uint8(prefixLength)}},
		SchemaVersion:      hcn.V2SchemaVersion(),
		// HNS configures the container's DNS client from these (the Pod's dnsPolicy, via CNI runtimeConfig).
		Dns: hcn.Dns{Domain: spec.DNS.Domain, Search: spec.DNS.Search, ServerList: spec.DNS.Servers, Options: spec.DNS.Options},
	}
	if gateway.IsValid() {
		ep.Routes = []hcn.Route{{NextHop: gateway.String(), DestinationPrefix: defaultRoute}}
	}
	if len(spec.MAC) > 0 {
		ep.MacAddress = hnsMAC(spec.MAC)
	}
	logr.FromContextOrDiscard(ctx).V(2).Info("Creating HNS endpoint", "endpoint", spec.Name, "ip", spec.IP.String())
	created, err := ep.Create()
	if err != nil {
		return nil, mapNotFound(err)
	}
	out := fromHCNEndpoint(created)
	return &out, nil
}

func (hcnClient) GetEndpointByName(_ context.Context, name string) (*Endpoint, error) {
	ep, err := hcn.GetEndpointByName(name)
	if err != nil {
		return nil, mapNotFound(err)
	}
	out := fromHCNEndpoint(ep)
	return &out, nil
}

func (hcnClient) ListEndpoints(_ context.Context, networkID string) ([]Endpoint, error) {
	eps, err := hcn.ListEndpointsOfNetwork(networkID)
	if err != nil {
		if isNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	out := make([]Endpoint, 0, len(eps))
	for i := range eps {
		out = append(out, fromHCNEndpoint(&eps[i]))
	}
	return out, nil
}

func (hcnClient) DeleteEndpoint(ctx context.Context, endpointID string) error {
	ep, err := hcn.GetEndpointByID(endpointID)
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return err
	}
	logr.FromContextOrDiscard(ctx).V(2).Info("Deleting HNS endpoint", "endpoint", ep.Name, "endpointID", ep.Id)
	if err := ep.Delete(); err != nil && !isNotFound(err) {
		return err
	}
	return nil
}

func (hcnClient) AttachEndpoint(ctx context.Context, endpointID, namespaceID string) error {
	if namespaceID == "" {
		return errors.New("namespace ID is empty")
	}
	ep, err := hcn.GetEndpointByID(endpointID)
	if err != nil {
		return mapNotFound(err)
	}
	switch {
	case sameID(ep.HostComputeNamespace, namespaceID):
		return nil
	case ep.HostComputeNamespace != "":
		return fmt.Errorf("endpoint %q is already attached to namespace %q", endpointID, ep.HostComputeNamespace)
	}
	logr.FromContextOrDiscard(ctx).V(2).Info("Attaching HNS endpoint", "endpointID", endpointID, "namespace", namespaceID)
	if err := hcn.AddNamespaceEndpoint(namespaceID, endpointID); err != nil {
		if hcn.IsPortAlreadyExistsError(err) {
			return nil // attached concurrently or HNS did not report the namespace
		}
		return mapNotFound(err)
	}
	return nil
}

func (hcnClient) DetachEndpoint(ctx context.Context, endpointID, namespaceID string) error {
	ep, err := hcn.GetEndpointByID(endpointID)
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return err
	}
	if ep.HostComputeNamespace != "" && !sameID(ep.HostComputeNamespace, namespaceID) {
		return nil // attached elsewhere: not ours to detach
	}
	logr.FromContextOrDiscard(ctx).V(2).Info("Detaching HNS endpoint", "endpointID", endpointID, "namespace", namespaceID)
	if err := hcn.RemoveNamespaceEndpoint(namespaceID, endpointID); err != nil && !isNotFound(err) {
		return err
	}
	return nil
}

var procHNSCall = windows.NewLazySystemDLL("vmcompute.dll").NewProc("HNSCall")

// hnsV1Call is a raw HNS v1 request (vmcompute.dll HNSCall), for the parts of the answer hcsshim's types drop.
// It returns the Output of a successful answer.
func hnsV1Call(method, path, request string) (json.RawMessage, error) {
	m, err := windows.UTF16PtrFromString(method)
	if err != nil {
		return nil, err
	}
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return nil, err
	}
	r, err := windows.UTF16PtrFromString(request)
	if err != nil {
		return nil, err
	}
	if err := procHNSCall.Find(); err != nil {
		return nil, fmt.Errorf("finding HNSCall in vmcompute.dll: %w", err)
	}
	var response *uint16
	hr, _, _ := syscall.SyscallN(procHNSCall.Addr(),
		uintptr(unsafe.Pointer(m)), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(r)),
		uintptr(unsafe.Pointer(&response)))
	var text string
	if response != nil {
		text = windows.UTF16PtrToString(response)
		windows.CoTaskMemFree(unsafe.Pointer(response))
	}
	if int32(hr) < 0 {
		code := windows.Errno(hr)
		if hr&0x1fff0000 == 0x00070000 { // HRESULT_FROM_WIN32
			code = windows.Errno(hr & 0xffff)
		}
		return nil, fmt.Errorf("HNS %s %s failed (HRESULT 0x%08x): %w", method, path, uint32(hr), code)
	}
	var answer struct {
		Success bool
		Error   string
		Output  json.RawMessage
	}
	if err := json.Unmarshal([]byte(text), &answer); err != nil {
		return nil, fmt.Errorf("decoding the answer to HNS %s %s: %w", method, path, err)
	}
	if !answer.Success {
		return nil, fmt.Errorf("HNS %s %s failed: %s", method, path, answer.Error)
	}
	return answer.Output, nil
}
