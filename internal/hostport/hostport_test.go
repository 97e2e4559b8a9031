package hostport

import (
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	. "github.com/onsi/gomega"
)

func TestParse(t *testing.T) {
	g := NewWithT(t)
	got, err := Parse([]PortMapping{
		{HostPort: 80, ContainerPort: 8080, Protocol: "tcp"},
		{HostPort: 80, ContainerPort: 8080, Protocol: "tcp"}, // the same entry twice is one
		{HostPort: 53, ContainerPort: 53, Protocol: "UDP", HostIP: "192.168.1.10"},
		{HostPort: 81, ContainerPort: 81, HostIP: "::"},
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal([]Mapping{
		{HostIP: netip.IPv4Unspecified(), HostPort: 80, ContainerPort: 8080, Protocol: "TCP"},
		{HostIP: netip.MustParseAddr("192.168.1.10"), HostPort: 53, ContainerPort: 53, Protocol: "UDP"},
		{HostIP: netip.IPv4Unspecified(), HostPort: 81, ContainerPort: 81, Protocol: "TCP"},
	}))
	for _, c := range []struct {
		pm   []PortMapping
		want string
	}{
		{[]PortMapping{{HostPort: 0, ContainerPort: 80}}, "portMappings[0] (hostPort 0, containerPort 80"},
		{[]PortMapping{{HostPort: 80, ContainerPort: 80}, {HostPort: 65536, ContainerPort: 80}}, "portMappings[1]"},
		{[]PortMapping{{HostPort: 80, ContainerPort: -1}}, "containerPort -1 is out of range"},
		{[]PortMapping{{HostPort: 80, ContainerPort: 80, Protocol: "sctp"}}, "SCTP is not supported"},
		{[]PortMapping{{HostPort: 80, ContainerPort: 80, Protocol: "quic"}}, `unknown protocol "quic"`},
		{[]PortMapping{{HostPort: 80, ContainerPort: 80, HostIP: "fe80::1"}}, "not an IPv4 address"},
		{[]PortMapping{{HostPort: 80, ContainerPort: 80, HostIP: "node"}}, `hostIP "node" is not an IP address`},
		{[]PortMapping{{HostPort: 80, ContainerPort: 80, HostIP: "127.0.0.1"}}, "hostIP 127.0.0.1 is a loopback address"},
		{[]PortMapping{{HostPort: 80, ContainerPort: 80}, {HostPort: 80, ContainerPort: 81, HostIP: "10.0.0.1"}}, "claim the same host port"},
	} {
		_, err := Parse(c.pm)
		g.Expect(err).To(HaveOccurred(), "%v", c.pm)
		cerr, ok := err.(*types.Error)
		g.Expect(ok).To(BeTrue())
		g.Expect(cerr.Code).To(Equal(uint(types.ErrInvalidNetworkConfig)))
		g.Expect(cerr.Msg).To(ContainSubstring(c.want))
	}
	g.Expect(CheckHostIPs(got, []netip.Addr{netip.MustParseAddr("192.168.1.10")})).To(Succeed())
	g.Expect(CheckHostIPs(got, []netip.Addr{netip.MustParseAddr("192.168.1.11")})).To(MatchError(ContainSubstring("hostIP 192.168.1.10 of 192.168.1.10:53/UDP->53 is not one of the node's addresses (192.168.1.11)")))
}

func TestRegistry(t *testing.T) {
	g := NewWithT(t)
	r := NewRegistry(Reserved{Protocol: "TCP", Port: 8081, What: "winnet-agent's health probes"})
	changes := r.Subscribe()
	web := "ns/web"
	any80 := Mapping{HostIP: netip.IPv4Unspecified(), HostPort: 80, ContainerPort: 80, Protocol: "TCP"}
	g.Expect(r.Claim(Entry{Sandbox: "s1", Pod: web, IP: netip.MustParseAddr("10.244.1.5"), Mappings: []Mapping{any80}})).To(Succeed())
	g.Expect(changes).To(Receive())
	one80 := Mapping{HostIP: netip.MustParseAddr("192.168.1.10"), HostPort: 80, ContainerPort: 80, Protocol: "TCP"}
	err := r.Claim(Entry{Sandbox: "s2", Pod: "ns/other", Mappings: []Mapping{one80}})
	g.Expect(err).To(MatchError(ContainSubstring("hostPort 192.168.1.10:80/TCP->80 of Pod ns/other conflicts with 0.0.0.0:80/TCP->80 of Pod ns/web on this node")))
	g.Expect(err.(*types.Error).Code).To(Equal(ErrConflict))
	err = r.Claim(Entry{Sandbox: "s2", Pod: "tenant/other", Mappings: []Mapping{one80}})
	g.Expect(err).To(MatchError(ContainSubstring("conflicts with 0.0.0.0:80/TCP->80 of a Pod of another namespace on this node")))
	g.Expect(err.Error()).NotTo(ContainSubstring("ns/web"), "a Pod's error names no Pod of another namespace")
	g.Expect(r.Claim(Entry{Sandbox: "s2", Mappings: []Mapping{{HostIP: netip.IPv4Unspecified(), HostPort: 80, ContainerPort: 80, Protocol: "UDP"}}})).To(Succeed(), "another protocol")
	g.Expect(r.Claim(Entry{Sandbox: "s1", Pod: web, IP: netip.MustParseAddr("10.244.1.5"), Mappings: []Mapping{any80}})).To(Succeed(), "a sandbox's own claim again")
	g.Expect(r.Claim(Entry{Sandbox: "s3", Mappings: []Mapping{{HostIP: netip.IPv4Unspecified(), HostPort: 8081, ContainerPort: 80, Protocol: "TCP"}}})).
		To(MatchError(ContainSubstring("reserved on this node for winnet-agent's health probes")))
	g.Expect(r.Claim(Entry{Sandbox: "s3", Mappings: []Mapping{{HostIP: netip.IPv4Unspecified(), HostPort: 9000, ContainerPort: 80, Protocol: "UDP"}}},
		Reserved{Protocol: "UDP", Port: 9000, What: "the node's tunnel"})).To(MatchError(ContainSubstring("the node's tunnel")))
	g.Expect(r.List()).To(HaveLen(1), "only attached sandboxes (with an address) are listed")
	r.Release("s1")
	r.Release("s1")
	g.Expect(r.List()).To(BeEmpty())
	g.Expect(r.Claim(Entry{Sandbox: "s4", Mappings: []Mapping{one80}})).To(Succeed(), "released ports are free")
}

// TestRegistryNodePortsWin: a Service's NodePort refuses an ADD's claim on its port and protocol
// (naming the Service only to its own namespace), while a restored claim is kept (HeldBy tells it
// is not served); the port is free again once the Service gives it back.
func TestRegistryNodePortsWin(t *testing.T) {
	g := NewWithT(t)
	r := NewRegistry()
	r.ReplaceNodePorts(map[string][]Port{"shop/web": {{"TCP", 30080}}, "shop/dns": {{"UDP", 30053}}})
	m := Mapping{HostIP: netip.IPv4Unspecified(), HostPort: 30080, ContainerPort: 80, Protocol: "TCP"}
	err := r.Claim(Entry{Sandbox: "s1", Pod: "tenant/grab", Mappings: []Mapping{m}})
	g.Expect(err).To(MatchError(ContainSubstring("hostPort 0.0.0.0:30080/TCP->80 of Pod tenant/grab is NodePort 30080/TCP of a Service of another namespace, and a Service's NodePort wins over a hostPort")))
	g.Expect(err.(*types.Error).Code).To(Equal(ErrConflict))
	g.Expect(err.Error()).NotTo(ContainSubstring("shop/web"))
	g.Expect(r.Claim(Entry{Sandbox: "s1", Pod: "shop/grab", Mappings: []Mapping{m}})).
		To(MatchError(ContainSubstring("is NodePort 30080/TCP of Service shop/web")), "its own namespace's Service is named")
	g.Expect(r.Claim(Entry{Sandbox: "s1", Pod: "tenant/grab", Mappings: []Mapping{{HostIP: netip.IPv4Unspecified(), HostPort: 30080, ContainerPort: 80, Protocol: "UDP"}}})).
		To(Succeed(), "another protocol")
	g.Expect(r.Restore(Entry{Sandbox: "s2", Pod: "tenant/old", IP: netip.MustParseAddr("10.244.1.5"), Mappings: []Mapping{m}})).To(Succeed())
	g.Expect(r.HeldBy(m)).To(Equal([]string{"shop/web"}))
	r.ReplaceNodePorts(map[string][]Port{"shop/dns": {{"UDP", 30053}}})
	g.Expect(r.HeldBy(m)).To(BeEmpty())
	r.Release("s2")
	g.Expect(r.Claim(Entry{Sandbox: "s3", Pod: "tenant/grab", Mappings: []Mapping{m}})).To(Succeed(), "the port given back is free")
}

func TestRecords(t *testing.T) {
	g := NewWithT(t)
	s := Records{Dir: filepath.Join(t.TempDir(), DirName)}
	got, bad, err := s.Load()
	g.Expect(err).NotTo(HaveOccurred(), "no directory yet")
	g.Expect(got).To(BeEmpty())
	g.Expect(bad).To(BeEmpty())
	m := []Mapping{{HostIP: netip.MustParseAddr("192.168.1.10"), HostPort: 80, ContainerPort: 8080, Protocol: "TCP"}}
	g.Expect(s.Put("sandbox1", m)).To(Succeed())
	g.Expect(s.Put("sandbox2", nil)).To(Succeed())
	got, bad, err = s.Load()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bad).To(BeEmpty())
	g.Expect(got).To(Equal(map[string][]Mapping{"sandbox1": m}))
	g.Expect(s.Delete("sandbox1")).To(Succeed())
	g.Expect(s.Delete("sandbox1")).To(Succeed())
	got, _, _ = s.Load()
	g.Expect(got).To(BeEmpty())
}
