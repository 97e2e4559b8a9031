package agent

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/sys/unix"
)

// TestTailNeverFollowsASwappedLink: while the log's path is swapped, again and again, between the log and
// a link to a file outside its directory (renameat2 RENAME_EXCHANGE: the path always exists, as one or the
// other), tail returns the log or refuses the link, never the file outside: it checks the file it opened,
// not the path before opening it.
func TestTailNeverFollowsASwappedLink(t *testing.T) {
	g := NewWithT(t)
	outside := filepath.Join(t.TempDir(), "secret")
	g.Expect(os.WriteFile(outside, []byte("outside the directory\n"), 0o600)).To(Succeed())
	dir := t.TempDir()
	log := filepath.Join(dir, "agent.log")
	g.Expect(os.WriteFile(log, []byte("a log line\n"), 0o600)).To(Succeed())
	swap := filepath.Join(dir, "swap")
	g.Expect(os.Symlink(outside, swap)).To(Succeed())

	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, log, unix.AT_FDCWD, swap, unix.RENAME_EXCHANGE); err != nil {
				done <- err
				return
			}
		}
	}()
	read, refused := 0, 0
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && read+refused < 20000; {
		b, err := tail(log, 1<<10)
		if err != nil {
			g.Expect(err.Error()).To(ContainSubstring(log))
			refused++
			continue
		}
		if string(b) != "a log line\n" {
			close(stop)
			<-done
			t.Fatalf("tail read %q through a link swapped in after %d reads and %d refusals", b, read, refused)
		}
		read++
	}
	close(stop)
	g.Expect(<-done).To(Succeed(), "swapping")
	t.Logf("%d reads of the log, %d refusals of the link", read, refused)
	g.Expect(read).To(BeNumerically(">", 0))
	g.Expect(refused).To(BeNumerically(">", 0))
}

// TestSupportBundleRefusesALinkedLog: a log given as a link to a file outside its directory is not
// collected and errors.txt names it with why; a regular log is collected. (The context is cancelled: the
// OVS, HNS and host members fail at once and are named in errors.txt too.)
func TestSupportBundleRefusesALinkedLog(t *testing.T) {
	g := NewWithT(t)
	outside := filepath.Join(t.TempDir(), "secret")
	g.Expect(os.WriteFile(outside, []byte("outside the directory\n"), 0o600)).To(Succeed())
	dir := t.TempDir()
	regular := filepath.Join(dir, "agent.log")
	g.Expect(os.WriteFile(regular, []byte("Starting winnet-agent\n"), 0o600)).To(Succeed())
	link := filepath.Join(dir, "linked.log")
	g.Expect(os.Symlink(outside, link)).To(Succeed())

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out strings.Builder
	host := HostOptions{StateDir: t.TempDir(), OVSRunDir: t.TempDir(), OVSDBAddress: "unix:" + filepath.Join(t.TempDir(), "db.sock")}
	names, err := SupportBundle(ctx, host, BundleOptions{NodeName: "node-a", Logs: []string{regular, link}}, &out)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names).To(ContainElements("logs/0-agent.log", "errors.txt"))
	g.Expect(names).NotTo(ContainElement("logs/1-linked.log"))

	m := bundleMembersOf(t, out.String())
	g.Expect(m["logs/0-agent.log"]).To(Equal("Starting winnet-agent\n"))
	g.Expect(m["errors.txt"]).To(MatchRegexp(`(?m)^logs/1-linked\.log: opening ` + regexp.QuoteMeta(link) + `: is a link or reparse point, never followed$`))
	for name, content := range m {
		g.Expect(content).NotTo(ContainSubstring("outside the directory"), name)
	}
}

// bundleMembersOf reads a gzipped tar into member name -> content.
func bundleMembersOf(t *testing.T, data string) map[string]string {
	t.Helper()
	g := NewWithT(t)
	gz, err := gzip.NewReader(strings.NewReader(data))
	g.Expect(err).NotTo(HaveOccurred())
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		g.Expect(err).NotTo(HaveOccurred())
		b, err := io.ReadAll(tr)
		g.Expect(err).NotTo(HaveOccurred())
		out[h.Name] = string(b)
	}
}
