package podendpoint

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/wine"
)

// testAttachment records an attachment of sandbox at ip in s.
func testAttachment(t *testing.T, s *Store, sandbox, ip string) {
	t.Helper()
	a := &Attachment{
		SandboxID: sandbox, PodNamespace: "default", PodName: "p-" + sandbox, Netns: "/run/netns/x", IfName: "eth0",
		EndpointName: EndpointName(sandbox), IP: netip.MustParsePrefix(ip + "/24"), Gateway: netip.MustParseAddr("10.244.1.1"),
		MAC: "00:15:5d:00:00:01", OFPort: 7, Containers: []string{sandbox}, Created: time.Unix(1700000000, 0).UTC(),
	}
	if err := s.Put(a); err != nil {
		t.Fatal(err)
	}
}

// TestIncarnationsOfAnAddress: each attachment of an address gets the next number, kept across a
// restart; the numbers wrap below the first UDP Service zone.
func TestIncarnationsOfAnAddress(t *testing.T) {
	g := NewWithT(t)
	dir := wine.TempDir(t)
	store, err := OpenStore(filepath.Join(dir, "pods"))
	g.Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(dir, IncarnationsFileName)
	b, err := OpenIncarnations(path, store)
	g.Expect(err).NotTo(HaveOccurred())
	addr := netip.MustParseAddr("10.244.1.5")

	first, err := b.Assign("s1", addr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first).To(BeNumerically(">=", 1))
	g.Expect(first).To(BeNumerically("<=", pipeline.MaxIncarnation))
	again, err := b.Assign("s1", addr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(first), "a sandbox keeps its number (an ADD repeated)")
	testAttachment(t, store, "s1", "10.244.1.5")
	g.Expect(b.Forget("s1")).To(Succeed())
	onDisk, err := os.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(onDisk)).NotTo(ContainSubstring(`"s1"`), "a deleted Pod's sandbox leaves the file at once")
	second, err := b.Assign("s2", addr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(second).To(Equal(first%pipeline.MaxIncarnation+1), "the address's next number")
	g.Expect(store.Delete("s1")).To(Succeed())
	testAttachment(t, store, "s2", "10.244.1.5")

	reopened, err := OpenIncarnations(path, store)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reopened.Of("s2")).To(Equal(second), "a restarted agent installs the same number")
	g.Expect(reopened.Of("s1")).To(BeZero(), "a forgotten sandbox has none")
	g.Expect(store.Delete("s2")).To(Succeed())
	g.Expect(reopened.Forget("s2")).To(Succeed())
	third, err := reopened.Assign("s3", addr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(third).To(Equal(second%pipeline.MaxIncarnation+1), "the address goes on from its last number after a restart")

	// The numbers wrap from the largest to 1, never 0 and never a UDP Service zone.
	reopened.f.Addresses[addr] = pipeline.MaxIncarnation
	wrapped, err := reopened.Assign("s4", addr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(wrapped).To(Equal(uint16(1)))
	g.Expect(uint32(pipeline.MaxIncarnation)).To(BeNumerically("<", uint32(pipeline.ServiceUDPZoneFirst)))
}

// TestIncarnationsOfEarlierReleases: Pods attached by a release that kept no numbers (no file, or
// attachments the file does not know) get none, for the rest of their lives; new Pods do.
func TestIncarnationsOfEarlierReleases(t *testing.T) {
	g := NewWithT(t)
	dir := wine.TempDir(t)
	store, err := OpenStore(filepath.Join(dir, "pods"))
	g.Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(dir, IncarnationsFileName)

	testAttachment(t, store, "old", "10.244.1.5")
	b, err := OpenIncarnations(path, store)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Of("old")).To(BeZero(), "attached before incarnations: not checked")
	n, err := b.Assign("new", netip.MustParseAddr("10.244.1.6"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).NotTo(BeZero())
	testAttachment(t, store, "new", "10.244.1.6")

	b, err = OpenIncarnations(path, store)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Of("old")).To(BeZero(), "still none after a restart")
	g.Expect(b.Of("new")).To(Equal(n))

	// A release without numbers ran since (rolled back to, then upgraded from): it attached a Pod
	// the file does not know, and may have committed connections without numbers for every Pod.
	testAttachment(t, store, "during-rollback", "10.244.1.7")
	b, err = OpenIncarnations(path, store)
	g.Expect(err).NotTo(HaveOccurred())
	for _, s := range []string{"old", "new", "during-rollback"} {
		g.Expect(b.Of(s)).To(BeZero(), s)
	}
	next, err := b.Assign("after", netip.MustParseAddr("10.244.1.6"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(next).To(Equal(n%pipeline.MaxIncarnation+1), "addresses keep their numbers")

	// A file that cannot be trusted is reported and ignored.
	g.Expect(os.WriteFile(path, []byte(`{"version":1,"addresses":{"10.244.1.6":0},"sandboxes":{}}`), 0o600)).To(Succeed())
	b, err = OpenIncarnations(path, store)
	g.Expect(err).To(MatchError(ContainSubstring("has incarnation 0")))
	g.Expect(b.Of("new")).To(BeZero())
}

// TestRetirementRemovesIncarnations: the node's last DEL after a retirement (the agent's teardown
// on uninstall) removes the incarnations with the rest of the agent's state.
func TestRetirementRemovesIncarnations(t *testing.T) {
	if !slices.Contains(cni.StateSubdirs, IncarnationsFileName) {
		t.Fatalf("cni.StateSubdirs %v does not name %s", cni.StateSubdirs, IncarnationsFileName)
	}
}
