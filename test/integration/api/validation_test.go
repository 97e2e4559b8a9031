//go:build !windows

package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// invalidCase is an object the API server must reject, with the field and the message a user reads.
type invalidCase struct {
	name string
	// base builds a valid object with the given name.
	base func(name string) *unstructured.Unstructured
	// mutate makes it invalid (on create), or makes an invalid change (on update, when update is set).
	mutate func(*unstructured.Unstructured)
	update bool
	// field is the path the API server names; message is part of what it says about it.
	field, message string
}

func invalidCases() []invalidCase {
	wnn, rsr, pep, fi, pt, eg := validWNN, validRSR, validPEP, validFI, validPT, validEgress
	return []invalidCase{
		// WindowsNodeNetwork: schema.
		{name: "wnn without spec", base: wnn, mutate: del("spec"), field: "spec", message: "Required value"},
		{name: "wnn podCIDRs empty", base: wnn, mutate: set("spec.podCIDRs", []any{}), field: "spec.podCIDRs", message: "should have at least 1 items"},
		{name: "wnn three podCIDRs", base: wnn, mutate: set("spec.podCIDRs", []any{"10.244.1.0/24", "10.245.1.0/24", "fd00:10:244:1::/64"}), field: "spec.podCIDRs", message: "must have at most 2 items"},
		{name: "wnn podCIDR not a CIDR", base: wnn, mutate: set("spec.podCIDRs", []any{"10.244.1.0/33"}), field: "spec.podCIDRs[0]", message: "must be a CIDR such as 10.244.1.0/24"},
		{name: "wnn podCIDR with host bits", base: wnn, mutate: all(set("spec.podCIDRs", []any{"10.244.1.7/24"}), del("spec.gateway.ip")), field: "spec.podCIDRs[0]", message: "must be a CIDR in canonical form"},
		{name: "wnn podCIDRs duplicate", base: wnn, mutate: set("spec.podCIDRs", []any{"10.244.1.0/24", "10.244.1.0/24"}), field: "spec.podCIDRs[1]", message: "Duplicate value"},
		{name: "wnn two IPv4 podCIDRs", base: wnn, mutate: set("spec.podCIDRs", []any{"10.244.1.0/24", "10.244.2.0/24"}), field: "spec.podCIDRs", message: "at most one CIDR per IP family"},
		{name: "wnn only IPv6 podCIDR", base: wnn, mutate: all(set("spec.podCIDRs", []any{"fd00:10:244:1::/64"}), del("spec.gateway.ip"), del("spec.clusterCIDRs")), field: "spec.podCIDRs", message: "must include an IPv4 CIDR"},
		{name: "wnn nodeIP not an IP", base: wnn, mutate: set("spec.nodeIP", "192.168.10.300"), field: "spec.nodeIP", message: "must be an IPv4 address such as 10.0.0.4"},
		{name: "wnn nodeIP IPv6", base: wnn, mutate: set("spec.nodeIP", "fd00::11"), field: "spec.nodeIP", message: "must be an IPv4 address"},
		{name: "wnn nodeIP long IPv6", base: wnn, mutate: set("spec.nodeIP", "fd00:192:168:79::11"), field: "spec.nodeIP", message: "must be an IPv4 address"},
		{name: "wnn nodeIP inside podCIDR", base: wnn, mutate: set("spec.nodeIP", "10.244.1.7"), field: "spec.nodeIP", message: "not an address inside podCIDRs"},
		{name: "wnn uplink interface too long", base: wnn, mutate: set("spec.uplink.interface", strings.Repeat("e", 257)), field: "spec.uplink.interface", message: "may not be more than 256"},
		{name: "wnn uplink interface with newline", base: wnn, mutate: set("spec.uplink.interface", "Ethernet\n2"), field: "spec.uplink.interface", message: "must not contain control characters"},
		{name: "wnn hnsNetwork type L2Bridge", base: wnn, mutate: set("spec.hnsNetwork.type", "L2Bridge"), field: "spec.hnsNetwork.type", message: `supported values: "Transparent"`},
		{name: "wnn hnsNetwork name with space", base: wnn, mutate: set("spec.hnsNetwork.name", "win net"), field: "spec.hnsNetwork.name", message: "should match"},
		{name: "wnn bridge name too long", base: wnn, mutate: set("spec.bridge.name", "br-int-0123456789"), field: "spec.bridge.name", message: "may not be more than 15"},
		{name: "wnn bridge name with slash", base: wnn, mutate: set("spec.bridge.name", "br/int"), field: "spec.bridge.name", message: "should match"},
		{name: "wnn datapathType dpdk", base: wnn, mutate: set("spec.bridge.datapathType", "dpdk"), field: "spec.bridge.datapathType", message: `supported values: "system", "netdev"`},
		{name: "wnn gateway name starts with dash", base: wnn, mutate: set("spec.gateway.name", "-gw0"), field: "spec.gateway.name", message: "should match"},
		{name: "wnn gateway ip not an IP", base: wnn, mutate: set("spec.gateway.ip", "10.244.1.x"), field: "spec.gateway.ip", message: "must be an IPv4 address"},
		{name: "wnn gateway outside podCIDRs", base: wnn, mutate: set("spec.gateway.ip", "10.245.0.1"), field: "spec.gateway.ip", message: "gateway.ip must be inside one of podCIDRs"},
		{name: "wnn gateway is the network address", base: wnn, mutate: set("spec.gateway.ip", "10.244.1.0"), field: "spec.gateway.ip", message: "must not be the network address"},
		{name: "wnn mode VXLAN", base: wnn, mutate: set("spec.encapsulation.mode", "VXLAN"), field: "spec.encapsulation.mode", message: `supported values: "Encap", "NoEncap", "Hybrid"`},
		{name: "wnn tunnelType gre", base: wnn, mutate: set("spec.encapsulation.tunnelType", "gre"), field: "spec.encapsulation.tunnelType", message: `supported values: "vxlan", "geneve"`},
		{name: "wnn tunnelAdmission Loose", base: wnn, mutate: set("spec.encapsulation.tunnelAdmission", "Loose"), field: "spec.encapsulation.tunnelAdmission", message: `supported values: "Enforce", "Off"`},
		{name: "wnn vni 0", base: wnn, mutate: set("spec.encapsulation.vni", int64(0)), field: "spec.encapsulation.vni", message: "should be greater than or equal to 1"},
		{name: "wnn vni above 24 bits", base: wnn, mutate: set("spec.encapsulation.vni", int64(16777216)), field: "spec.encapsulation.vni", message: "should be less than or equal to 16777215"},
		{name: "wnn port 0", base: wnn, mutate: set("spec.encapsulation.port", int64(0)), field: "spec.encapsulation.port", message: "should be greater than or equal to 1"},
		{name: "wnn port 65536", base: wnn, mutate: set("spec.encapsulation.port", int64(65536)), field: "spec.encapsulation.port", message: "should be less than or equal to 65535"},
		{name: "wnn mtu 500", base: wnn, mutate: set("spec.encapsulation.mtu", int64(500)), field: "spec.encapsulation.mtu", message: "should be greater than or equal to 576"},
		{name: "wnn mtu 10000", base: wnn, mutate: set("spec.encapsulation.mtu", int64(10000)), field: "spec.encapsulation.mtu", message: "should be less than or equal to 9216"},
		{name: "wnn snat enabled not a boolean", base: wnn, mutate: set("spec.snat.enabled", "yes"), field: "spec.snat.enabled", message: "must be of type boolean"},
		{name: "wnn excludeCIDR not a CIDR", base: wnn, mutate: set("spec.snat.excludeCIDRs", []any{"172.16.0.0"}), field: "spec.snat.excludeCIDRs[0]", message: "must be a CIDR such as"},
		{name: "wnn 65 excludeCIDRs", base: wnn, mutate: set("spec.snat.excludeCIDRs", cidrs(65)), field: "spec.snat.excludeCIDRs", message: "must have at most 64 items"},
		{name: "wnn podCIDR outside clusterCIDRs", base: wnn, mutate: set("spec.clusterCIDRs", []any{"10.0.0.0/16"}), field: "spec.clusterCIDRs", message: "every entry of podCIDRs must lie inside one of clusterCIDRs"},
		{name: "wnn serviceCIDR overlaps podCIDRs", base: wnn, mutate: all(del("spec.clusterCIDRs"), set("spec.serviceCIDRs", []any{"10.244.0.0/16"})), field: "spec.serviceCIDRs", message: "serviceCIDRs must not overlap podCIDRs"},
		{name: "wnn serviceCIDR overlaps clusterCIDRs", base: wnn, mutate: set("spec.serviceCIDRs", []any{"10.244.128.0/20"}), field: "spec.serviceCIDRs", message: "serviceCIDRs must not overlap clusterCIDRs"},
		{name: "wnn vtepMAC upper-case", base: wnn, mutate: set("spec.encapsulation.vtepMAC", "0E:6A:5E:1B:23:9C"), field: "spec.encapsulation.vtepMAC", message: "lower-case colon notation"},
		{name: "wnn vtepMAC with dashes", base: wnn, mutate: set("spec.encapsulation.vtepMAC", "0e-6a-5e-1b-23-9c"), field: "spec.encapsulation.vtepMAC", message: "lower-case colon notation"},
		{name: "wnn vtepMAC multicast", base: wnn, mutate: set("spec.encapsulation.vtepMAC", "01:00:5e:00:00:01"), field: "spec.encapsulation.vtepMAC", message: "must be a unicast MAC address"},
		{name: "wnn vtepMAC empty", base: wnn, mutate: set("spec.encapsulation.vtepMAC", ""), field: "spec.encapsulation.vtepMAC", message: "should be at least 17 chars long"},
		// WindowsNodeNetwork: what cannot change without tearing the node down.
		{name: "wnn podCIDRs changed", base: wnn, update: true, mutate: all(set("spec.podCIDRs", []any{"10.244.9.0/24"}), del("spec.gateway.ip")), field: "spec.podCIDRs", message: "podCIDRs is immutable"},
		{name: "wnn bridge renamed", base: wnn, update: true, mutate: set("spec.bridge.name", "br-win"), field: "spec.bridge.name", message: "bridge.name is immutable"},
		{name: "wnn datapath changed", base: wnn, update: true, mutate: set("spec.bridge.datapathType", "netdev"), field: "spec.bridge.datapathType", message: "bridge.datapathType is immutable"},
		{name: "wnn HNS network renamed", base: wnn, update: true, mutate: set("spec.hnsNetwork.name", "other"), field: "spec.hnsNetwork.name", message: "hnsNetwork.name is immutable"},

		// RemoteSubnetRoute.
		{name: "rsr without nodeIP", base: rsr, mutate: del("spec.nodeIP"), field: "spec.nodeIP", message: "Required value"},
		{name: "rsr nodeIP not an IP", base: rsr, mutate: set("spec.nodeIP", "node-1"), field: "spec.nodeIP", message: "must be an IP address such as 10.0.0.4"},
		{name: "rsr without podCIDRs", base: rsr, mutate: del("spec.podCIDRs"), field: "spec.podCIDRs", message: "Required value"},
		{name: "rsr nine podCIDRs", base: rsr, mutate: all(set("spec.podCIDRs", cidrs(9)), del("spec.gatewayIP")), field: "spec.podCIDRs", message: "must have at most 8 items"},
		{name: "rsr overlapping podCIDRs", base: rsr, mutate: set("spec.podCIDRs", []any{"10.244.0.0/16", "10.244.3.0/24"}), field: "spec.podCIDRs", message: "podCIDRs must not overlap each other"},
		{name: "rsr gatewayIP outside podCIDRs", base: rsr, mutate: set("spec.gatewayIP", "10.244.4.1"), field: "spec.gatewayIP", message: "gatewayIP must be inside one of podCIDRs"},
		{name: "rsr nodeIP inside podCIDRs", base: rsr, mutate: set("spec.nodeIP", "10.244.3.9"), field: "spec.nodeIP", message: "not an address inside podCIDRs"},
		{name: "rsr mode Bridge", base: rsr, mutate: set("spec.mode", "Bridge"), field: "spec.mode", message: `supported values: "Auto", "Tunnel", "Route"`},
		{name: "rsr Route mode with vni", base: rsr, mutate: all(set("spec.mode", "Route"), del("spec.vtepMAC")), field: "spec.mode", message: "vni and vtepMAC apply to tunnelled traffic only"},
		{name: "rsr Route mode across IP families", base: rsr, mutate: all(set("spec.mode", "Route"), del("spec.vni"), del("spec.vtepMAC"), set("spec.nodeIP", "fd00::21")), field: "spec.nodeIP", message: "same IP family"},
		{name: "rsr vni 0", base: rsr, mutate: set("spec.vni", int64(0)), field: "spec.vni", message: "should be greater than or equal to 1"},
		{name: "rsr multicast vtepMAC", base: rsr, mutate: set("spec.vtepMAC", "01:00:5e:00:00:01"), field: "spec.vtepMAC", message: "must be a unicast MAC address"},
		{name: "rsr upper-case vtepMAC", base: rsr, mutate: set("spec.vtepMAC", "0E:6A:5E:1B:23:9C"), field: "spec.vtepMAC", message: "lower-case colon notation"},
		{name: "rsr nodeName not a Node name", base: rsr, mutate: set("spec.nodeName", "Node_1"), field: "spec.nodeName", message: "nodeName must be a Node name"},

		// FlannelInterop.
		{name: "fi not named default", base: fi, mutate: set("metadata.name", "flannel"), field: "<nil>", message: "metadata.name must be default"},
		{name: "fi vni 0", base: fi, mutate: set("spec.vni", int64(0)), field: "spec.vni", message: "should be greater than or equal to 1"},
		{name: "fi vni above 24 bits", base: fi, mutate: set("spec.vni", int64(16777216)), field: "spec.vni", message: "should be less than or equal to 16777215"},
		{name: "fi vni not a number", base: fi, mutate: set("spec.vni", "4096"), field: "spec.vni", message: "must be of type integer"},
		{name: "fi annotationPrefix with slash", base: fi, mutate: set("spec.annotationPrefix", "flannel.alpha.coreos.com/"), field: "spec.annotationPrefix", message: "annotationPrefix must be a DNS subdomain"},
		{name: "fi annotationPrefix upper-case", base: fi, mutate: set("spec.annotationPrefix", "Flannel.example.com"), field: "spec.annotationPrefix", message: "annotationPrefix must be a DNS subdomain"},
		{name: "fi annotationPrefix empty", base: fi, mutate: set("spec.annotationPrefix", ""), field: "spec.annotationPrefix", message: "should be at least 1 chars long"},
		{name: "fi annotationPrefix too long", base: fi, mutate: set("spec.annotationPrefix", strings.Repeat("a", 254)), field: "spec.annotationPrefix", message: "may not be more than 253"},
		{name: "fi vni changed to 0", base: fi, update: true, mutate: set("spec.vni", int64(0)), field: "spec.vni", message: "should be greater than or equal to 1"},

		// PodEndpoint.
		{name: "pep not named <node>.<Pod UID>", base: pep, mutate: set("spec.podUID", "other-uid"), field: "spec.podName", message: "metadata.name must be spec.nodeName + '.' + spec.podUID"},
		{name: "pep of an earlier agent renamed", base: legacyPEP, mutate: set("spec.podName", "other-pod"), field: "spec.podName", message: "metadata.name must be spec.nodeName + '.' + spec.podUID"},
		{name: "pep without ips", base: pep, mutate: del("spec.ips"), field: "spec.ips", message: "Required value"},
		{name: "pep ip without prefix length", base: pep, mutate: set("spec.ips", []any{"10.244.1.5"}), field: "spec.ips[0]", message: "must be an address with its prefix length"},
		{name: "pep two IPv4 addresses", base: pep, mutate: set("spec.ips", []any{"10.244.1.5/24", "10.244.1.6/24"}), field: "spec.ips", message: "at most one address per IP family"},
		{name: "pep mac not a MAC", base: pep, mutate: set("spec.mac", "02-42-0a-f4-01-05"), field: "spec.mac", message: "lower-case colon notation"},
		{name: "pep gateway outside the Pod subnet", base: pep, mutate: set("spec.gateway", "10.244.2.1"), field: "spec.gateway", message: "gateway must be inside the subnet of one of ips"},
		{name: "pep gateway is the Pod's address", base: pep, mutate: set("spec.gateway", "10.244.1.5"), field: "spec.gateway", message: "must not be one of the Pod's own addresses"},
		{name: "pep sandboxID with space", base: pep, mutate: set("spec.sandboxID", "abc def"), field: "spec.sandboxID", message: "should match"},
		{name: "pep without podUID", base: pep, mutate: del("spec.podUID"), field: "spec.podUID", message: "Required value"},
		{name: "pep moved to another node", base: pep, update: true, mutate: set("spec.nodeName", "win-node-2"), field: "spec.nodeName", message: "nodeName is immutable"},
		{name: "pep podUID changed", base: pep, update: true, mutate: set("spec.podUID", "0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6"), field: "spec.podUID", message: "podUID is immutable"},
		// PacketTrace.
		{name: "ptrace two destinations", base: pt, mutate: set("spec.destination.ip", "10.0.0.9"), field: "spec.destination", message: "set exactly one of destination.pod, destination.ip and destination.service"},
		{name: "ptrace no destination", base: pt, mutate: set("spec.destination", map[string]any{}), field: "spec.destination", message: "set exactly one of"},
		{name: "ptrace destination IPv6", base: pt, mutate: all(del("spec.destination.pod"), set("spec.destination.ip", "fd00::9")), field: "spec.destination.ip", message: "must be an IPv4 address"},
		{name: "ptrace destination long IPv6", base: pt, mutate: all(del("spec.destination.pod"), set("spec.destination.ip", "fd00:10:246:2::5")), field: "spec.destination.ip", message: "must be an IPv4 address"},
		{name: "ptrace TCP without port", base: pt, mutate: del("spec.packet.dstPort"), field: "spec.packet.dstPort", message: "packet.dstPort is required for TCP and UDP"},
		{name: "ptrace ICMP with port", base: pt, mutate: set("spec.packet.protocol", "ICMP"), field: "spec.packet.dstPort", message: "must not be set for ICMP"},
		{name: "ptrace SCTP", base: pt, mutate: set("spec.packet.protocol", "SCTP"), field: "spec.packet.protocol", message: `supported values: "TCP", "UDP", "ICMP"`},
		{name: "ptrace port 0", base: pt, mutate: set("spec.packet.dstPort", int64(70000)), field: "spec.packet.dstPort", message: "should be less than or equal to 65535"},
		{name: "ptrace timeout too long", base: pt, mutate: set("spec.timeoutSeconds", int64(3600)), field: "spec.timeoutSeconds", message: "should be less than or equal to 300"},
		{name: "ptrace source name too long", base: pt, mutate: set("spec.source.pod.name", strings.Repeat("a", 254)), field: "spec.source.pod.name", message: "may not be more than 253"},
		// Egress: what the API server can judge alone (what needs other objects, such as a node's
		// address or a Pod CIDR, is winnet-controller's IPConflict).
		{name: "egress without egressIP", base: eg, mutate: del("spec.egressIP"), field: "spec.egressIP", message: "Required value"},
		{name: "egress without podSelector", base: eg, mutate: del("spec.podSelector"), field: "spec.podSelector", message: "Required value"},
		{name: "egress with an empty namespaceSelector", base: eg, mutate: set("spec.namespaceSelector", map[string]any{}), field: "spec.namespaceSelector",
			message: "namespaceSelector must name at least one label or expression"},
		{name: "egress with empty namespaceSelector lists", base: eg, mutate: set("spec.namespaceSelector", map[string]any{"matchLabels": map[string]any{}, "matchExpressions": []any{}}),
			field: "spec.namespaceSelector", message: "namespaceSelector must name at least one label or expression"},
		{name: "egress egressIP malformed", base: eg, mutate: set("spec.egressIP", "192.168.10.300"), field: "spec.egressIP", message: "must be an IPv4 address such as 10.0.0.4"},
		{name: "egress egressIP IPv6", base: eg, mutate: set("spec.egressIP", "fd00::200"), field: "spec.egressIP", message: "must be an IPv4 address"},
		{name: "egress egressIP loopback", base: eg, mutate: set("spec.egressIP", "127.0.0.5"), field: "spec.egressIP", message: "must not be a loopback address"},
		{name: "egress egressIP unspecified", base: eg, mutate: set("spec.egressIP", "0.0.0.0"), field: "spec.egressIP", message: "must not be the unspecified address"},
		{name: "egress egressIP multicast", base: eg, mutate: set("spec.egressIP", "239.1.2.3"), field: "spec.egressIP", message: "must not be a multicast address"},
		{name: "egress egressIP link-local", base: eg, mutate: set("spec.egressIP", "169.254.0.252"), field: "spec.egressIP", message: "must not be a link-local address"},
		{name: "egress egressIP broadcast", base: eg, mutate: set("spec.egressIP", "255.255.255.255"), field: "spec.egressIP", message: "must not be the broadcast address"},
		{name: "egress unknown operator", base: eg, mutate: set("spec.namespaceSelector.matchExpressions", []any{map[string]any{"key": "team", "operator": "Equals", "values": []any{"x"}}}),
			field: "spec.namespaceSelector.matchExpressions[0].operator", message: `supported values: "In", "NotIn", "Exists", "DoesNotExist"`},
		{name: "egress In without values", base: eg, mutate: set("spec.namespaceSelector.matchExpressions", []any{map[string]any{"key": "team", "operator": "In"}}),
			field: "spec.namespaceSelector.matchExpressions", message: "the operators In and NotIn need at least one value"},
		{name: "egress Exists with values", base: eg, mutate: set("spec.podSelector.matchExpressions", []any{map[string]any{"key": "app", "operator": "Exists", "values": []any{"x"}}}),
			field: "spec.podSelector.matchExpressions", message: "Exists and DoesNotExist take none"},
		{name: "egress label key with space", base: eg, mutate: set("spec.podSelector.matchLabels", map[string]any{"my app": "billing"}),
			field: "spec.podSelector.matchLabels", message: "every key must be a label key"},
		{name: "egress label value with slash", base: eg, mutate: set("spec.nodeSelector.matchLabels", map[string]any{"egress": "a/b"}),
			field: "spec.nodeSelector.matchLabels[egress]", message: "must be a label value"},
		{name: "egress expression key with slash only", base: eg, mutate: set("spec.nodeSelector.matchExpressions", []any{map[string]any{"key": "/x", "operator": "Exists"}}),
			field: "spec.nodeSelector.matchExpressions[0].key", message: "must be a label key"},
		{name: "egress 17 matchLabels", base: eg, mutate: set("spec.podSelector.matchLabels", labels(17)), field: "spec.podSelector.matchLabels", message: "must have at most 16 items"},
		{name: "ptrace spec changed", base: pt, update: true, mutate: set("spec.packet.dstPort", int64(81)), field: "spec", message: "a PacketTrace's spec is immutable"},
	}
}

// TestInvalidObjectsAreRejected sends each invalid object (or invalid change) to the API server and
// asserts that it is refused with the field and the message a user would read.
func TestInvalidObjectsAreRejected(t *testing.T) {
	cases := invalidCases()
	if len(cases) < 40 {
		t.Fatalf("the table must prove at least 40 rules, has %d", len(cases))
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			obj := tc.base(fmt.Sprintf("invalid-%02d", i))
			if tc.update {
				g.Expect(server.Client.Create(ctx, obj)).To(Succeed(), "the valid base object must be accepted")
				t.Cleanup(func() { _ = server.Client.Delete(context.Background(), obj) })
			}
			tc.mutate(obj)
			var err error
			if tc.update {
				err = server.Client.Update(ctx, obj)
			} else {
				err = server.Client.Create(ctx, obj)
				if err == nil {
					_ = server.Client.Delete(ctx, obj)
				}
			}
			g.Expect(err).To(HaveOccurred(), "the API server accepted the object")
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid error, got %v", err)
			t.Logf("rejected: %v", err)
			g.Expect(causes(err)).To(ContainElement(SatisfyAll(
				HaveField("Field", tc.field),
				HaveField("Message", ContainSubstring(tc.message)),
			)), "the error must name %q and say %q", tc.field, tc.message)
			for _, c := range causes(err) {
				g.Expect(c.Message).NotTo(ContainSubstring("no such overload"), "a rule failed to evaluate instead of explaining")
				g.Expect(c.Message).NotTo(ContainSubstring("parse error"), "a rule failed to evaluate instead of explaining")
				g.Expect(c.Message).NotTo(ContainSubstring("evaluating rule"), "a rule failed to evaluate instead of explaining")
			}
		})
	}
}

// cause is one field error of an Invalid response.
type cause struct{ Field, Message string }

func causes(err error) []cause {
	var status *apierrors.StatusError
	if !errors.As(err, &status) || status.ErrStatus.Details == nil {
		return nil
	}
	var out []cause
	for _, c := range status.ErrStatus.Details.Causes {
		out = append(out, cause{Field: c.Field, Message: c.Message})
	}
	return out
}
