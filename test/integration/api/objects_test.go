//go:build !windows

package api

import (
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// The objects of the validation table are unstructured so that a case can send what a typed client
// never would: zero values, wrong types, missing required fields.

func newObject(kind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(networkv1alpha1.GroupVersion.String())
	u.SetKind(kind)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// validWNN is a valid WindowsNodeNetwork with every field that has a rule set.
func validWNN(name string) *unstructured.Unstructured {
	return newObject("WindowsNodeNetwork", "", name, map[string]any{
		"podCIDRs":      []any{"10.244.1.0/24"},
		"nodeIP":        "192.168.10.11",
		"uplink":        map[string]any{"interface": "Ethernet 2"},
		"hnsNetwork":    map[string]any{"name": "winnet", "type": "Transparent"},
		"bridge":        map[string]any{"name": "br-int", "datapathType": "system"},
		"gateway":       map[string]any{"name": "winnet-gw0", "ip": "10.244.1.1"},
		"encapsulation": map[string]any{"mode": "Encap", "tunnelType": "vxlan", "vni": int64(4096), "port": int64(4789), "mtu": int64(1450)},
		"snat":          map[string]any{"enabled": true, "excludeCIDRs": []any{"172.16.0.0/12"}},
		"clusterCIDRs":  []any{"10.244.0.0/16"},
		"serviceCIDRs":  []any{"10.96.0.0/12"},
	})
}

// validRSR is a valid RemoteSubnetRoute.
func validRSR(name string) *unstructured.Unstructured {
	return newObject("RemoteSubnetRoute", "", name, map[string]any{
		"nodeName":  "linux-node-1",
		"podCIDRs":  []any{"10.244.3.0/24"},
		"nodeIP":    "192.168.10.21",
		"gatewayIP": "10.244.3.1",
		"mode":      "Tunnel",
		"vni":       int64(4096),
		"vtepMAC":   "0e:6a:5e:1b:23:9c",
	})
}

// validEgress is a valid Egress with every selector field set.
func validEgress(name string) *unstructured.Unstructured {
	return newObject("Egress", "", name, map[string]any{
		"podSelector": map[string]any{"matchLabels": map[string]any{"app": "billing"}},
		"namespaceSelector": map[string]any{"matchExpressions": []any{
			map[string]any{"key": "team", "operator": "In", "values": []any{"finance"}},
		}},
		"egressIP":     "192.168.10.200",
		"nodeSelector": map[string]any{"matchLabels": map[string]any{"egress": "true"}},
	})
}

// legacyPEP is a valid PodEndpoint named after its Pod, as agents named them before "<node>.<Pod UID>".
func legacyPEP(name string) *unstructured.Unstructured {
	pep := validPEP(name)
	pep.SetName(name)
	if err := unstructured.SetNestedField(pep.Object, name, "spec", "podName"); err != nil {
		panic(err)
	}
	return pep
}

// validFI is a valid FlannelInterop. It is always named default (the only name the API server accepts),
// whatever name the table gives.
func validFI(string) *unstructured.Unstructured {
	return newObject("FlannelInterop", "", networkv1alpha1.FlannelInteropName, map[string]any{
		"vni":              int64(4096),
		"annotationPrefix": "flannel.alpha.coreos.com",
	})
}

// validPT is a valid PacketTrace: a TCP SYN from one Pod to another.
func validPT(name string) *unstructured.Unstructured {
	return newObject("PacketTrace", "default", name, map[string]any{
		"source":      map[string]any{"pod": map[string]any{"name": "a"}},
		"destination": map[string]any{"pod": map[string]any{"name": "b"}},
		"packet":      map[string]any{"protocol": "TCP", "dstPort": int64(80)},
	})
}

// validPEP is a valid PodEndpoint, named as agents name them: "<node>.<Pod UID>" (the table's name
// stands in for the UID).
func validPEP(name string) *unstructured.Unstructured {
	return newObject("PodEndpoint", "default", "win-node-1."+name, map[string]any{
		"podName":       "web",
		"podUID":        name,
		"nodeName":      "win-node-1",
		"sandboxID":     "4b9d2f0c7e1a3b5d",
		"interfaceName": "eth0",
		"ips":           []any{"10.244.1.5/24"},
		"mac":           "02:42:0a:f4:01:05",
		"gateway":       "10.244.1.1",
	})
}

// set returns a mutation that sets the dotted path (below the object root) to v.
func set(path string, v any) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		if err := unstructured.SetNestedField(u.Object, v, strings.Split(path, ".")...); err != nil {
			panic(err)
		}
	}
}

// del returns a mutation that removes the dotted path.
func del(path string) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		unstructured.RemoveNestedField(u.Object, strings.Split(path, ".")...)
	}
}

// all combines mutations.
func all(ms ...func(*unstructured.Unstructured)) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		for _, m := range ms {
			m(u)
		}
	}
}

// cidrs returns n distinct /24 CIDRs as a list.
func cidrs(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = "172.30." + strconv.Itoa(i) + ".0/24"
	}
	return out
}

// labels returns n distinct matchLabels entries.
func labels(n int) map[string]any {
	out := make(map[string]any, n)
	for i := range n {
		out["key-"+strconv.Itoa(i)] = "v"
	}
	return out
}
