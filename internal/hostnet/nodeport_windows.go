//go:build windows && (amd64 || arm64)

package hostnet

import (
	"context"
	"fmt"
	"net/netip"

	ole "github.com/go-ole/go-ole"
	"github.com/go-ole/go-ole/oleutil"
)

// netNat NATs the host's own connections to its NodePorts with WinNAT, as Antrea does on Windows:
// one NetNat (MSFT_NetNat) named NodePortNATName whose internal prefix is the virtual address, and
// one static mapping (MSFT_NetNatStaticMapping, 0.0.0.0:port -> virtual address:port) per NodePort
// and protocol. iphlpapi has no NAT call, so these are WMI instances of root\StandardCimv2, created
// with SpawnInstance_ and Put_ and deleted with Delete_: the provider's CreateInstance and
// DeleteInstance, which New-NetNat, Add-NetNatStaticMapping and their Remove- cmdlets call too.
type netNat struct{}

var _ NodePortNAT = netNat{}

// WinNAT's protocol numbers (MSFT_NetNatStaticMapping.Protocol, uint8).
const (
	netNatTCP = 6
	netNatUDP = 17
)

// NewNodePortNAT returns the NodePortNAT of this platform; opts.NetNSPath is ignored on Windows.
func NewNodePortNAT(Options) NodePortNAT { return netNat{} }

// ReconcileNodePorts lists the static mappings of the NetNat NodePortNATName, deletes those no
// port of ports wants (or of another target), and creates the missing ones, the NetNat first
// when it is missing or covers another target. No port deletes the NetNat as well. A WMI call
// cannot be cancelled: a context that ends first returns its error at once and the calls
// complete in the background.
func (netNat) ReconcileNodePorts(ctx context.Context, target netip.Addr, ports []NodePort) error {
	want := map[netNatMapping]bool{}
	for _, p := range ports {
		proto := netNatTCP
		switch p.Protocol {
		case "TCP":
		case "UDP":
			proto = netNatUDP
		default:
			return fmt.Errorf("NodePort protocol %q is neither TCP nor UDP", p.Protocol)
		}
		want[netNatMapping{protocol: uint32(proto), port: uint32(p.Port), internal: target.String()}] = true
	}
	done := make(chan error, 1)
	go func() {
		done <- withWMI(wmiStandardCimv2, func(services *ole.IDispatch) error {
			return reconcileNetNat(services, netip.PrefixFrom(target, 32).String(), want)
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("reconciling the NetNat %s of the host's NodePorts: %w", NodePortNATName, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("reconciling the NetNat %s of the host's NodePorts: %w", NodePortNATName, ctx.Err())
	}
}

// netNatMapping is what ReconcileNodePorts compares of a static mapping (its external address
// is always 0.0.0.0 and its internal port its external one).
type netNatMapping struct {
	protocol, port uint32
	internal       string
}

func reconcileNetNat(services *ole.IDispatch, prefix string, want map[netNatMapping]bool) error {
	// The mappings first: they belong to the NetNat.
	mappings, err := wmiInstances(services, "SELECT * FROM MSFT_NetNatStaticMapping WHERE NatName = '"+NodePortNATName+"'")
	if err != nil {
		return err
	}
	have := map[netNatMapping]bool{}
	for _, m := range mappings {
		got, err := readNetNatMapping(m)
		if err == nil && want[got] && !have[got] {
			have[got] = true
			continue
		}
		if err := wmiDelete(m, "static mapping"); err != nil {
			releaseAll(mappings)
			return err
		}
	}
	releaseAll(mappings)

	nats, err := wmiInstances(services, "SELECT * FROM MSFT_NetNat WHERE Name = '"+NodePortNATName+"'")
	if err != nil {
		return err
	}
	natOK := false
	for _, n := range nats {
		v, err := oleutil.GetProperty(n, "InternalIPInterfaceAddressPrefix")
		if err == nil && len(want) > 0 && !natOK && v.ToString() == prefix {
			natOK = true
			continue
		}
		if err := wmiDelete(n, "NetNat"); err != nil {
			releaseAll(nats)
			return err
		}
	}
	releaseAll(nats)
	if len(want) == 0 {
		return nil
	}
	if !natOK {
		if err := wmiCreate(services, "MSFT_NetNat", []wmiParam{
			{Name: "Name", Value: NodePortNATName},
			{Name: "InternalIPInterfaceAddressPrefix", Value: prefix},
		}); err != nil {
			return err
		}
	}
	for m := range want {
		if have[m] {
			continue
		}
		if err := wmiCreate(services, "MSFT_NetNatStaticMapping", []wmiParam{
			{Name: "NatName", Value: NodePortNATName},
			{Name: "Protocol", Value: uint8(m.protocol)},
			{Name: "ExternalIPAddress", Value: "0.0.0.0"},
			{Name: "ExternalPort", Value: uint16(m.port)},
			{Name: "InternalIPAddress", Value: m.internal},
			{Name: "InternalPort", Value: uint16(m.port)},
		}); err != nil {
			return err
		}
	}
	return nil
}

// readNetNatMapping reads a static mapping; one whose external address is not 0.0.0.0 or whose
// internal port differs from its external one is not one of ours as ReconcileNodePorts makes them.
func readNetNatMapping(m *ole.IDispatch) (netNatMapping, error) {
	get := func(name string) (any, error) {
		v, err := oleutil.GetProperty(m, name)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		defer v.Clear() //nolint:errcheck // clearing a read VARIANT
		return v.Value(), nil
	}
	var out netNatMapping
	var ext, extPort, intPort any
	var err error
	if ext, err = get("ExternalIPAddress"); err != nil {
		return out, err
	}
	if extPort, err = get("ExternalPort"); err != nil {
		return out, err
	}
	if intPort, err = get("InternalPort"); err != nil {
		return out, err
	}
	proto, err := get("Protocol")
	if err != nil {
		return out, err
	}
	internal, err := get("InternalIPAddress")
	if err != nil {
		return out, err
	}
	p, ok1 := toUint32(extPort)
	ip, ok2 := toUint32(intPort)
	pr, ok3 := toUint32(proto)
	s, ok4 := internal.(string)
	if e, _ := ext.(string); !ok1 || !ok2 || !ok3 || !ok4 || e != "0.0.0.0" || p != ip {
		return out, fmt.Errorf("static mapping %v:%v -> %v:%v is not a NodePort's", ext, extPort, internal, intPort)
	}
	return netNatMapping{protocol: pr, port: p, internal: s}, nil
}

// wmiInstances returns the instances a WQL query selects; the caller releases them.
func wmiInstances(services *ole.IDispatch, query string) ([]*ole.IDispatch, error) {
	set, err := toDispatch(oleutil.CallMethod(services, "ExecQuery", query))
	if err != nil {
		return nil, fmt.Errorf("querying %q: %w", query, err)
	}
	defer set.Release()
	countVar, err := oleutil.GetProperty(set, "Count")
	if err != nil {
		return nil, fmt.Errorf("counting the instances of %q: %w", query, err)
	}
	count, ok := toUint32(countVar.Value())
	_ = countVar.Clear()
	if !ok {
		return nil, fmt.Errorf("counting the instances of %q: unexpected Count of VARIANT type %d", query, countVar.VT)
	}
	out := make([]*ole.IDispatch, 0, count)
	for i := range count {
		instance, err := toDispatch(oleutil.CallMethod(set, "ItemIndex", int32(i)))
		if err != nil {
			releaseAll(out)
			return nil, fmt.Errorf("instance %d of %q: %w", i, query, err)
		}
		out = append(out, instance)
	}
	return out, nil
}

// wmiCreate creates an instance of a class with these properties: SpawnInstance_, then Put_
// (the provider's CreateInstance).
func wmiCreate(services *ole.IDispatch, class string, props []wmiParam) error {
	cls, err := toDispatch(oleutil.CallMethod(services, "Get", class))
	if err != nil {
		return fmt.Errorf("getting class %s: %w", class, err)
	}
	defer cls.Release()
	instance, err := toDispatch(oleutil.CallMethod(cls, "SpawnInstance_"))
	if err != nil {
		return fmt.Errorf("spawning an instance of %s: %w", class, err)
	}
	defer instance.Release()
	for _, p := range props {
		v, err := oleutil.PutProperty(instance, p.Name, p.Value)
		if err != nil {
			return fmt.Errorf("setting %s.%s: %w", class, p.Name, err)
		}
		_ = v.Clear()
	}
	path, err := oleutil.CallMethod(instance, "Put_")
	if err != nil {
		return fmt.Errorf("creating %s %v: %w", class, props, err)
	}
	_ = path.Clear()
	return nil
}

// wmiDelete deletes an instance (Delete_, the provider's DeleteInstance).
func wmiDelete(instance *ole.IDispatch, what string) error {
	v, err := oleutil.CallMethod(instance, "Delete_")
	if err != nil {
		return fmt.Errorf("deleting %s: %w", what, err)
	}
	_ = v.Clear()
	return nil
}

func releaseAll(ds []*ole.IDispatch) {
	for _, d := range ds {
		d.Release()
	}
}
