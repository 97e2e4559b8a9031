package securefs

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// TestCreateNewRefusesExisting: CREATE_NEW creates the file once; a second CreateNew of the same path
// fails with fs.ErrExist and leaves the file as it was.
func TestCreateNewRefusesExisting(t *testing.T) {
	g := NewWithT(t)
	// Not t.TempDir: under Wine its RemoveAll fails here ("Invalid function") while os.Remove works.
	dir, err := os.MkdirTemp("", "createnew")
	g.Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(dir, "bundle.tar.gz")
	t.Cleanup(func() {
		g.Expect(os.Remove(path)).To(Succeed())
		g.Expect(os.Remove(dir)).To(Succeed())
	})
	f, err := CreateNew(path, Private)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.WriteString("data")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.Close()).To(Succeed())
	_, err = CreateNew(path, Private)
	g.Expect(err).To(MatchError(fs.ErrExist))
	g.Expect(os.ReadFile(path)).To(Equal([]byte("data")))
}

// TestCreateNewGivesTheDACL: the new file carries SDDL(Private), protected, from its creation: owner
// SYSTEM or Administrators, full control for them only.
func TestCreateNewGivesTheDACL(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "bundle.tar.gz")
	f, err := CreateNew(path, Private)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.Close()).To(Succeed())
	g.Expect(CheckFile(path, Private)).To(Succeed())
}

// TestOpenAppendCreates: OpenAppend creates a missing file and lets others read it while it is open
// (a tail, a log shipper).
func TestOpenAppendCreates(t *testing.T) {
	g := NewWithT(t)
	// Not t.TempDir: under Wine its RemoveAll fails here ("Invalid function") while os.Remove works.
	dir, err := os.MkdirTemp("", "openappend")
	g.Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(dir, "audit.log")
	t.Cleanup(func() {
		g.Expect(os.Remove(path)).To(Succeed())
		g.Expect(os.Remove(dir)).To(Succeed())
	})
	f, err := OpenAppend(path, Private)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.WriteString("one\n")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.ReadFile(path)).To(Equal([]byte("one\n")), "readable while open")
	_, err = f.WriteString("two\n")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.Close()).To(Succeed())
	g.Expect(os.ReadFile(path)).To(Equal([]byte("one\ntwo\n")))
}

// TestOpenAppendAppends: an existing file of the administrators, with the DACL, is appended to.
func TestOpenAppendAppends(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	f, err := OpenAppend(path, Private)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.WriteString("one\n")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.Close()).To(Succeed())
	f, err = OpenAppend(path, Private)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.WriteString("two\n")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.Close()).To(Succeed())
	g.Expect(os.ReadFile(path)).To(Equal([]byte("one\ntwo\n")))
}
