package podendpoint

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/hostport"
	"github.com/winnet-io/winnet/test/wine"
)

// TestRestoreHostPorts: a restarted agent claims again the recorded hostPorts of the sandboxes it
// has attachments for (with their Pod and address) and not those of a sandbox without one or being
// deleted; the attachment record itself carries no hostPort (an agent of 0.1.0 refuses unknown
// fields in it).
func TestRestoreHostPorts(t *testing.T) {
	g := NewWithT(t)
	state := wine.TempDir(t)
	store, err := OpenStore(filepath.Join(state, "pods"))
	g.Expect(err).NotTo(HaveOccurred())
	web := &Attachment{SandboxID: "web", PodNamespace: "default", PodName: "web", EndpointName: EndpointName("web"),
		IP: netip.MustParsePrefix("10.244.1.5/24"), Containers: []string{"web"}}
	gone := &Attachment{SandboxID: "gone", PodNamespace: "default", PodName: "gone", EndpointName: EndpointName("gone"),
		IP: netip.MustParsePrefix("10.244.1.6/24"), Containers: []string{"gone"}, Deleting: true}
	g.Expect(store.Put(web)).To(Succeed())
	g.Expect(store.Put(gone)).To(Succeed())
	records := hostport.Records{Dir: filepath.Join(state, hostport.DirName)}
	m := []hostport.Mapping{{HostIP: netip.IPv4Unspecified(), HostPort: 80, ContainerPort: 8080, Protocol: "TCP"}}
	for _, sandbox := range []string{"web", "gone", "orphan"} {
		g.Expect(records.Put(sandbox, m)).To(Succeed())
	}
	reg := hostport.NewRegistry()
	NewPods(Options{Store: store, HostPorts: reg, HostPortRecords: records})
	g.Expect(reg.List()).To(Equal([]hostport.Entry{{Sandbox: "web", Pod: web.Pod().String(), IP: netip.MustParseAddr("10.244.1.5"), Mappings: m}}))

	b, err := os.ReadFile(filepath.Join(state, "pods", "web.json"))
	g.Expect(err).NotTo(HaveOccurred())
	var fields map[string]any
	g.Expect(json.Unmarshal(b, &fields)).To(Succeed())
	g.Expect(fields).NotTo(Or(HaveKey("portMappings"), HaveKey("hostPorts"), HaveKey("mappings")), "no hostPort field in the attachment record")
}
