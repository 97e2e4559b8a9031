//go:build linux

package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// NamedEcho is the tests' echo server in a Pod: on each of its TCP and UDP ports it answers every line (TCP,
// several per connection) or datagram (UDP) with its name and the client address it saw, "<name> <address>".
// Which endpoint of a Service answered, and whether the client was SNATed, are read from the answer.
type NamedEcho struct {
	Name      string
	listeners []net.Listener
	packets   []net.PacketConn
	wg        sync.WaitGroup
	mu        sync.Mutex
	conns     map[net.Conn]bool
}

// ServeNamedEcho starts an echo server answering as name on the TCP and UDP ports inside the namespace at
// nsPath.
func ServeNamedEcho(nsPath, name string, tcpPorts, udpPorts []int) (*NamedEcho, error) {
	e := &NamedEcho{Name: name, conns: map[net.Conn]bool{}}
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		for _, port := range tcpPorts {
			l, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
			if err != nil {
				return err
			}
			e.listeners = append(e.listeners, l)
		}
		for _, port := range udpPorts {
			pc, err := net.ListenPacket("udp4", fmt.Sprintf("0.0.0.0:%d", port))
			if err != nil {
				return err
			}
			e.packets = append(e.packets, pc)
		}
		return nil
	})
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("starting the echo server %s in %s: %w", name, nsPath, err)
	}
	for _, l := range e.listeners {
		e.wg.Add(1)
		go e.serveTCP(l)
	}
	for _, pc := range e.packets {
		e.wg.Add(1)
		go e.serveUDP(pc)
	}
	return e, nil
}

func (e *NamedEcho) answer(addr string) string {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return e.Name + " ?\n"
	}
	return fmt.Sprintf("%s %s\n", e.Name, ap.Addr().Unmap())
}

func (e *NamedEcho) serveTCP(l net.Listener) {
	defer e.wg.Done()
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		e.mu.Lock()
		e.conns[conn] = true
		e.mu.Unlock()
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			defer func() {
				e.mu.Lock()
				delete(e.conns, conn)
				e.mu.Unlock()
				_ = conn.Close()
			}()
			r := bufio.NewReader(conn)
			for {
				if _, err := r.ReadString('\n'); err != nil {
					return
				}
				if _, err := conn.Write([]byte(e.answer(conn.RemoteAddr().String()))); err != nil {
					return
				}
			}
		}()
	}
}

func (e *NamedEcho) serveUDP(pc net.PacketConn) {
	defer e.wg.Done()
	buf := make([]byte, 1500)
	for {
		_, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo([]byte(e.answer(from.String())), from)
	}
}

// Close stops the server and closes its open connections.
func (e *NamedEcho) Close() {
	for _, l := range e.listeners {
		_ = l.Close()
	}
	for _, pc := range e.packets {
		_ = pc.Close()
	}
	e.mu.Lock()
	for conn := range e.conns {
		_ = conn.Close()
	}
	e.mu.Unlock()
	e.wg.Wait()
}

// EchoAnswer is what a NamedEcho answered: its name and the client address it saw.
type EchoAnswer struct {
	Name   string
	Client netip.Addr
}

func parseAnswer(line string) (EchoAnswer, error) {
	name, addr, ok := strings.Cut(strings.TrimSpace(line), " ")
	if !ok {
		return EchoAnswer{}, fmt.Errorf("unexpected echo answer %q", line)
	}
	a, err := netip.ParseAddr(addr)
	return EchoAnswer{Name: name, Client: a}, err
}

// AskEcho sends one line (tcp4) or datagram (udp4) from a place to dst and returns the answer of the echo
// server behind it.
func AskEcho(ctx context.Context, from Place, network string, dst netip.AddrPort, timeout time.Duration) (EchoAnswer, error) {
	conn, err := dialFrom(ctx, from, network, dst, timeout)
	if err != nil {
		return EchoAnswer{}, err
	}
	defer conn.Close()
	a, err := askOn(conn, timeout)
	if err != nil {
		return a, fmt.Errorf("%s to %s from %s: %w", network, dst, from, err)
	}
	return a, nil
}

func dialFrom(ctx context.Context, from Place, network string, dst netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	var conn net.Conn
	err := ns.WithNetNSPath(nsPath(from.NS), func(ns.NetNS) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var err error
		d := &net.Dialer{}
		if from.BindSource {
			if strings.HasPrefix(network, "udp") {
				d.LocalAddr = &net.UDPAddr{IP: from.IP.AsSlice()}
			} else {
				d.LocalAddr = &net.TCPAddr{IP: from.IP.AsSlice()}
			}
		}
		conn, err = d.DialContext(ctx, network, dst.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s to %s from %s: %w", network, dst, from, err)
	}
	return conn, nil
}

func askOn(conn net.Conn, timeout time.Duration) (EchoAnswer, error) {
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("hello\n")); err != nil {
		return EchoAnswer{}, err
	}
	buf := make([]byte, 256)
	n, err := conn.Read(buf)
	if err != nil {
		return EchoAnswer{}, err
	}
	return parseAnswer(string(buf[:n]))
}

// EchoConn is an open TCP connection to an echo server, for checking that an established connection survives
// a change.
type EchoConn struct {
	conn net.Conn
	dst  netip.AddrPort
}

// DialEchoConn opens a TCP connection from a place to dst.
func DialEchoConn(ctx context.Context, from Place, dst netip.AddrPort, timeout time.Duration) (*EchoConn, error) {
	conn, err := dialFrom(ctx, from, "tcp4", dst, timeout)
	if err != nil {
		return nil, err
	}
	return &EchoConn{conn: conn, dst: dst}, nil
}

// DialUDP opens a connected UDP socket from a place to dst: every packet it sends has the same address and port.
func DialUDP(ctx context.Context, from Place, dst netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	return dialFrom(ctx, from, "udp4", dst, timeout)
}

// DialUDPEchoConn opens a connected UDP socket from a place to dst, for a client that keeps its socket (as
// a DNS resolver does): every Ask sends from the same address and port.
func DialUDPEchoConn(ctx context.Context, from Place, dst netip.AddrPort, timeout time.Duration) (*EchoConn, error) {
	conn, err := dialFrom(ctx, from, "udp4", dst, timeout)
	if err != nil {
		return nil, err
	}
	return &EchoConn{conn: conn, dst: dst}, nil
}

// Ask sends a line on the connection and returns the answer.
func (c *EchoConn) Ask(timeout time.Duration) (EchoAnswer, error) {
	a, err := askOn(c.conn, timeout)
	if err != nil {
		return a, fmt.Errorf("on the open connection to %s: %w", c.dst, err)
	}
	return a, nil
}

// Conn is the connection, for a client that writes and reads on it itself.
func (c *EchoConn) Conn() net.Conn { return c.conn }

// Close closes the connection.
func (c *EchoConn) Close() error {
	err := c.conn.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
