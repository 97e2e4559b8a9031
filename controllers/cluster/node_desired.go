package cluster

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

const (
	// ManagedByLabel marks the objects winnet-controller derives from Nodes; it deletes only those.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of ManagedByLabel on derived objects.
	ManagedByValue = "winnet-controller"
	// FieldOwner is winnet-controller's server-side apply field manager.
	FieldOwner = "winnet-controller"
)

// DefaultWindowsNodeSelector selects the nodes that get a WindowsNodeNetwork.
var DefaultWindowsNodeSelector = labels.SelectorFromSet(labels.Set{corev1.LabelOSStable: "windows"})

// nodeFacts are what winnet-controller reads from a Node.
type nodeFacts struct {
	podCIDRs []string
	// nodeIP is the Node's first IPv4 InternalIP, or its first InternalIP when it has none (a node of
	// a dual-stack cluster lists both families, in either order: winnet's tunnels and routes are
	// IPv4); nodeIPv4 is the first IPv4 one alone.
	nodeIP, nodeIPv4 string
}

func factsOf(node *corev1.Node) nodeFacts {
	f := nodeFacts{podCIDRs: node.Spec.PodCIDRs}
	if len(f.podCIDRs) == 0 && node.Spec.PodCIDR != "" {
		f.podCIDRs = []string{node.Spec.PodCIDR}
	}
	for _, a := range node.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if f.nodeIP == "" {
			f.nodeIP = a.Address
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
			f.nodeIP, f.nodeIPv4 = a.Address, a.Address
			break
		}
	}
	return f
}

// desiredRoute is the RemoteSubnetRoute every node uses to reach node's Pods, as an apply
// configuration of the fields winnet-controller owns; nil when the node has no Pod CIDRs or no
// InternalIP yet.
func desiredRoute(node *corev1.Node) *unstructured.Unstructured {
	f := factsOf(node)
	if len(f.podCIDRs) == 0 || f.nodeIP == "" {
		return nil
	}
	u := applyObject("RemoteSubnetRoute", node, map[string]any{
		"nodeName": node.Name,
		"podCIDRs": toAny(f.podCIDRs),
		"nodeIP":   f.nodeIP,
	})
	return u
}

// NetworkDefaults are the cluster-wide settings winnet-controller writes into every
// WindowsNodeNetwork it creates.
type NetworkDefaults struct {
	// WindowsNodeSelector selects the nodes that get a WindowsNodeNetwork; nil means
	// DefaultWindowsNodeSelector (kubernetes.io/os=windows).
	WindowsNodeSelector labels.Selector
	ClusterCIDRs        []string
	ServiceCIDRs        []string
}

func (d NetworkDefaults) selects(node *corev1.Node) bool {
	sel := d.WindowsNodeSelector
	if sel == nil {
		sel = DefaultWindowsNodeSelector
	}
	return sel.Matches(labels.Set(node.Labels))
}

// desiredNodeNetwork is the default WindowsNodeNetwork of a Windows node, as an apply configuration
// of the fields winnet-controller owns; nil for nodes the selector does not pick and for nodes without an IPv4 Pod CIDR.
// Everything else keeps its API defaults or what the user set.
func desiredNodeNetwork(node *corev1.Node, d NetworkDefaults) (*unstructured.Unstructured, error) {
	f := factsOf(node)
	if !d.selects(node) || len(f.podCIDRs) == 0 {
		return nil, nil
	}
	hasIPv4 := false
	for _, c := range f.podCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("node %s has an invalid Pod CIDR %q: %w", node.Name, c, err)
		}
		hasIPv4 = hasIPv4 || p.Addr().Is4()
	}
	if !hasIPv4 {
		return nil, fmt.Errorf("node %s has no IPv4 Pod CIDR (%v): winnet's Windows data plane is IPv4", node.Name, f.podCIDRs)
	}
	spec := map[string]any{"podCIDRs": toAny(f.podCIDRs)}
	if f.nodeIPv4 != "" {
		spec["nodeIP"] = f.nodeIPv4
	}
	if len(d.ClusterCIDRs) > 0 {
		spec["clusterCIDRs"] = toAny(d.ClusterCIDRs)
	}
	if len(d.ServiceCIDRs) > 0 {
		spec["serviceCIDRs"] = toAny(d.ServiceCIDRs)
	}
	return applyObject("WindowsNodeNetwork", node, spec), nil
}

// applyObject builds a cluster-scoped object named after node, labelled as ours and owned by the
// Node so that the garbage collector removes it with the Node.
func applyObject(kind string, node *corev1.Node, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(networkv1alpha1.GroupVersion.String())
	u.SetKind(kind)
	u.SetName(node.Name)
	u.SetLabels(map[string]string{ManagedByLabel: ManagedByValue})
	u.SetOwnerReferences([]metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
	}})
	return u
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
