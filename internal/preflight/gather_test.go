package preflight

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/test/wine"
)

// TestGatherContainerd reads the CNI directories of containerd 1.x (config version 2) and 2.x
// (version 3, bin_dirs) configurations; one without a cni section keeps containerd's defaults.
func TestGatherContainerd(t *testing.T) {
	g := NewWithT(t)
	dir := wine.TempDir(t)
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		g.Expect(os.WriteFile(p, []byte(text), 0o600)).To(Succeed())
		return p
	}
	v2 := write("v2.toml", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = \"c:/opt/cni/bin\"\n  conf_dir = \"c:/etc/cni/net.d\"\n")
	f := gatherContainerd(Options{ContainerdConfig: v2})
	g.Expect(f.Err).NotTo(HaveOccurred())
	g.Expect(f.Value).To(Equal(ContainerdConfig{Path: v2, Found: true, ConfDir: "c:/etc/cni/net.d", BinDirs: []string{"c:/opt/cni/bin"}}))

	v3 := write("v3.toml", "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.cni]\n  bin_dirs = ['/opt/cni/bin', '/usr/lib/cni']\n  conf_dir = '/etc/cni/net.d'\n  max_conf_num = 1\n")
	f = gatherContainerd(Options{ContainerdConfig: v3})
	g.Expect(f.Err).NotTo(HaveOccurred())
	g.Expect(f.Value.ConfDir).To(Equal("/etc/cni/net.d"))
	g.Expect(f.Value.BinDirs).To(Equal([]string{"/opt/cni/bin", "/usr/lib/cni"}))

	bad := write("bad.toml", "version = [\n")
	g.Expect(gatherContainerd(Options{ContainerdConfig: bad}).Err).To(HaveOccurred())
}

// TestGatherCNIDir lists what libcni lists, sorted by name; an absent directory holds nothing.
func TestGatherCNIDir(t *testing.T) {
	g := NewWithT(t)
	dir := wine.TempDir(t)
	for _, n := range []string{"10-winnet.conflist", "05-flannel.conf", "99-x.json", "README", "10-winnet.conflist.bak"} {
		g.Expect(os.WriteFile(filepath.Join(dir, n), nil, 0o600)).To(Succeed())
	}
	g.Expect(os.Mkdir(filepath.Join(dir, "00-dir.conf"), 0o700)).To(Succeed())
	f := gatherCNIDir(dir)
	g.Expect(f.Err).NotTo(HaveOccurred())
	g.Expect(f.Value.Files).To(Equal([]string{"05-flannel.conf", "10-winnet.conflist", "99-x.json"}))
	f = gatherCNIDir(filepath.Join(dir, "absent"))
	g.Expect(f.Err).NotTo(HaveOccurred())
	g.Expect(f.Value.Files).To(BeEmpty())
}
