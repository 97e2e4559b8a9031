//go:build linux

package cluster

import (
	"os"
	"testing"

	. "github.com/onsi/gomega"
)

// TestReadProcMemory reads this test process's memory: a resident process has anonymous and file
// pages, and its RSS is their sum (shared memory aside, which a Go test does not map); a process
// that does not exist is an error.
func TestReadProcMemory(t *testing.T) {
	g := NewWithT(t)
	m, err := ReadProcMemory(os.Getpid())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.Anon).To(BeNumerically(">", 0))
	g.Expect(m.File).To(BeNumerically(">", 0))
	g.Expect(m.RSS).To(BeNumerically("~", m.Anon+m.File, 1))
	g.Expect(m.Threads).To(BeNumerically(">=", 1))
	_, err = ReadProcMemory(1 << 30)
	g.Expect(err).To(HaveOccurred())
}
