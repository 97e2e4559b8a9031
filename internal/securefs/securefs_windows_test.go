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
