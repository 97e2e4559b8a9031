package podendpoint

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/hostport"
)

// netConf is the part of the network configuration the agent reads: the runtime's conflist entry
// with what the runtime injects (prevResult for CHECK, runtimeConfig, valid attachments for GC).
type netConf struct {
	types.NetConf
	RuntimeConfig struct {
		// DNS is the Pod's DNS configuration, injected by the runtime for the "dns" capability.
		DNS *runtimeDNS `json:"dns,omitempty"`
		// PortMappings are the Pod's hostPorts, injected by the runtime for the "portMappings"
		// capability.
		PortMappings []hostport.PortMapping `json:"portMappings,omitempty"`
	} `json:"runtimeConfig"`
	// mappings are PortMappings checked (ADD only).
	mappings []hostport.Mapping
}

// runtimeDNS is the "dns" capability's runtime configuration as containerd and CRI-O pass it.
type runtimeDNS struct {
	Servers  []string `json:"servers,omitempty"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// parseNetConf decodes and validates the network configuration of a request.
func parseNetConf(req cni.Request) (*netConf, error) {
	conf := &netConf{}
	if err := json.Unmarshal(req.StdinData, conf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("decoding the network configuration: %v", err), "")
	}
	if conf.CNIVersion == "" {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "the network configuration has no cniVersion", "")
	}
	if !slices.Contains(cni.SupportedVersions, conf.CNIVersion) {
		return nil, types.NewError(types.ErrIncompatibleCNIVersion,
			fmt.Sprintf("CNI version %q is not supported; winnet supports %s", conf.CNIVersion, strings.Join(cni.SupportedVersions, ", ")), "")
	}
	if err := utils.ValidateNetworkName(conf.Name); err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "invalid network name in the network configuration: "+err.Msg, err.Details)
	}
	if req.Command == cni.CommandCheck {
		if err := version.ParsePrevResult(&conf.NetConf); err != nil {
			return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("decoding prevResult: %v", err), "")
		}
	}
	if d := conf.RuntimeConfig.DNS; d != nil {
		for _, s := range d.Servers {
			if _, err := netip.ParseAddr(s); err != nil {
				return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("runtimeConfig.dns.servers: %q is not an IP address", s), "")
			}
		}
	}
	if req.Command == cni.CommandAdd {
		m, err := hostport.Parse(conf.RuntimeConfig.PortMappings)
		if err != nil {
			return nil, err
		}
		conf.mappings = m
	}
	return conf, nil
}

// dns returns the Pod's DNS settings for the CNI result and its HNS endpoint: the runtime's
// (runtimeConfig.dns, from the Pod's dnsPolicy), else the network configuration's.
func (c *netConf) dns() types.DNS {
	d := c.RuntimeConfig.DNS
	if d == nil {
		return c.DNS
	}
	return types.DNS{Nameservers: d.Servers, Search: d.Searches, Options: d.Options}
}

// endpointDNS is the Pod's DNS settings as the HNS endpoint carries them.
func (c *netConf) endpointDNS() hns.DNS {
	d := c.dns()
	return hns.DNS{Domain: d.Domain, Search: d.Search, Servers: d.Nameservers, Options: d.Options}
}

// podArgs are the CNI_ARGS keys Kubernetes runtimes pass.
type podArgs struct {
	Namespace, Name, UID string
	// InfraContainerID is the Pod's sandbox; empty means the call is for the sandbox itself.
	InfraContainerID string
}

// parseArgs parses CNI_ARGS ("K1=V1;K2=V2"). Keys other than the Pod's are ignored, as runtimes
// mark with IgnoreUnknown=1.
func parseArgs(s string) (podArgs, error) {
	var a podArgs
	if s == "" {
		return a, nil
	}
	for _, pair := range strings.Split(s, ";") {
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return a, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_ARGS: %q is not KEY=VALUE", pair), "")
		}
		switch k {
		case "K8S_POD_NAMESPACE":
			a.Namespace = v
		case "K8S_POD_NAME":
			a.Name = v
		case "K8S_POD_UID":
			a.UID = v
		case "K8S_POD_INFRA_CONTAINER_ID":
			a.InfraContainerID = v
		}
	}
	return a, nil
}

// call is a validated ADD, DEL or CHECK request.
type call struct {
	req  cni.Request
	conf *netConf
	args podArgs
	// sandbox is the container ID of the Pod's sandbox: the request's container itself, or the one
	// K8S_POD_INFRA_CONTAINER_ID names for a workload container.
	sandbox string
}

// forSandbox reports whether the call is for the sandbox rather than a workload container.
func (c *call) forSandbox() bool { return c.req.ContainerID == c.sandbox }

// parseCall validates an ADD, DEL or CHECK request. DEL is lenient about what it needs no more
// than the container ID for: it must succeed for whatever ADD left.
func parseCall(req cni.Request) (*call, error) {
	conf, err := parseNetConf(req)
	if err != nil {
		return nil, err
	}
	c := &call{req: req, conf: conf}
	if err := cni.ValidateContainerID("CNI_CONTAINERID", req.ContainerID); err != nil {
		return nil, err
	}
	if req.IfName == "" {
		return nil, missingEnv("CNI_IFNAME")
	}
	if err := utils.ValidateInterfaceName(req.IfName); err != nil {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_IFNAME: "+err.Msg, err.Details)
	}
	if req.Command != cni.CommandDel && req.Netns == "" {
		return nil, missingEnv("CNI_NETNS")
	}
	if c.args, err = parseArgs(req.Args); err != nil {
		return nil, err
	}
	c.sandbox = req.ContainerID
	if id, ok := strings.CutPrefix(req.Netns, containerNetnsPrefix); ok && c.args.InfraContainerID == "" {
		// A workload container that joins its sandbox's namespace: CNI_NETNS=container:<sandbox ID>.
		c.args.InfraContainerID = id
	}
	if id := c.args.InfraContainerID; id != "" {
		if err := cni.ValidateContainerID("K8S_POD_INFRA_CONTAINER_ID", id); err != nil {
			return nil, err
		}
		c.sandbox = id
	}
	if req.Command == cni.CommandAdd && (c.args.Namespace == "" || c.args.Name == "") {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables,
			"CNI_ARGS must name the Pod with K8S_POD_NAMESPACE and K8S_POD_NAME", fmt.Sprintf("CNI_ARGS=%q", req.Args))
	}
	return c, nil
}

// containerNetnsPrefix starts the CNI_NETNS of a workload container on Windows that shares its
// sandbox's namespace: "container:<sandbox ID>".
const containerNetnsPrefix = "container:"

func missingEnv(name string) error {
	return types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("required environment variable %s is missing", name), "")
}
