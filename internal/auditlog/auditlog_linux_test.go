//go:build linux

package auditlog

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/securefs"
)

// TestPlantedLinkRefused: a link at the log's name (to a file or dangling) is refused, the
// target untouched; a directory owned by the administrators but open to others is narrowed.
func TestPlantedLinkRefused(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "passwd")
	g.Expect(os.WriteFile(target, []byte("root:x:0:0\n"), 0o644)).To(Succeed())
	g.Expect(os.Symlink(target, filepath.Join(dir, FileName))).To(Succeed())
	_, err := Open(Options{Dir: dir, Node: "n1"})
	g.Expect(err).To(MatchError(securefs.ErrLink))
	g.Expect(err.Error()).To(ContainSubstring(filepath.Join(dir, FileName)))
	b, err := os.ReadFile(target)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(Equal("root:x:0:0\n"))

	open := filepath.Join(t.TempDir(), "audit")
	g.Expect(os.Mkdir(open, 0o777)).To(Succeed())
	g.Expect(os.Chmod(open, 0o777)).To(Succeed())
	l, err := Open(Options{Dir: open, Node: "n1"})
	g.Expect(err).NotTo(HaveOccurred())
	fi, err := os.Stat(open)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(BeEquivalentTo(0o700))
	l.close()
}

// TestFilesArePrivate: the log and its rotated files are the administrators' only (0600 here;
// on Windows the directory's protected DACL, internal/securefs).
func TestFilesArePrivate(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir, Node: "n1", MaxSize: 400, MaxFiles: 2, Rate: 1e6, Burst: 1e6})
	g.Expect(err).NotTo(HaveOccurred())
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	for i := range 10 {
		l.take(record(t0, uint16(40000+i)))
	}
	l.flush(time.Time{})
	l.close()
	entries, err := os.ReadDir(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(HaveLen(3))
	for _, e := range entries {
		fi, err := e.Info()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fi.Mode().Perm()).To(BeEquivalentTo(0o600), e.Name())
	}
	fi, err := os.Stat(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(BeEquivalentTo(0o700))
}
