//go:build linux

package cluster

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// DialTCP opens a TCP connection from the Pod's namespace to dst and closes it: nil when the
// handshake completed within timeout (the SYN passed every policy and the SYN-ACK came back).
func (p *Pod) DialTCP(dst netip.AddrPort, timeout time.Duration) error {
	return ns.WithNetNSPath(p.NSPath, func(ns.NetNS) error {
		conn, err := net.DialTimeout("tcp4", dst.String(), timeout)
		if err == nil {
			conn.Close()
		}
		return err
	})
}

// ExpectConnection waits up to timeout until new TCP connections from one Pod to another's port
// complete (allowed) or fail (refused), then checks that the next one agrees; it fails the test
// otherwise.
func ExpectConnection(t testing.TB, from, to *Pod, port int, allowed bool, timeout time.Duration) {
	t.Helper()
	dst := netip.AddrPortFrom(to.IP, uint16(port))
	what, want := fmt.Sprintf("%s -> %s:%d", from.Name, to.Name, port), "allowed"
	if !allowed {
		want = "refused"
	}
	agrees := func() (bool, error) {
		err := from.DialTCP(dst, time.Second)
		return (err == nil) == allowed, err
	}
	for deadline := time.Now().Add(timeout); ; time.Sleep(200 * time.Millisecond) {
		ok, err := agrees()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not %s within %s (last try: %v)", what, want, timeout, err)
		}
	}
	if ok, err := agrees(); !ok {
		t.Fatalf("%s does not stay %s (next try: %v)", what, want, err)
	}
}
