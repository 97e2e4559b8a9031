package egress

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// TestRecord: the egress IPs an agent added survive it in its state directory; no file is no IP;
// a file that is not a record (or is too open) is an error, never read as IPs.
func TestRecord(t *testing.T) {
	g := NewWithT(t)
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, RecordFileName)
	ips, err := loadRecord(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ips).To(BeEmpty())
	a, b := netip.MustParseAddr("192.168.1.200"), netip.MustParseAddr("192.168.1.100")
	g.Expect(saveRecord(path, []netip.Addr{a, b})).To(Succeed())
	ips, err = loadRecord(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ips).To(Equal([]netip.Addr{b, a}))
	g.Expect(os.WriteFile(path, []byte(`{"version":2,"ips":["10.0.0.1"]}`), 0o600)).To(Succeed())
	_, err = loadRecord(path)
	g.Expect(err).To(MatchError(ContainSubstring("not a record of egress IPs")))
	g.Expect(saveRecord(path, []netip.Addr{a})).To(Succeed())
	g.Expect(os.Chmod(path, 0o666)).To(Succeed())
	_, err = loadRecord(path)
	g.Expect(err).To(HaveOccurred(), "a record others may write is not trusted")
}
