//go:build linux

package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// EchoPort is the TCP port of the echo servers the harness runs in every namespace it probes.
const EchoPort = 5201

// Place is where probe traffic starts or ends: a namespace and the address used there.
type Place struct {
	// Label names the place in tables ("node-a", "pod-a1", "external").
	Label string
	NS    string
	IP    netip.Addr
	// BindSource makes traffic from this place use IP as its source (ping -I, a bound TCP socket); otherwise
	// the namespace's routing picks it.
	BindSource bool
}

func (p Place) String() string { return fmt.Sprintf("%s (%s)", p.Label, p.IP) }

// Host is the node's host stack, sourcing from its node IP.
func (n *Node) Host() Place { return Place{Label: n.Name, NS: n.NS, IP: n.IP} }

// GatewayPlace is the node's gateway address, used as the source of node-level traffic over the tunnel.
func (n *Node) GatewayPlace() Place {
	return Place{Label: n.Name + " gw", NS: n.NS, IP: n.Gateway, BindSource: true}
}

// Place is the Pod.
func (p *Pod) Place() Place { return Place{Label: p.Name, NS: p.NS, IP: p.IP} }

// ExternalPlace is the external host on its SNATed address; ExcludedPlace on the address excluded from SNAT.
func (c *Cluster) ExternalPlace() Place {
	return Place{Label: "external", NS: c.External.NS, IP: c.ExternalIP}
}

// ExcludedPlace is the external host on the address every node excludes from SNAT.
func (c *Cluster) ExcludedPlace() Place {
	return Place{Label: "external (excluded)", NS: c.External.NS, IP: c.ExcludedIP}
}

// Check is one row of the connectivity matrix.
type Check struct {
	From, To Place
	// Path says what carries the traffic ("same node", "vxlan", "geneve", "routed", "snat", ...).
	Path string
	// WantSource is the source address To must see; invalid means From.IP (no NAT).
	WantSource netip.Addr
}

// Result is a check's outcome.
type Result struct {
	Check
	// ICMPSent and ICMPReceived count the echo requests and replies.
	ICMPSent, ICMPReceived int
	ICMPErr                error
	// TCPSource is the source address the echo server at To saw; TCPErr why the exchange failed.
	TCPSource netip.Addr
	TCPErr    error
}

// OK reports whether every echo request was answered and the TCP exchange worked from the wanted source.
func (r Result) OK() bool { return r.ICMPOK() && r.TCPOK() }

// ICMPOK reports whether every echo request was answered.
func (r Result) ICMPOK() bool {
	return r.ICMPErr == nil && r.ICMPSent > 0 && r.ICMPReceived == r.ICMPSent
}

// TCPOK reports whether the TCP exchange worked and the destination saw the wanted source.
func (r Result) TCPOK() bool { return r.TCPErr == nil && r.TCPSource == r.wantSource() }

func (r Result) wantSource() netip.Addr {
	if r.WantSource.IsValid() {
		return r.WantSource
	}
	return r.From.IP
}

// Probe runs the checks concurrently (ping and a TCP exchange each, retried until both pass or attempts are
// used up) and returns their results in order. Echo servers are started in the destination namespaces as needed
// and stopped at the end.
func (c *Cluster) Probe(ctx context.Context, checks []Check, attempts int) []Result {
	servers := map[string]*EchoServer{}
	errs := map[string]error{}
	for _, ch := range checks {
		if _, ok := servers[ch.To.NS]; ok || errs[ch.To.NS] != nil {
			continue
		}
		s, err := ServeEcho(nsPath(ch.To.NS), EchoPort)
		if err != nil {
			errs[ch.To.NS] = err
			continue
		}
		servers[ch.To.NS] = s
	}
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	results := make([]Result, len(checks))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, ch := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			for a := 0; a < max(attempts, 1); a++ {
				results[i] = probe(ctx, ch, errs[ch.To.NS])
				if results[i].OK() {
					return
				}
				time.Sleep(300 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return results
}

func probe(ctx context.Context, ch Check, serverErr error) Result {
	r := Result{Check: ch}
	r.ICMPSent, r.ICMPReceived, r.ICMPErr = Ping(ch.From, ch.To.IP, 2)
	if serverErr != nil {
		r.TCPErr = serverErr
		return r
	}
	r.TCPSource, r.TCPErr = DialEcho(ctx, ch.From, netip.AddrPortFrom(ch.To.IP, EchoPort), 2*time.Second)
	return r
}

var pingStats = regexp.MustCompile(`(\d+) packets transmitted, (\d+) (?:packets )?received`)

// Ping sends count echo requests from a place to dst, 0.1 s apart, each waiting at most 1 s, and returns how
// many were sent and answered. Loss is not an error; a ping that cannot run is.
func Ping(from Place, dst netip.Addr, count int) (sent, received int, err error) {
	args := []string{"ip", "netns", "exec", from.NS, "ping", "-n", "-q", "-c", strconv.Itoa(count), "-i", "0.1", "-W", "1"}
	if from.BindSource {
		args = append(args, "-I", from.IP.String())
	}
	out, err := exec.Command(args[0], append(args[1:], dst.String())...).CombinedOutput()
	m := pingStats.FindStringSubmatch(string(out))
	if m == nil {
		return 0, 0, fmt.Errorf("ping %s from %s: %v: %s", dst, from, err, strings.TrimSpace(string(out)))
	}
	sent, _ = strconv.Atoi(m[1])
	received, _ = strconv.Atoi(m[2])
	return sent, received, nil
}

// EchoServer answers every TCP connection with the source address it sees and closes it. It listens inside a
// network namespace: a socket belongs to the namespace it was created in, whichever thread serves it.
type EchoServer struct {
	l    net.Listener
	done chan struct{}
}

// ServeEcho starts an echo server on 0.0.0.0:port inside the namespace at path.
func ServeEcho(path string, port int) (*EchoServer, error) {
	var l net.Listener
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listening on port %d in %s: %w", port, path, err)
	}
	s := &EchoServer{l: l, done: make(chan struct{})}
	go s.serve()
	return s, nil
}

func (s *EchoServer) serve() {
	defer close(s.done)
	for {
		conn, err := s.l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			if ap, err := netip.ParseAddrPort(conn.RemoteAddr().String()); err == nil {
				_, _ = fmt.Fprintf(conn, "%s\n", ap.Addr().Unmap())
			}
		}()
	}
}

// Close stops the server.
func (s *EchoServer) Close() {
	_ = s.l.Close()
	<-s.done
}

// DialEcho connects from a place to an echo server and returns the source address the server saw.
func DialEcho(ctx context.Context, from Place, dst netip.AddrPort, timeout time.Duration) (netip.Addr, error) {
	var seen netip.Addr
	err := ns.WithNetNSPath(nsPath(from.NS), func(ns.NetNS) error {
		d := net.Dialer{Timeout: timeout}
		if from.BindSource {
			d.LocalAddr = &net.TCPAddr{IP: net.IP(from.IP.AsSlice())}
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		conn, err := d.DialContext(ctx, "tcp4", dst.String())
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(timeout))
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			return fmt.Errorf("reading the echo: %w", err)
		}
		seen, err = netip.ParseAddr(strings.TrimSpace(line))
		return err
	})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("TCP to %s from %s: %w", dst, from, err)
	}
	return seen, nil
}

// SteadyPing is a ping running in the background, one echo request every interval, for counting the packets
// a disruption loses and how long it lasts.
type SteadyPing struct {
	cmd      *exec.Cmd
	out      strings.Builder
	done     chan struct{}
	interval time.Duration
}

// StartSteadyPing starts pinging dst from a place every interval (at least 10 ms).
func StartSteadyPing(from Place, dst netip.Addr, interval time.Duration) (*SteadyPing, error) {
	interval = max(interval, 10*time.Millisecond)
	args := []string{"netns", "exec", from.NS, "ping", "-n", "-D", "-O", "-W", "1",
		"-i", strconv.FormatFloat(interval.Seconds(), 'f', 3, 64)}
	if from.BindSource {
		args = append(args, "-I", from.IP.String())
	}
	s := &SteadyPing{cmd: exec.Command("ip", append(args, dst.String())...), done: make(chan struct{}), interval: interval}
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting ping: %w", err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()
	return s, nil
}

// PingStats summarise a steady ping.
type PingStats struct {
	Sent, Received int
	// LongestGap is the longest time without a reply (between two replies, or from the last one to Stop) less
	// one interval: how long the path was down.
	LongestGap time.Duration

	replies []time.Time
	// unanswered counts the echo requests without a reply up to the last one answered: requests sent
	// after it were still in flight when ping was stopped (it exits on SIGINT without waiting for them),
	// unless the path went down, which LongestGap shows.
	unanswered int
}

// FirstReplyAfter returns how long after t the first reply arrived, and false when none did.
func (s PingStats) FirstReplyAfter(t time.Time) (time.Duration, bool) {
	for _, r := range s.replies {
		if !r.Before(t) {
			return r.Sub(t), true
		}
	}
	return 0, false
}

// Lost is the number of echo requests without a reply, not counting those still in flight at the end.
func (s PingStats) Lost() int { return s.unanswered }

func (s PingStats) String() string {
	return fmt.Sprintf("%d sent, %d lost, longest gap %v", s.Sent, s.Lost(), s.LongestGap.Round(time.Millisecond))
}

var replyLine = regexp.MustCompile(`^\[(\d+\.\d+)\] \d+ bytes from .*icmp_seq=(\d+)`)

// Stop stops the ping after waiting one more second for replies still in flight, and summarises it.
func (s *SteadyPing) Stop() (PingStats, error) {
	stopped := time.Now()
	time.Sleep(time.Second)
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	out := s.out.String()
	m := pingStats.FindStringSubmatch(out)
	if m == nil {
		return PingStats{}, fmt.Errorf("ping printed no statistics: %s", out)
	}
	var st PingStats
	st.Sent, _ = strconv.Atoi(m[1])
	st.Received, _ = strconv.Atoi(m[2])
	var stamps []float64
	seen := map[int]bool{}
	lastSeq := 0
	for _, line := range strings.Split(out, "\n") {
		if r := replyLine.FindStringSubmatch(line); r != nil {
			seq, _ := strconv.Atoi(r[2])
			if seen[seq] { // a duplicate reply
				continue
			}
			seen[seq] = true
			lastSeq = max(lastSeq, seq)
			ts, _ := strconv.ParseFloat(r[1], 64)
			stamps = append(stamps, ts)
		}
	}
	if len(stamps) == 0 {
		return st, errors.New("no reply at all")
	}
	st.unanswered = lastSeq - len(seen) // icmp_seq counts from 1
	sort.Float64s(stamps)
	for _, ts := range stamps {
		st.replies = append(st.replies, time.Unix(0, int64(ts*float64(time.Second))))
	}
	last := st.replies[0]
	for _, r := range append(st.replies[1:], stopped) {
		st.LongestGap = max(st.LongestGap, r.Sub(last)-s.interval)
		last = r
	}
	return st, nil
}

// FormatTable renders results as a table, one row per check.
func FormatTable(results []Result) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "FROM\tTO\tPATH\tICMP\tTCP\tSOURCE SEEN\tWANT SOURCE\t")
	for _, r := range results {
		icmp := fmt.Sprintf("%d/%d", r.ICMPReceived, r.ICMPSent)
		if !r.ICMPOK() {
			icmp += " FAIL"
		}
		tcp, seen := "ok", r.TCPSource.String()
		if r.TCPErr != nil {
			tcp, seen = "FAIL", "-"
		} else if !r.TCPOK() {
			tcp = "FAIL"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.From, r.To, r.Path, icmp, tcp, seen, r.wantSource())
	}
	_ = w.Flush()
	for _, r := range results {
		if r.ICMPErr != nil {
			fmt.Fprintf(&b, "  %s -> %s: %v\n", r.From.Label, r.To.Label, r.ICMPErr)
		}
		if r.TCPErr != nil {
			fmt.Fprintf(&b, "  %s -> %s: %v\n", r.From.Label, r.To.Label, r.TCPErr)
		}
	}
	return b.String()
}
