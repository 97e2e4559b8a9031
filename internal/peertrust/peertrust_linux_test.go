package peertrust

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// TestDefaultReadsTheUnixSocketPeer: on Linux the server's credentials come from SO_PEERCRED.
func TestDefaultReadsTheUnixSocketPeer(t *testing.T) {
	g := NewWithT(t)
	address := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", address)
	g.Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			defer c.Close()
			_, _ = c.Read(make([]byte, 1))
		}
	}()
	conn, err := net.Dial("unix", address)
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	id, err := platformIdentifier{}.ServerIdentity(conn)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(id.PID).To(BeEquivalentTo(os.Getpid()))
	g.Expect(id.UID).To(Equal(os.Geteuid()))
	g.Expect(NewVerifier().Verify(conn)).To(Succeed())

	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	g.Expect(NewVerifier().Verify(c1)).To(MatchError(ContainSubstring("not a unix socket")))
}
