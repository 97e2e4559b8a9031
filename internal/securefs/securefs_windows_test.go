package securefs

import (
	"io"
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

// TestOpenNoFollowReadsALogBeingWritten: a regular file is opened and read while its writer holds it
// open for appending (the agent's log: a support bundle reads its tail); a directory is refused.
func TestOpenNoFollowReadsALogBeingWritten(t *testing.T) {
	g := NewWithT(t)
	// Not t.TempDir: under Wine its RemoveAll fails here ("Invalid function") while os.Remove works.
	dir, err := os.MkdirTemp("", "opennofollow")
	g.Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(dir, "winnet-agent.log")
	sub := filepath.Join(dir, "sub")
	t.Cleanup(func() {
		g.Expect(os.Remove(path)).To(Succeed())
		g.Expect(os.Remove(sub)).To(Succeed())
		g.Expect(os.Remove(dir)).To(Succeed())
	})
	w, err := OpenAppend(path, Private)
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Close()
	_, err = w.WriteString("a log line\n")
	g.Expect(err).NotTo(HaveOccurred())
	f, fi, err := OpenNoFollow(path)
	g.Expect(err).NotTo(HaveOccurred())
	b, err := io.ReadAll(f)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.Close()).To(Succeed())
	g.Expect(string(b)).To(Equal("a log line\n"))
	g.Expect(fi.Size()).To(BeEquivalentTo(len(b)))
	g.Expect(w.Close()).To(Succeed())

	g.Expect(os.Mkdir(sub, 0o700)).To(Succeed())
	_, _, err = OpenNoFollow(sub)
	g.Expect(err).To(HaveOccurred(), "a directory")
}

// TestOpenNoFollowRefusesALink: a symbolic link to a file outside its directory is opened as itself
// (FILE_FLAG_OPEN_REPARSE_POINT) and refused (ErrLink), never followed.
func TestOpenNoFollowRefusesALink(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	g.Expect(os.WriteFile(outside, []byte("outside\n"), 0o600)).To(Succeed())
	link := filepath.Join(dir, "winnet-agent.log")
	g.Expect(os.Symlink(outside, link)).To(Succeed(), "creating a symbolic link needs an elevated administrator or Developer Mode")
	_, _, err := OpenNoFollow(link)
	g.Expect(err).To(MatchError(ErrLink))
	g.Expect(err.Error()).To(ContainSubstring(link))
}
