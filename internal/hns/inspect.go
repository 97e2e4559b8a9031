package hns

import (
	"encoding/json"
	"fmt"
)

// Version is the version HNS reports for itself (GET /globals/version; hcn.Version).
type Version struct {
	Major int `json:"major"`
	Minor int `json:"minor"`
}

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// AtLeast reports whether v is min or newer.
func (v Version) AtLeast(min Version) bool {
	return v.Major > min.Major || v.Major == min.Major && v.Minor >= min.Minor
}

// V2APIVersion is the first HNS version with the V2 API and schema winnet's calls use (hcn's
// V2ApiSupport: 9.2, Windows Server 2019).
var V2APIVersion = Version{Major: 9, Minor: 2}

// SimVersion is the version the HNS simulator answers: the API level it models (V2APIVersion). It is
// not the version of any Windows build.
var SimVersion = V2APIVersion

// LoadBalancer is an HNS load balancer (hcn.HostComputeLoadBalancer): kube-proxy's winkernel mode
// makes one per Service port and frontend (kubernetes pkg/proxy/winkernel/hns.go, getLoadBalancer:
// SourceVIP its --source-vip, FrontendVIPs the Service IP or none for a NodePort, HostComputeEndpoints
// the IDs of its backends' endpoints, local or remote). winnet makes none.
type LoadBalancer struct {
	ID           string   `json:"id"`
	FrontendVIPs []string `json:"frontendVIPs,omitempty"`
	SourceVIP    string   `json:"sourceVIP,omitempty"`
	// Endpoints are the IDs of its HNS endpoints (HostComputeEndpoints).
	Endpoints []string `json:"endpoints,omitempty"`
}

// HostInfo is what HNS says about itself and the host, beyond Interface: its version and its load
// balancers. `winnet-agent preflight` asks it.
type HostInfo struct {
	Version       Version        `json:"version"`
	LoadBalancers []LoadBalancer `json:"loadBalancers"`
}

// SimNetwork is a network of the HNS simulator's state file, with its extension state.
type SimNetwork struct {
	Network
	OVSExtension bool
}

// ReadSimLoadBalancers decodes the load balancers of an HNS simulator's state file (kube-proxy's, seeded on
// a node taken over from it: sim_foreign.go) without starting a simulator.
func ReadSimLoadBalancers(data []byte) ([]LoadBalancer, error) {
	var s simState
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("decoding HNS simulator state: %w", err)
	}
	if s.Version != simStateVersion {
		return nil, fmt.Errorf("HNS simulator state has version %d, want %d", s.Version, simStateVersion)
	}
	return s.LoadBalancers, nil
}

// ReadSimNetworks decodes the networks of an HNS simulator's state file (LinuxSimOptions.StateFile)
// without starting a simulator: a command beside a running agent (preflight, the support bundle)
// reads what the simulator holds, as it would ask HNS, and changes nothing.
func ReadSimNetworks(data []byte) ([]SimNetwork, error) {
	var s simState
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("decoding HNS simulator state: %w", err)
	}
	if s.Version != simStateVersion {
		return nil, fmt.Errorf("HNS simulator state has version %d, want %d", s.Version, simStateVersion)
	}
	out := make([]SimNetwork, 0, len(s.Networks))
	for _, n := range s.Networks {
		out = append(out, SimNetwork{OVSExtension: n.OVSExtension, Network: Network{
			ID: n.ID, Name: n.Name, AdapterName: n.AdapterName, Subnet: n.Subnet, Gateway: n.Gateway, ManagementVNIC: n.ManagementVNIC,
		}})
	}
	return out, nil
}
