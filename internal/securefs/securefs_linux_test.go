package securefs

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	. "github.com/onsi/gomega"
)

// nobody is a uid that is neither root nor the test's.
const nobody = 65534

func mode(g *WithT, path string) fs.FileMode {
	fi, err := os.Lstat(path)
	g.Expect(err).NotTo(HaveOccurred())
	return fi.Mode().Perm()
}

func TestEnsureDirCreatesProtected(t *testing.T) {
	for _, tc := range []struct {
		a    Access
		want fs.FileMode
	}{{Private, 0o700}, {Public, 0o755}} {
		t.Run(tc.a.String(), func(t *testing.T) {
			g := NewWithT(t)
			dir := filepath.Join(t.TempDir(), "a", "b")
			old := syscall.Umask(0)
			defer syscall.Umask(old)
			res, err := EnsureDir(dir, tc.a)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.Created).To(BeTrue())
			g.Expect(mode(g, dir)).To(Equal(tc.want))
			g.Expect(mode(g, filepath.Dir(dir))).To(Equal(tc.want), "a missing parent is created the same way")
			res, err = EnsureDir(dir, tc.a)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res).To(Equal(Result{}), "nothing to do the second time")
		})
	}
}

// TestEnsureDirRefusesAnotherOwner: a directory owned by another uid is refused and left as it is.
func TestEnsureDirRefusesAnotherOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test chowns a directory: run it as root")
	}
	g := NewWithT(t)
	dir := filepath.Join(t.TempDir(), "state")
	g.Expect(os.Mkdir(dir, 0o700)).To(Succeed())
	g.Expect(os.Chown(dir, nobody, nobody)).To(Succeed())
	_, err := EnsureDir(dir, Private)
	g.Expect(err).To(MatchError(ErrUntrustedOwner))
	g.Expect(err.Error()).To(ContainSubstring(dir))
	fi, err := os.Lstat(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Sys().(*syscall.Stat_t).Uid).To(BeEquivalentTo(nobody), "left as it is")
	g.Expect(CheckDir(dir, Private)).To(MatchError(ErrUntrustedOwner))
}

// TestEnsureDirRepairsATooOpenTree: a directory only too open is narrowed with everything in it,
// including what another user planted, and every repaired path is listed.
func TestEnsureDirRepairsATooOpenTree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test chowns files: run it as root")
	}
	g := NewWithT(t)
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "state")
	sub := filepath.Join(dir, "pods")
	g.Expect(os.MkdirAll(sub, 0o777)).To(Succeed())
	g.Expect(os.Chmod(dir, 0o777)).To(Succeed())
	good := filepath.Join(sub, "good.json")
	planted := filepath.Join(sub, "planted.json")
	g.Expect(os.WriteFile(good, []byte("{}"), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(planted, []byte("{}"), 0o666)).To(Succeed())
	g.Expect(os.Chown(planted, nobody, nobody)).To(Succeed())

	res, err := EnsureDir(dir, Private)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Repaired).To(ConsistOf(dir, sub, planted))
	g.Expect(mode(g, dir)).To(Equal(fs.FileMode(0o700)))
	g.Expect(mode(g, sub)).To(Equal(fs.FileMode(0o700)))
	g.Expect(mode(g, planted)).To(Equal(fs.FileMode(0o600)))
	g.Expect(CheckFile(planted, Private)).To(Succeed(), "now owned by root")
	g.Expect(CheckDir(dir, Private)).To(Succeed())
}

func TestCheckDirRefusesTooOpen(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(os.Chmod(dir, 0o733)).To(Succeed())
	g.Expect(CheckDir(dir, Private)).To(MatchError(ErrTooOpen))
	g.Expect(os.Chmod(dir, 0o755)).To(Succeed())
	g.Expect(CheckDir(dir, Private)).To(MatchError(ErrTooOpen), "others may read private state")
	g.Expect(CheckDir(dir, Public)).To(Succeed())
	g.Expect(os.Chmod(dir, 0o775)).To(Succeed())
	g.Expect(CheckDir(dir, Public)).To(MatchError(ErrTooOpen), "the group may write")
}

// TestWriteFileUsesAUniqueTemporaryName: a file prepared where a fixed temporary name would be is
// neither used nor followed, and the written file has the Access's mode.
func TestWriteFileUsesAUniqueTemporaryName(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	_, err := EnsureDir(dir, Private)
	g.Expect(err).NotTo(HaveOccurred())
	victim := filepath.Join(t.TempDir(), "victim")
	g.Expect(os.WriteFile(victim, []byte("precious"), 0o644)).To(Succeed())
	path := filepath.Join(dir, "adapter-eth0.json")
	g.Expect(os.Symlink(victim, path+".tmp")).To(Succeed())

	g.Expect(WriteFile(path, []byte("new"), Private)).To(Succeed())
	g.Expect(os.ReadFile(path)).To(BeEquivalentTo("new"))
	g.Expect(mode(g, path)).To(Equal(fs.FileMode(0o600)))
	g.Expect(os.ReadFile(victim)).To(BeEquivalentTo("precious"))
	entries, err := os.ReadDir(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(HaveLen(2), "the file and the prepared link; no temporary file left")
}

func TestReadFileRefusesWhatItCannotTrust(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test chowns a file: run it as root")
	}
	g := NewWithT(t)
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok")
	g.Expect(WriteFile(ok, []byte("{}"), Private)).To(Succeed())
	g.Expect(ReadFile(ok, Private, 2)).To(BeEquivalentTo("{}"))

	_, err := ReadFile(ok, Private, 1)
	g.Expect(err).To(MatchError(ErrTooLarge))

	open := filepath.Join(dir, "open")
	g.Expect(os.WriteFile(open, []byte("{}"), 0o600)).To(Succeed())
	g.Expect(os.Chmod(open, 0o666)).To(Succeed())
	_, err = ReadFile(open, Private, 10)
	g.Expect(err).To(MatchError(ErrTooOpen))

	other := filepath.Join(dir, "other")
	g.Expect(os.WriteFile(other, []byte("{}"), 0o600)).To(Succeed())
	g.Expect(os.Chown(other, nobody, nobody)).To(Succeed())
	_, err = ReadFile(other, Private, 10)
	g.Expect(err).To(MatchError(ErrUntrustedOwner))

	link := filepath.Join(dir, "link")
	g.Expect(os.Symlink(ok, link)).To(Succeed())
	_, err = ReadFile(link, Private, 10)
	g.Expect(err).To(HaveOccurred(), "a link is never followed")

	aside, err := MoveAside(other)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.HasPrefix(aside, other+".untrusted-")).To(BeTrue())
	g.Expect(other).NotTo(BeAnExistingFile())
}

// TestCreateNew: the file is created owner-only whatever the umask, and an existing file, a link to
// a file and a dangling link are refused and left as they were.
func TestCreateNew(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	old := syscall.Umask(0)
	defer syscall.Umask(old)

	path := filepath.Join(dir, "bundle.tar.gz")
	f, err := CreateNew(path, Private)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.WriteString("data")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.Close()).To(Succeed())
	g.Expect(mode(g, path)).To(Equal(fs.FileMode(0o600)))

	_, err = CreateNew(path, Private)
	g.Expect(err).To(MatchError(fs.ErrExist), "an existing file")
	g.Expect(os.ReadFile(path)).To(Equal([]byte("data")), "left as it was")

	target := filepath.Join(dir, "target")
	g.Expect(os.WriteFile(target, []byte("target"), 0o600)).To(Succeed())
	link := filepath.Join(dir, "link")
	g.Expect(os.Symlink(target, link)).To(Succeed())
	_, err = CreateNew(link, Private)
	g.Expect(err).To(HaveOccurred(), "a link to a file")
	g.Expect(os.ReadFile(target)).To(Equal([]byte("target")))

	dangling := filepath.Join(dir, "dangling")
	g.Expect(os.Symlink(filepath.Join(dir, "absent"), dangling)).To(Succeed())
	_, err = CreateNew(dangling, Private)
	g.Expect(err).To(HaveOccurred(), "a dangling link")
	g.Expect(filepath.Join(dir, "absent")).NotTo(BeAnExistingFile(), "nothing created through the link")
}

// TestOpenAppend: a missing file is created 0600, an existing one is appended to; a link (to a
// file or dangling), a file of another owner or open to others is refused and left as it is.
func TestOpenAppend(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test chowns a file: run it as root")
	}
	g := NewWithT(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "audit.log")
	f, err := OpenAppend(log, Private)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.WriteString("one\n")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.Close()).To(Succeed())
	g.Expect(mode(g, log)).To(Equal(fs.FileMode(0o600)))
	f, err = OpenAppend(log, Private)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.WriteString("two\n")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.Close()).To(Succeed())
	b, err := os.ReadFile(log)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(Equal("one\ntwo\n"))

	target := filepath.Join(dir, "elsewhere")
	g.Expect(os.WriteFile(target, []byte("keep\n"), 0o600)).To(Succeed())
	for name, dest := range map[string]string{"link.log": target, "dangling.log": filepath.Join(dir, "missing")} {
		link := filepath.Join(dir, name)
		g.Expect(os.Symlink(dest, link)).To(Succeed())
		_, err := OpenAppend(link, Private)
		g.Expect(err).To(MatchError(ErrLink), name)
		g.Expect(err.Error()).To(ContainSubstring(link))
	}
	_, err = os.Stat(filepath.Join(dir, "missing"))
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "a dangling link's target is not created")
	b, err = os.ReadFile(target)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(Equal("keep\n"), "a link's target is not written")

	theirs := filepath.Join(dir, "theirs.log")
	g.Expect(os.WriteFile(theirs, nil, 0o600)).To(Succeed())
	g.Expect(os.Chown(theirs, nobody, nobody)).To(Succeed())
	_, err = OpenAppend(theirs, Private)
	g.Expect(err).To(MatchError(ErrUntrustedOwner))
	open := filepath.Join(dir, "open.log")
	g.Expect(os.WriteFile(open, nil, 0o600)).To(Succeed())
	g.Expect(os.Chmod(open, 0o666)).To(Succeed())
	_, err = OpenAppend(open, Private)
	g.Expect(err).To(MatchError(ErrTooOpen))
	g.Expect(mode(g, open)).To(Equal(fs.FileMode(0o666)), "left as it is")
	g.Expect(os.Mkdir(filepath.Join(dir, "dir.log"), 0o700)).To(Succeed())
	_, err = OpenAppend(filepath.Join(dir, "dir.log"), Private)
	g.Expect(err).To(MatchError(ContainSubstring("not a regular file")))
}

// TestOpenNoFollow: a regular file is opened with its information; a link to a file outside its directory
// and a dangling link (ErrLink, never followed), a directory and a FIFO (ErrNotRegular, without blocking)
// are refused.
func TestOpenNoFollow(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	regular := filepath.Join(dir, "agent.log")
	g.Expect(os.WriteFile(regular, []byte("a log line\n"), 0o644)).To(Succeed())
	f, fi, err := OpenNoFollow(regular)
	g.Expect(err).NotTo(HaveOccurred())
	b, err := io.ReadAll(f)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.Close()).To(Succeed())
	g.Expect(string(b)).To(Equal("a log line\n"))
	g.Expect(fi.Size()).To(BeEquivalentTo(len(b)))
	g.Expect(fi.Mode().IsRegular()).To(BeTrue())

	outside := filepath.Join(t.TempDir(), "secret")
	g.Expect(os.WriteFile(outside, []byte("outside\n"), 0o600)).To(Succeed())
	for name, dest := range map[string]string{"link.log": outside, "dangling.log": filepath.Join(dir, "missing")} {
		link := filepath.Join(dir, name)
		g.Expect(os.Symlink(dest, link)).To(Succeed())
		_, _, err := OpenNoFollow(link)
		g.Expect(err).To(MatchError(ErrLink), name)
		g.Expect(err.Error()).To(ContainSubstring(link))
	}
	g.Expect(os.Mkdir(filepath.Join(dir, "dir.log"), 0o700)).To(Succeed())
	_, _, err = OpenNoFollow(filepath.Join(dir, "dir.log"))
	g.Expect(err).To(MatchError(ErrNotRegular))
	fifo := filepath.Join(dir, "fifo.log")
	g.Expect(syscall.Mkfifo(fifo, 0o600)).To(Succeed())
	_, _, err = OpenNoFollow(fifo)
	g.Expect(err).To(MatchError(ErrNotRegular))
}
