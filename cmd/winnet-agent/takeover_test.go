package main

import (
	"bytes"
	"testing"

	. "github.com/onsi/gomega"
)

// TestTakeoverCommandArgs: `winnet-agent takeover` answers --help, requires --from, refuses an unknown
// stack, a stray argument and an unknown flag, all before it opens HNS; other commands are not its.
func TestTakeoverCommandArgs(t *testing.T) {
	g := NewWithT(t)
	var out, errOut bytes.Buffer
	handled, err := takeoverCommand([]string{"reset"}, &out, &errOut)
	g.Expect(handled).To(BeFalse())
	g.Expect(err).NotTo(HaveOccurred())

	handled, err = takeoverCommand([]string{"takeover", "--help"}, &out, &errOut)
	g.Expect(handled).To(BeTrue())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(errOut.String()).To(ContainSubstring("Usage: winnet-agent takeover --from flannel,kube-proxy [--dry-run]"))
	g.Expect(errOut.String()).To(ContainSubstring("-flannel-subnet-file"))

	for args, want := range map[string][]string{
		"--from is required":                          {"takeover", "--dry-run"},
		`--from "calico": want flannel or kube-proxy`: {"takeover", "--from", "calico"},
		"takes no arguments":                          {"takeover", "--from", "flannel", "now"},
		"flag provided but not defined":               {"takeover", "--from", "flannel", "--force"},
		"--source-vip":                                {"takeover", "--from", "kube-proxy", "--source-vip", "10.244.1"},
	} {
		errOut.Reset()
		handled, err := takeoverCommand(want, &out, &errOut)
		g.Expect(handled).To(BeTrue())
		g.Expect(err).To(MatchError(ContainSubstring(args)), "%v", want)
	}
	g.Expect(out.String()).To(BeEmpty())
}
