package service

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
)

// TestServiceNumbersKeptAcrossRestart: an agent that starts again takes back the group ids, cookie objects
// and UDP zones the previous one gave out, whatever order it meets the Services in, flushes none of the zones
// it takes back unless an endpoint of their port went meanwhile, and gives new keys numbers no kept key has.
// A file it cannot trust is ignored (the numbers are given out afresh).
func TestServiceNumbersKeptAcrossRestart(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), IDsFileName)
	dnsUDP := portKey{Namespace: "kube-system", Name: "kube-dns", PortName: "dns", Protocol: "UDP", Port: 53}
	dnsTCP := portKey{Namespace: "kube-system", Name: "kube-dns", PortName: "dns-tcp", Protocol: "TCP", Port: 53}
	web := portKey{Namespace: "app", Name: "web", Protocol: "TCP", Port: 80}
	api := portKey{Namespace: "default", Name: "kubernetes", PortName: "https", Protocol: "TCP", Port: 443}
	dnsName, webName := types.NamespacedName{Namespace: "kube-system", Name: "kube-dns"}, types.NamespacedName{Namespace: "app", Name: "web"}
	ep1, ep2 := netip.MustParseAddrPort("10.0.0.2:53"), netip.MustParseAddrPort("10.0.0.3:53")

	// The previous agent met the Services in this order.
	before := &Reconciler{IDsFile: file}
	before.loadIDs(ctx)
	ids := map[groupKey]uint32{}
	for _, k := range []groupKey{{port: dnsUDP}, {port: dnsTCP}, {port: web}, {port: web, external: true}, {port: api}} {
		ids[k] = before.groups.get(k)
	}
	objDNS, objWeb := before.objects.get(dnsName), before.objects.get(webName)
	zone := before.udp.zone(dnsUDP)
	before.udp.unflushed = nil // flushed before use, as reconcileAll does
	before.realised = map[types.NamespacedName]*realisedService{dnsName: {udp: map[portKey]udpPort{dnsUDP: {zone: zone, endpoints: []netip.AddrPort{ep1, ep2}}}}}
	before.saveIDs(ctx)
	g.Expect(before.groups.dirty || before.objects.dirty || before.udp.ids.dirty).To(BeFalse(), "written")
	info, err := os.Stat(file)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)), "the agent's own")

	// The next agent meets them in another order.
	after := &Reconciler{IDsFile: file}
	after.loadIDs(ctx)
	for _, k := range []groupKey{{port: api}, {port: web, external: true}, {port: web}, {port: dnsTCP}, {port: dnsUDP}} {
		g.Expect(after.groups.get(k)).To(Equal(ids[k]), "group of %+v", k)
	}
	g.Expect(after.objects.get(webName)).To(Equal(objWeb))
	g.Expect(after.objects.get(dnsName)).To(Equal(objDNS))
	g.Expect(after.udp.zone(dnsUDP)).To(Equal(zone))
	g.Expect(after.udp.unflushed).To(BeEmpty(), "a zone taken back is not flushed")
	g.Expect(after.groups.get(groupKey{port: portKey{Namespace: "app", Name: "new", Protocol: "TCP", Port: 8080}})).To(Equal(uint32(6)), "a new key gets a number no kept key has")

	// Its first pass: the DNS Service still has both endpoints, nothing to flush; had one gone while no
	// agent ran, its zone would be flushed.
	same := func(portKey) ([]netip.AddrPort, bool) { return []netip.AddrPort{ep2, ep1}, true }
	after.udp.carriedGone(same)
	g.Expect(after.udp.stale).To(BeEmpty())
	again := &Reconciler{IDsFile: file}
	again.loadIDs(ctx)
	again.udp.carriedGone(func(portKey) ([]netip.AddrPort, bool) { return []netip.AddrPort{ep1}, true })
	g.Expect(again.udp.stale).To(HaveKey(zone), "an endpoint went while no agent ran")

	// A file that gives a number twice is not trusted: the numbers are given out afresh.
	g.Expect(os.WriteFile(file, []byte(`{"version":1,"groups":[{"port":{"Name":"a"},"id":1},{"port":{"Name":"b"},"id":1}]}`), 0o600)).To(Succeed())
	fresh := &Reconciler{IDsFile: file}
	fresh.loadIDs(ctx)
	g.Expect(fresh.groups.get(groupKey{port: api})).To(Equal(uint32(1)))
	// Nor a link: another user could point it anywhere.
	g.Expect(os.Remove(file)).To(Succeed())
	g.Expect(os.Symlink("/etc/hostname", file)).To(Succeed())
	_, err = readIDsFile(file)
	g.Expect(err).To(HaveOccurred())
}
