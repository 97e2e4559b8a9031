package cni

import (
	"context"
	"strconv"
	"testing"

	. "github.com/onsi/gomega"
)

// TestListenRefusesASecondServer: while the agent serves its pipe, another server cannot take the
// name (go-winio creates the first instance with NtCreateNamedPipeFile's FILE_CREATE, which fails
// when the name exists), so a process that starts later cannot put itself between the shim and the
// agent. Wine lets the second one create it (test/wine/skips.txt).
func TestListenRefusesASecondServer(t *testing.T) {
	g := NewWithT(t)
	address := testAddress(t)
	l, err := Listen(context.Background(), address)
	g.Expect(err).NotTo(HaveOccurred())
	defer l.Close() //nolint:errcheck
	second, err := Listen(context.Background(), address)
	if err == nil {
		_ = second.Close()
	}
	g.Expect(err).To(MatchError(ContainSubstring(strconv.Quote(address))), "a second server on the agent's pipe")
}
