package hns

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/winnet-io/winnet/internal/hostnet"
)

// simStateVersion is the version of the simulator's state file format.
const simStateVersion = 1

// simState is the simulator's state as it is written to its state file: what real HNS keeps across restarts of
// its clients (and loses at a reboot).
type simState struct {
	Version   int                `json:"version"`
	Networks  []simNetworkState  `json:"networks"`
	Endpoints []simEndpointState `json:"endpoints"`
	// AdapterDNS holds the DNS servers of host adapters no network holds.
	AdapterDNS map[string][]netip.Addr `json:"adapterDNS,omitempty"`
	// Violations are the calls made out of HNS's order (see Sim.OrderViolations).
	Violations []string `json:"violations,omitempty"`
	// LoadBalancers are another stack's (kube-proxy's) load balancers.
	LoadBalancers []LoadBalancer `json:"loadBalancers,omitempty"`
}

type simNetworkState struct {
	ID           string       `json:"id"`
	Name         string       `json:"name"`
	AdapterName  string       `json:"adapterName"`
	Subnet       netip.Prefix `json:"subnet"`
	Gateway      netip.Addr   `json:"gateway"`
	OVSExtension bool         `json:"ovsExtension"`
	// ManagementVNIC and VNICIndex name the management vNIC as HNS created it and its interface index.
	ManagementVNIC string           `json:"managementVNIC,omitempty"`
	VNICIndex      int              `json:"vnicIndex,omitempty"`
	AdapterConfig  hostnet.IPConfig `json:"adapterConfig"`
	DNS            []netip.Addr     `json:"dns,omitempty"`
	// Type, RemoteSubnets and HostRoute describe another stack's network; an empty Type is Transparent.
	Type          NetworkType          `json:"type,omitempty"`
	RemoteSubnets []RemoteSubnetPolicy `json:"remoteSubnets,omitempty"`
	HostRoute     bool                 `json:"hostRoute,omitempty"`
}

type simEndpointState struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	NetworkID    string     `json:"networkID"`
	IP           netip.Addr `json:"ip"`
	PrefixLength int        `json:"prefixLength"`
	MAC          string     `json:"mac"`
	Gateway      netip.Addr `json:"gateway"`
	NamespaceID  string     `json:"namespaceID,omitempty"`
	DNS          DNS        `json:"dns,omitempty"`
	Remote       bool       `json:"remote,omitempty"`
}

// endpoint is the endpoint the state describes.
func (ep simEndpointState) endpoint() (*Endpoint, error) {
	mac, err := net.ParseMAC(ep.MAC)
	if err != nil {
		return nil, fmt.Errorf("endpoint %q has an invalid MAC %q: %w", ep.Name, ep.MAC, err)
	}
	return &Endpoint{
		ID: ep.ID, Name: ep.Name, NetworkID: ep.NetworkID, IP: ep.IP, PrefixLength: ep.PrefixLength,
		MAC: mac, Gateway: ep.Gateway, NamespaceID: ep.NamespaceID, DNS: ep.DNS, Remote: ep.Remote,
	}, nil
}

// snapshot returns the model's state; the caller holds m.mu.
func (m *simModel) snapshot() simState {
	s := simState{Version: simStateVersion, Networks: []simNetworkState{}, Endpoints: []simEndpointState{},
		AdapterDNS: m.adapterDNS, Violations: m.violations}
	for _, n := range m.networks {
		s.Networks = append(s.Networks, simNetworkState{
			ID: n.ID, Name: n.Name, AdapterName: n.AdapterName, Subnet: n.Subnet, Gateway: n.Gateway,
			OVSExtension: n.ovsExtension, ManagementVNIC: n.ManagementVNIC, VNICIndex: n.vnicIndex,
			AdapterConfig: n.adapterConfig, DNS: n.dns,
			Type: n.netType, RemoteSubnets: n.remoteSubnets, HostRoute: n.hostRoute,
		})
	}
	for _, ep := range m.endpoints {
		s.Endpoints = append(s.Endpoints, simEndpointState{
			ID: ep.ID, Name: ep.Name, NetworkID: ep.NetworkID, IP: ep.IP, PrefixLength: ep.PrefixLength,
			MAC: ep.MAC.String(), Gateway: ep.Gateway, NamespaceID: ep.NamespaceID, DNS: ep.DNS, Remote: ep.Remote,
		})
	}
	for _, lb := range m.loadBalancers {
		s.LoadBalancers = append(s.LoadBalancers, *copyLoadBalancer(lb))
	}
	return s
}

// restore replaces the model's state with s; the caller holds m.mu or owns m exclusively.
func (m *simModel) restore(s simState) error {
	networks := make([]*simNetwork, 0, len(s.Networks))
	for _, n := range s.Networks {
		networks = append(networks, &simNetwork{
			Network: Network{
				ID: n.ID, Name: n.Name, AdapterName: n.AdapterName, Subnet: n.Subnet, Gateway: n.Gateway,
				ManagementVNIC: n.ManagementVNIC,
			},
			ovsExtension: n.OVSExtension, vnicIndex: n.VNICIndex, adapterConfig: n.AdapterConfig, dns: n.DNS,
			netType: n.Type, remoteSubnets: n.RemoteSubnets, hostRoute: n.HostRoute,
		})
	}
	endpoints := make([]*Endpoint, 0, len(s.Endpoints))
	for _, ep := range s.Endpoints {
		e, err := ep.endpoint()
		if err != nil {
			return err
		}
		endpoints = append(endpoints, e)
	}
	m.networks, m.endpoints = networks, endpoints
	m.loadBalancers = nil
	for _, lb := range s.LoadBalancers {
		m.loadBalancers = append(m.loadBalancers, copyLoadBalancer(&lb))
	}
	m.adapterDNS, m.violations = s.AdapterDNS, s.Violations
	return nil
}

// pendingState is a state to write to the state file, numbered in the order of the mutations.
type pendingState struct {
	state   simState
	version uint64
}

// pending records the state after a mutation as the newest to save, and returns it to save once m.mu is
// released; nil without a state file. The caller holds m.mu.
func (m *simModel) pending() *pendingState {
	if m.stateFile == "" {
		return nil
	}
	m.version++
	p := &pendingState{state: m.snapshot(), version: m.version}
	m.latestMu.Lock()
	m.latest = p
	m.latestMu.Unlock()
	return p
}

// save makes the state file hold p or a newer state. Calls that wait for a write in progress are served
// by one write of the newest state (group commit), not one write each. It is called after every mutation;
// when it fails, the mutation has happened (in the model and on the host) but is not on disk.
func (m *simModel) save(p *pendingState) error {
	if p == nil {
		return nil
	}
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	if p.version <= m.saved {
		return nil
	}
	m.latestMu.Lock()
	newest := m.latest
	m.latestMu.Unlock()
	if err := writeSimState(m.stateFile, newest.state); err != nil {
		return fmt.Errorf("persisting the HNS simulator state: %w", err)
	}
	m.saved = newest.version
	return nil
}

// readSimState reads a state file; a file that does not exist is an empty state.
func readSimState(path string) (simState, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return simState{Version: simStateVersion}, nil
	}
	if err != nil {
		return simState{}, fmt.Errorf("reading HNS simulator state: %w", err)
	}
	var s simState
	if err := json.Unmarshal(b, &s); err != nil {
		return simState{}, fmt.Errorf("decoding HNS simulator state %s: %w", path, err)
	}
	if s.Version != simStateVersion {
		return simState{}, fmt.Errorf("HNS simulator state %s has version %d, want %d", path, s.Version, simStateVersion)
	}
	return s, nil
}

// writeSimState writes s to path atomically: a temporary file in the same directory renamed over path. It is
// not synced: the state must outlive the agent's process, not the machine, whose reboot ends HNS state anyway
// (deleting the file is how a reboot is simulated).
func writeSimState(path string, s simState) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("creating a temporary file in %s: %w", dir, err)
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
