package framework

import (
	"net"
	"testing"
)

// FreeAddress returns a loopback address with a port nobody listens on, for a process the test
// starts (a metrics or profiling endpoint).
func FreeAddress(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
