//go:build (upgrade || soak) && linux

package upgrade

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/winnet-io/winnet/test/e2e/cluster"
)

// The probes run for a whole phase (an upgrade, a rollback, a restart) and say what Pods saw meanwhile. Each
// keeps its own clock: what it measures is the time between real packets, not the test's steps.

// streamProbe holds a TCP connection open and sends a line every 10 ms, reading the echo server's answers.
// A stall is the time between two answers; a reset is a connection that failed (it dials again, counted once).
type streamProbe struct {
	name string
	from cluster.Place
	dst  netip.AddrPort

	mu        sync.Mutex
	sent      int
	answered  int
	resets    int
	lastErr   error
	last      time.Time // the last answer (or the start)
	maxStall  time.Duration
	stallAt   time.Time // when the longest stall ended
	stop      chan struct{}
	done      chan struct{}
	connected bool
}

func startStream(name string, from cluster.Place, dst netip.AddrPort) (*streamProbe, error) {
	p := &streamProbe{name: name, from: from, dst: dst, stop: make(chan struct{}), done: make(chan struct{})}
	conn, err := dial(from, dst, 3*time.Second)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p.last = time.Now()
	go p.run(conn)
	return p, nil
}

func dial(from cluster.Place, dst netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ec, err := cluster.DialEchoConn(ctx, from, dst, timeout)
	if err != nil {
		return nil, err
	}
	return ec.Conn(), nil
}

func (p *streamProbe) run(conn net.Conn) {
	defer close(p.done)
	for {
		err := p.session(conn)
		select {
		case <-p.stop:
			return
		default:
		}
		p.mu.Lock()
		p.resets++
		p.lastErr = err
		p.mu.Unlock()
		// Dial again until it works or the probe stops.
		for {
			conn, err = dial(p.from, p.dst, time.Second)
			if err == nil {
				break
			}
			select {
			case <-p.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// session sends and reads on conn until it fails or the probe stops.
func (p *streamProbe) session(conn net.Conn) error {
	defer conn.Close()
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(conn)
		for sc.Scan() {
			now := time.Now()
			p.mu.Lock()
			p.answered++
			if gap := now.Sub(p.last); gap > p.maxStall {
				p.maxStall, p.stallAt = gap, now
			}
			p.last = now
			p.mu.Unlock()
		}
		err := sc.Err()
		if err == nil {
			err = errors.New("the server closed the connection")
		}
		readErr <- err
	}()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return nil
		case err := <-readErr:
			return err
		case <-t.C:
			// A write blocks only when the send buffer is full: TCP keeps the bytes while the path is down.
			_ = conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := conn.Write([]byte("x\n")); err != nil {
				return err
			}
			p.mu.Lock()
			p.sent++
			p.mu.Unlock()
		}
	}
}

type streamResult struct {
	name             string
	sent, answered   int
	resets           int
	lastErr          error
	maxStall         time.Duration
	stallEndedAt     time.Time
	answeredAtTheEnd bool
}

// finish stops the probe: it waits up to 5 s for the last answers first, so that the lines in flight count.
func (p *streamProbe) finish() streamResult {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		caught := p.answered >= p.sent
		p.mu.Unlock()
		if caught {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return streamResult{name: p.name, sent: p.sent, answered: p.answered, resets: p.resets, lastErr: p.lastErr,
		maxStall: p.maxStall, stallEndedAt: p.stallAt, answeredAtTheEnd: p.answered >= p.sent}
}

// connectOnce opens a TCP connection from a place to dst and reads the echo server's answer to one line.
func connectOnce(from cluster.Place, dst netip.AddrPort, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := cluster.AskEcho(ctx, from, "tcp4", dst, timeout)
	return err
}

// lookupOnce resolves name through the cluster DNS from a place.
func lookupOnce(from cluster.Place, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ips, err := cluster.LookupIn(ctx, "/run/netns/"+from.NS, cluster.DNSServiceIP, name)
	if err == nil && len(ips) == 0 {
		err = fmt.Errorf("no address for %s", name)
	}
	return err
}

// logPrefix starts every line logf writes: the make target whose log it is.
var logPrefix = "test-upgrade"

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, logPrefix+": "+format+"\n", args...) }

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	os.Exit(m.Run())
}
