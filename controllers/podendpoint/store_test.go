package podendpoint

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	"github.com/winnet-io/winnet/test/wine"
)

func TestEndpointName(t *testing.T) {
	g := NewWithT(t)
	name := EndpointName("0123456789abcdef")
	g.Expect(name).To(HaveLen(15), "a valid Linux interface name")
	g.Expect(endpointNamePattern.MatchString(name)).To(BeTrue())
	g.Expect(EndpointName("0123456789abcdef")).To(Equal(name), "stable")
	g.Expect(EndpointName("0123456789abcdeg")).NotTo(Equal(name))
	for _, other := range []string{"winnet-gw0", "winnet-tun0", "br-int", "uplink0"} {
		g.Expect(endpointNamePattern.MatchString(other)).To(BeFalse(), other)
	}
}

func TestStoreSurvivesRestart(t *testing.T) {
	g := NewWithT(t)
	dir := wine.TempDir(t)
	s, err := OpenStore(dir)
	g.Expect(err).NotTo(HaveOccurred())
	a := &Attachment{
		SandboxID: "s1", PodNamespace: "default", PodName: "web", Netns: "/run/netns/x", IfName: "eth0",
		EndpointName: EndpointName("s1"), IP: netip.MustParsePrefix("10.244.1.5/24"), Gateway: netip.MustParseAddr("10.244.1.1"),
		MAC: "00:15:5d:00:00:01", OFPort: 7, Containers: []string{"s1"}, Created: time.Unix(1700000000, 0).UTC(),
	}
	g.Expect(s.Put(a)).To(Succeed())
	b := *a
	b.SandboxID, b.Containers, b.EndpointName = "s2", []string{"s2"}, EndpointName("s2")
	g.Expect(s.Put(&b)).To(Succeed())

	reopened, err := OpenStore(dir)
	g.Expect(err).NotTo(HaveOccurred())
	got, ok := reopened.Get("s1")
	g.Expect(ok).To(BeTrue())
	g.Expect(got).To(Equal(a))
	g.Expect(reopened.ByPod(types.NamespacedName{Namespace: "default", Name: "web"})).To(HaveLen(2))

	g.Expect(reopened.Delete("s1")).To(Succeed())
	g.Expect(reopened.Delete("s1")).To(Succeed(), "forgetting twice is a no-op")
	g.Expect(reopened.List()).To(HaveLen(1))
	again, err := OpenStore(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.List()).To(ConsistOf(HaveField("SandboxID", "s2")))

	// Copies: changing what Get returned changes nothing stored.
	got, _ = again.Get("s2")
	got.Containers[0] = "changed"
	kept, _ := again.Get("s2")
	g.Expect(kept.Containers).To(Equal([]string{"s2"}))
}

// TestStoreSetsAsideUntrustedRecords: a record that is corrupt, too large, of another sandbox than
// its name, or owned by another user is moved aside (kept, never read again) and the store opens
// with the good records.
func TestStoreSetsAsideUntrustedRecords(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test chowns a file: run it as root")
	}
	g := NewWithT(t)
	dir := wine.TempDir(t)
	s, err := OpenStore(dir)
	g.Expect(err).NotTo(HaveOccurred())
	good := &Attachment{SandboxID: "good", PodNamespace: "default", PodName: "web", EndpointName: EndpointName("good"),
		IP: netip.MustParsePrefix("10.244.1.5/24"), Containers: []string{"good"}}
	g.Expect(s.Put(good)).To(Succeed())
	other := *good
	other.SandboxID = "other"
	otherJSON, err := json.Marshal(&other)
	g.Expect(err).NotTo(HaveOccurred())
	planted := map[string][]byte{
		"corrupt.json": []byte(`{"sandboxID":`),
		"large.json":   append([]byte(`{"sandboxID":"large","podName":"`), bytes.Repeat([]byte("x"), MaxAttachmentSize)...),
		"renamed.json": otherJSON,
		"unknown.json": []byte(`{"sandboxID":"unknown","remove":["/"]}`),
		"foreign.json": otherJSON,
	}
	for name, b := range planted {
		g.Expect(os.WriteFile(filepath.Join(dir, name), b, 0o600)).To(Succeed())
	}
	g.Expect(os.Chown(filepath.Join(dir, "foreign.json"), 65534, 65534)).To(Succeed())

	reopened, err := OpenStore(dir)
	g.Expect(err).NotTo(HaveOccurred(), "untrusted records never stop the agent")
	g.Expect(reopened.List()).To(ConsistOf(HaveField("SandboxID", "good")))
	aside := reopened.SetAside()
	g.Expect(aside).To(HaveLen(len(planted)))
	for _, a := range aside {
		g.Expect(a.Record).NotTo(BeAnExistingFile())
		g.Expect(a.Path).To(BeAnExistingFile(), "kept for a person to look at")
		g.Expect(a.Err).To(HaveOccurred())
	}
	again, err := OpenStore(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.SetAside()).To(BeEmpty(), "a record set aside is not read again")
}
