package cluster

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/vtep"
)

// Flannel interop: winnet nodes join a cluster whose Linux nodes run stock flanneld (VXLAN backend, kube
// subnet manager). flanneld learns its peers from annotations on their Node objects and writes its own;
// while the FlannelInterop named default exists, winnet-controller writes the record of every winnet node
// and turns every flanneld node's record into its RemoteSubnetRoute. See docs/flannel.md.
const (
	// DefaultFlannelAnnotationPrefix is flanneld's default --kube-annotation-prefix.
	DefaultFlannelAnnotationPrefix = networkv1alpha1.DefaultFlannelAnnotationPrefix
	// DefaultFlannelVNI is the VNI flannel's Windows support requires (sig-windows-tools' kube-flannel).
	DefaultFlannelVNI = 4096
	// FlannelRecordAnnotation marks the Nodes whose flannel record winnet-controller wrote, and holds the
	// annotation prefix it wrote it under: it withdraws only those records (under that prefix, even after
	// the prefix changed), and never mistakes them for flanneld nodes.
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

// FlannelInterop is winnet-controller's interop with flannel as the FlannelInterop object sets it (the API
// server validated it).
type FlannelInterop struct {
	// Enabled turns it on (the FlannelInterop exists): winnet nodes get a flannel record and flanneld nodes a
	// RemoteSubnetRoute. Turned off, winnet-controller withdraws the records it wrote and deletes those routes.
	Enabled bool
	// VNI is the flannel network's VNI (spec.vni).
	VNI uint32
	// AnnotationPrefix is flanneld's --kube-annotation-prefix; empty means DefaultFlannelAnnotationPrefix.
	AnnotationPrefix string
}

// flannelInteropFrom is the interop the FlannelInterop obj turns on; nil obj means off.
func flannelInteropFrom(obj *networkv1alpha1.FlannelInterop) FlannelInterop {
	if obj == nil {
		return FlannelInterop{}
	}
	f := FlannelInterop{Enabled: true, VNI: uint32(obj.Spec.VNI), AnnotationPrefix: obj.Spec.AnnotationPrefix}
	if f.VNI == 0 {
		f.VNI = DefaultFlannelVNI // the API server defaults it; an object written before the default had none
	}
	return f
}

func (f FlannelInterop) prefix() string {
	if f.AnnotationPrefix == "" {
		return DefaultFlannelAnnotationPrefix
	}
	return f.AnnotationPrefix
}

func (f FlannelInterop) key(k string) string { return f.prefix() + "/" + k }

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
		ip = factsOf(node).nodeIPv4
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
		FlannelRecordAnnotation:         f.prefix(),
	}
}

// flannelRecordKeys are the annotations a record written under prefix consists of, for its withdrawal.
func flannelRecordKeys(prefix string) []string {
	var out []string
	for _, k := range []string{flannelKubeSubnetManager, flannelBackendType, flannelBackendData, flannelPublicIP} {
		out = append(out, prefix+"/"+k)
	}
	return append(out, FlannelRecordAnnotation)
}

// RecordPrefix is the annotation prefix of the flannel record winnet-controller wrote on a Node with these
// annotations, or "" when it wrote none. Records of winnet before the prefix was recorded say "true".
func RecordPrefix(annotations map[string]string) string {
	switch p := annotations[FlannelRecordAnnotation]; p {
	case "":
		return ""
	case "true":
		return DefaultFlannelAnnotationPrefix
	default:
		return p
	}
}

// recordPatch is the merge patch that makes the node's annotations hold want (nil: withdraw the record winnet
// wrote), or nil when they already do. The whole record goes in one patch: flanneld ignores a node whose
// kube-subnet-manager arrives after its data (it reacts only to changes of the data keys), and a record
// changed key by key would show peers a half-written lease. A record written under another prefix is
// withdrawn in the same patch.
func (f FlannelInterop) recordPatch(node *corev1.Node, want map[string]string) []byte {
	a := node.Annotations
	changes := map[string]any{}
	if old := RecordPrefix(a); old != "" && (want == nil || old != f.prefix()) {
		for _, k := range flannelRecordKeys(old) {
			if _, ok := a[k]; ok {
				changes[k] = nil
			}
		}
	}
	for k, v := range want {
		if cur, ok := a[k]; !ok || cur != v {
			changes[k] = v
		}
	}
	if len(changes) == 0 {
		return nil
	}
	for k, v := range want {
		changes[k] = v // the whole record, not only what changed
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": changes}})
	return b
}
