package cni

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	. "github.com/onsi/gomega"
)

func TestWriteConfList(t *testing.T) {
	g := NewWithT(t)
	dir := filepath.Join(t.TempDir(), "net.d")
	written, err := WriteConfList(dir, "/run/winnet/cni.sock", "/var/lib/winnet")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(written).To(BeTrue())
	b, err := os.ReadFile(filepath.Join(dir, ConfListName))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b).To(MatchJSON(`{"cniVersion":"1.0.0","cniVersions":["1.0.0","1.1.0"],"name":"winnet","plugins":[
		{"type":"winnet-cni","agentSocket":"/run/winnet/cni.sock","stateDir":"/var/lib/winnet","confDir":"` + dir + `","capabilities":{"dns":true,"portMappings":true}}]}`))

	written, err = WriteConfList(dir, "/run/winnet/cni.sock", "/var/lib/winnet")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(written).To(BeFalse(), "an unchanged conflist is not rewritten")

	written, err = WriteConfList(dir, "/run/other.sock", "/var/lib/winnet")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(written).To(BeTrue())
	entries, err := os.ReadDir(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(HaveLen(1), "no temporary file is left beside the conflist")
	fi, err := os.Stat(filepath.Join(dir, ConfListName))
	g.Expect(err).NotTo(HaveOccurred())
	// On Windows the permission bits only reflect the read-only attribute (a writable file reads
	// 0666): who may change the file is its DACL, which internal/securefs sets and checks.
	wantMode := os.FileMode(0o644)
	if runtime.GOOS == "windows" {
		wantMode = 0o666
	}
	g.Expect(fi.Mode().Perm()).To(Equal(wantMode))
}
