//go:build linux

package networkpolicy_test

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/winnet-io/winnet/test/framework"
)

var server *framework.APIServer

func TestMain(m *testing.M) {
	framework.Main(m, "NetworkPolicy integration tests", &server, framework.MainOptions{})
}

const converge = 30 * time.Second

// httpPort is the Pods' container port named "http".
const httpPort = 8080

// httpPorts is the Pods' container port named "http" (= httpPort).
var httpPorts = []corev1.ContainerPort{{Name: "http", ContainerPort: httpPort, Protocol: corev1.ProtocolTCP}}

// serveEcho runs a TCP server on port in the namespace that echoes what it reads, for connections
// that stay open while policies change.
func serveEcho(t *testing.T, nsName string, port int) {
	t.Helper()
	var l net.Listener
	if err := framework.InNS(nsName, func() error {
		var err error
		l, err = net.Listen("tcp4", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatalf("serving in %s: %v", nsName, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
}

// dial opens a TCP connection from the namespace to addr and leaves it open.
func dial(t *testing.T, nsName string, addr netip.AddrPort) net.Conn {
	t.Helper()
	var c net.Conn
	if err := framework.InNS(nsName, func() error {
		var err error
		c, err = net.DialTimeout("tcp4", addr.String(), 2*time.Second)
		return err
	}); err != nil {
		t.Fatalf("connecting from %s to %s: %v", nsName, addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// echo sends a line on an open connection and checks it comes back.
func echo(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "ping\n" {
		return fmt.Errorf("echoed %q", buf)
	}
	return nil
}
