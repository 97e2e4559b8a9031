package cluster

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/vtep"
)

// Flannel interop: winnet nodes join a cluster whose Linux nodes run stock flanneld (VXLAN backend, kube
// subnet manager). flanneld learns its peers from annotations on their Node objects and writes its own;
// winnet-controller writes the record of every winnet node and turns every flanneld node's record into its
// RemoteSubnetRoute. See the README's "Joining a flannel cluster".
const (
	// DefaultFlannelAnnotationPrefix is flanneld's default --kube-annotation-prefix.
	DefaultFlannelAnnotationPrefix = "flannel.alpha.coreos.com"
	// DefaultFlannelVNI is the VNI flannel's Windows support requires (sig-windows-tools' kube-flannel).
	DefaultFlannelVNI = 4096
	// FlannelRecordAnnotation marks the Nodes whose flannel record winnet-controller wrote: it withdraws
	// only those, and never mistakes them for flanneld nodes.
	FlannelRecordAnnotation = "network.winnet.io/flannel-record"
	// flannelMinWindowsVNI is the lowest VNI flannel's Windows nodes accept: HNS refuses smaller VSIDs, and
	// flanneld on Windows skips leases below it (pkg/backend/vxlan/vxlan_network_windows.go).
	flannelMinWindowsVNI = 4096
)

// Keys of the flannel record, after the prefix.
const (
	flannelKubeSubnetManager = "kube-subnet-manager"
	flannelBackendType       = "backend-type"
	flannelBackendData       = "backend-data"
	flannelPublicIP          = "public-ip"
)

// FlannelInterop configures winnet-controller's interop with flannel.
type FlannelInterop struct {
	// Enabled turns it on: winnet nodes get a flannel record and flanneld nodes a RemoteSubnetRoute.
	// Turned off, winnet-controller withdraws the records it wrote and deletes those routes.
	Enabled bool
	// VNI is the flannel network's VNI (flanneld's Backend.VNI): the VNI winnet nodes publish and use to and
	// from flanneld nodes. flanneld on Linux puts its own device's VNI on everything it sends and ignores
	// the VNI its peers publish, so every node of the network must use this one.
	VNI uint32
	// AnnotationPrefix is flanneld's --kube-annotation-prefix; empty means DefaultFlannelAnnotationPrefix.
	AnnotationPrefix string
}

// Validate checks the configuration.
func (f FlannelInterop) Validate() error {
	if !f.Enabled {
		return nil
	}
	if f.VNI < 1 || f.VNI > 1<<24-1 {
		return fmt.Errorf("flannel VNI %d is out of range: a VXLAN VNI is 1 to 16777215 (flannel's Windows nodes need 4096 or more)", f.VNI)
	}
	if p := f.AnnotationPrefix; p != "" && (strings.ContainsAny(p, "/ ") || len(p) > 253) {
		return fmt.Errorf("flannel annotation prefix %q must be a DNS subdomain such as %s", p, DefaultFlannelAnnotationPrefix)
	}
	return nil
}

func (f FlannelInterop) key(k string) string {
	p := f.AnnotationPrefix
	if p == "" {
		p = DefaultFlannelAnnotationPrefix
	}
	return p + "/" + k
}

// flannelLease is what flanneld publishes about a node (pkg/subnet/kube/kube.go nodeToLease).
type flannelLease struct {
	publicIP netip.Addr
	vtepMAC  net.HardwareAddr
	vni      uint32
}

// flannelBackendDataJSON is flannel's VXLAN backend-data. Keys are matched case-insensitively, as
// encoding/json does and flanneld does.
type flannelBackendDataJSON struct {
	VNI     uint32
	VtepMAC string
}

// flanneldLease returns the lease flanneld published on a node that winnet does not run; ok is false for a
// node without one (flanneld skips a node unless kube-subnet-manager is "true"), err says why a record
// flanneld would publish cannot be used.
func (f FlannelInterop) flanneldLease(node *corev1.Node) (lease flannelLease, ok bool, err error) {
	a := node.Annotations
	if a[f.key(flannelKubeSubnetManager)] != "true" || a[FlannelRecordAnnotation] != "" {
		return flannelLease{}, false, nil
	}
	if t := a[f.key(flannelBackendType)]; t != "vxlan" {
		return flannelLease{}, true, fmt.Errorf("its flannel backend is %q: winnet joins flannel's vxlan backend only", t)
	}
	var bd flannelBackendDataJSON
	if err := json.Unmarshal([]byte(a[f.key(flannelBackendData)]), &bd); err != nil {
		return flannelLease{}, true, fmt.Errorf("its flannel backend-data %q is not flannel's VXLAN JSON: %w", a[f.key(flannelBackendData)], err)
	}
	mac, err := net.ParseMAC(bd.VtepMAC)
	if err != nil || len(mac) != 6 {
		// flannel's Windows nodes publish "VtepMAC":"" until their HNS network exists.
		return flannelLease{}, true, fmt.Errorf("its flannel VtepMAC %q is not a MAC address (yet)", bd.VtepMAC)
	}
	ip, err := netip.ParseAddr(a[f.key(flannelPublicIP)])
	if err != nil || !ip.Is4() {
		return flannelLease{}, true, fmt.Errorf("its flannel public-ip %q is not an IPv4 address", a[f.key(flannelPublicIP)])
	}
	return flannelLease{publicIP: ip, vtepMAC: mac, vni: bd.VNI}, true, nil
}

// flannelRoute is the RemoteSubnetRoute to a flanneld node: its Pod CIDRs through a tunnel to its
// public-ip, with flannel's VNI and the node's VtepMAC as the inner destination MAC (flannel's device
// drops frames for any other MAC); nil when the node has no Pod CIDR.
func (f FlannelInterop) flannelRoute(node *corev1.Node, lease flannelLease) *unstructured.Unstructured {
	cidrs := factsOf(node).podCIDRs
	if len(cidrs) == 0 {
		return nil
	}
	return applyObject("RemoteSubnetRoute", node, map[string]any{
		"nodeName": node.Name,
		"podCIDRs": toAny(cidrs),
		"nodeIP":   lease.publicIP.String(),
		"mode":     string(networkv1alpha1.RouteModeTunnel),
		"vni":      int64(f.VNI),
		"vtepMAC":  lease.vtepMAC.String(),
	})
}

// flannelRecord is the flannel record of a winnet node, as flanneld's AcquireLease writes its own:
// kube-subnet-manager, backend-type vxlan, backend-data {"VNI":..,"VtepMAC":..} in flannel's canonical form
// (third-party parsers split it as text), public-ip = the node's tunnel source. nil when the node has no
// address yet.
func (f FlannelInterop) flannelRecord(node *corev1.Node, wnn *networkv1alpha1.WindowsNodeNetwork) map[string]string {
	ip := string(wnn.Spec.NodeIP)
	if ip == "" {
		ip = factsOf(node).nodeIP
	}
	if ip == "" || len(factsOf(node).podCIDRs) == 0 {
		return nil
	}
	mac := vtep.MAC(node.Name, wnn.Spec.Encapsulation)
	return map[string]string{
		f.key(flannelKubeSubnetManager): "true",
		f.key(flannelBackendType):       "vxlan",
		f.key(flannelBackendData):       fmt.Sprintf(`{"VNI":%d,"VtepMAC":"%s"}`, f.VNI, mac),
		f.key(flannelPublicIP):          ip,
		FlannelRecordAnnotation:         "true",
	}
}

// flannelRecordKeys are the annotations a record consists of, for its withdrawal.
func (f FlannelInterop) flannelRecordKeys() []string {
	return []string{f.key(flannelKubeSubnetManager), f.key(flannelBackendType), f.key(flannelBackendData), f.key(flannelPublicIP),
		FlannelRecordAnnotation}
}

// recordPatch is the merge patch that makes the node's annotations hold want (nil: withdraw the record winnet
// wrote), or nil when they already do. The whole record goes in one patch: flanneld ignores a node whose
// kube-subnet-manager arrives after its data (it reacts only to changes of the data keys), and a record
// changed key by key would show peers a half-written lease.
func (f FlannelInterop) recordPatch(node *corev1.Node, want map[string]string) []byte {
	a := node.Annotations
	changes := map[string]any{}
	if want == nil {
		if a[FlannelRecordAnnotation] == "" {
			return nil
		}
		for _, k := range f.flannelRecordKeys() {
			if _, ok := a[k]; ok {
				changes[k] = nil
			}
		}
	} else {
		same := true
		for k, v := range want {
			if cur, ok := a[k]; !ok || cur != v {
				same = false
			}
		}
		if same {
			return nil
		}
		for k, v := range want {
			changes[k] = v
		}
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": changes}})
	return b
}
