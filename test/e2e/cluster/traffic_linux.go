//go:build linux

package cluster

import (
	"bufio"
	"context"
	cryptorand "crypto/rand"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
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

// Attempt is one try of a check: a few echo requests and one TCP exchange.
type Attempt struct {
	// ICMPSent and ICMPReceived count the echo requests and replies.
	ICMPSent, ICMPReceived int
	ICMPErr                error
	// TCPSource is the source address the echo server at To saw; TCPErr why the exchange failed.
	TCPSource netip.Addr
	TCPErr    error
}

// Result is a check's outcome over every attempt Probe made: a packet lost or a TCP exchange failed in any
// attempt fails the check.
type Result struct {
	Check
	// Attempts holds every attempt in order.
	Attempts []Attempt
	// ICMPSent and ICMPReceived sum the echo requests and replies of every attempt.
	ICMPSent, ICMPReceived int
	// ICMPErr is the first attempt's error running ping, if any.
	ICMPErr error
	// TCPSource is the source address the echo server saw: a wrong one if any attempt saw one.
	TCPSource netip.Addr
	// TCPErr is the first attempt's failed TCP exchange, if any.
	TCPErr error
	// TCPOKAttempts counts the attempts whose TCP exchange worked from the wanted source.
	TCPOKAttempts int
}

// OK reports whether every echo request of every attempt was answered and every TCP exchange worked from
// the wanted source.
func (r Result) OK() bool { return r.ICMPOK() && r.TCPOK() }

// ICMPOK reports whether every echo request of every attempt was answered.
func (r Result) ICMPOK() bool {
	return r.ICMPErr == nil && r.ICMPSent > 0 && r.ICMPReceived == r.ICMPSent
}

// TCPOK reports whether every TCP exchange worked and the destination saw the wanted source.
func (r Result) TCPOK() bool {
	return r.TCPErr == nil && len(r.Attempts) > 0 && r.TCPOKAttempts == len(r.Attempts)
}

func (r Result) wantSource() netip.Addr {
	if r.WantSource.IsValid() {
		return r.WantSource
	}
	return r.From.IP
}

// add records an attempt in the result's totals.
func (r *Result) add(a Attempt) {
	r.Attempts = append(r.Attempts, a)
	r.ICMPSent += a.ICMPSent
	r.ICMPReceived += a.ICMPReceived
	if r.ICMPErr == nil && a.ICMPErr != nil {
		r.ICMPErr = fmt.Errorf("attempt %d: %w", len(r.Attempts), a.ICMPErr)
	}
	if r.TCPErr == nil && a.TCPErr != nil {
		r.TCPErr = fmt.Errorf("attempt %d: %w", len(r.Attempts), a.TCPErr)
	}
	if a.TCPErr == nil && a.TCPSource == r.wantSource() {
		r.TCPOKAttempts++
	}
	if a.TCPErr == nil && (!r.TCPSource.IsValid() || a.TCPSource != r.wantSource()) {
		r.TCPSource = a.TCPSource
	}
}

// Probe runs the checks concurrently, each attempts times (ping and a TCP exchange per attempt), and returns
// their results in order. Every attempt counts: a check passes only if all of them did, so intermittent loss
// shows. Echo servers are started in the destination namespaces as needed and stopped at the end. After a
// change that takes time to converge, wait with WaitReachable first.
func (c *Cluster) Probe(ctx context.Context, checks []Check, attempts int) []Result {
	servers, errs := serveEchoes(checks)
	defer closeEchoes(servers)
	results := make([]Result, len(checks))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, ch := range checks {
		results[i].Check = ch
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			for a := 0; a < max(attempts, 1); a++ {
				results[i].add(probe(ctx, ch, errs[ch.To.NS]))
			}
		}()
	}
	wg.Wait()
	return results
}

// WaitReachable waits until every check has passed one attempt, after a change the data plane takes time to
// converge on (a new encapsulation, a node rebooted, a network recreated: the first packets to a new tunnel
// peer are dropped while ovs-vswitchd resolves the peer's MAC), and returns how long that took and the
// attempts that failed meanwhile (one line each: the row, when, what was lost), for the test to report. It
// only waits: measure with Probe afterwards, where every attempt counts.
func (c *Cluster) WaitReachable(ctx context.Context, checks []Check, timeout time.Duration) (time.Duration, []string, error) {
	start := time.Now()
	servers, errs := serveEchoes(checks)
	defer closeEchoes(servers)
	pending := checks
	var failed []string
	for {
		var still []Check
		var last Attempt
		for _, ch := range pending {
			var r Result
			r.Check = ch
			tried := time.Since(start)
			r.add(probe(ctx, ch, errs[ch.To.NS]))
			if !r.OK() {
				still, last = append(still, ch), r.Attempts[0]
				failed = append(failed, fmt.Sprintf("%s -> %s over %s at %v: ICMP %d/%d, TCP source %v, %v",
					ch.From, ch.To, ch.Path, tried.Round(time.Millisecond), last.ICMPReceived, last.ICMPSent, last.TCPSource, last.TCPErr))
			}
		}
		if len(still) == 0 {
			return time.Since(start), failed, nil
		}
		if time.Since(start) > timeout {
			return time.Since(start), failed, fmt.Errorf("%s -> %s over %s not reachable within %v (ICMP %d/%d %v; TCP source %v, %v)",
				still[0].From, still[0].To, still[0].Path, timeout, last.ICMPReceived, last.ICMPSent, last.ICMPErr, last.TCPSource, last.TCPErr)
		}
		pending = still
		time.Sleep(200 * time.Millisecond)
	}
}

// Lines formats lines for a log message after its first line: each on its own line, indented; nothing for
// none.
func Lines(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return ":\n\t" + strings.Join(lines, "\n\t") + "\n"
}

// serveEchoes starts an echo server in every destination namespace of the checks; errs holds the namespaces
// where none could start.
func serveEchoes(checks []Check) (map[string]*EchoServer, map[string]error) {
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
	return servers, errs
}

func closeEchoes(servers map[string]*EchoServer) {
	for _, s := range servers {
		s.Close()
	}
}

func probe(ctx context.Context, ch Check, serverErr error) Attempt {
	var a Attempt
	a.ICMPSent, a.ICMPReceived, a.ICMPErr = Ping(ch.From, ch.To.IP, 2)
	if serverErr != nil {
		a.TCPErr = serverErr
		return a
	}
	a.TCPSource, a.TCPErr = DialEcho(ctx, ch.From, netip.AddrPortFrom(ch.To.IP, EchoPort), 2*time.Second)
	return a
}

// pingWait is how long Ping waits for a reply before it counts the request as lost: long enough that a reply
// delayed by a loaded machine (userspace OVS shares the CPUs with everything else) is not taken for a loss,
// which is what the connectivity rows count. Ping returns as soon as every reply came.
const pingWait = 3 * time.Second

// Ping sends count echo requests from a place to dst, 0.1 s apart, and returns how many were sent and how many
// were answered within pingWait of the last one (it returns as soon as all were). Loss is not an error; a
// ping that cannot run is.
func Ping(from Place, dst netip.Addr, count int) (sent, received int, err error) {
	s, err := startPinger(from, dst, 100*time.Millisecond, count)
	if err != nil {
		return 0, 0, fmt.Errorf("ping %s from %s: %w", dst, from, err)
	}
	s.sending.Wait()
	deadline := time.Now().Add(pingWait)
	for s.answered() < count && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	_ = s.conn.Close()
	<-s.receiving
	return count, s.answered(), nil
}

// EchoServer answers every TCP connection with the source address it sees and closes it (ServeEcho), or
// echoes back what the connection sends until it closes (ServeLines). It listens inside a network namespace:
// a socket belongs to the namespace it was created in, whichever thread serves it.
type EchoServer struct {
	l      net.Listener
	handle func(net.Conn)
	done   chan struct{}
}

// ServeEcho starts a server on 0.0.0.0:port inside the namespace at path that answers each connection with
// the client address it sees.
func ServeEcho(path string, port int) (*EchoServer, error) {
	return serveIn(path, port, func(conn net.Conn) {
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if ap, err := netip.ParseAddrPort(conn.RemoteAddr().String()); err == nil {
			_, _ = fmt.Fprintf(conn, "%s\n", ap.Addr().Unmap())
		}
	})
}

// ServeLines starts a server on 0.0.0.0:port inside the namespace at path that echoes back what each
// connection sends, for connections kept open across changes (policy, an API server outage).
func ServeLines(path string, port int) (*EchoServer, error) {
	return serveIn(path, port, func(conn net.Conn) { _, _ = io.Copy(conn, conn) })
}

func serveIn(path string, port int, handle func(net.Conn)) (*EchoServer, error) {
	var l net.Listener
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listening on port %d in %s: %w", port, path, err)
	}
	s := &EchoServer{l: l, handle: handle, done: make(chan struct{})}
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
			s.handle(conn)
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

// SteadyPing sends one ICMP echo request every interval from a place in the background, for counting the
// packets a disruption loses and how long it lasts. It is a pinger of its own (a raw socket in the place's
// namespace) rather than ping(8), so that it knows when each request was sent: every request counts, those of
// an outage that lasts until Stop too.
type SteadyPing struct {
	conn     *icmp.PacketConn
	dst      netip.Addr
	id       int
	interval time.Duration
	limit    int // requests to send; 0: until Stop
	start    time.Time

	mu      sync.Mutex
	sent    []time.Time // sent[i]: when request i (icmp_seq i mod 2^16) left
	replied []time.Time // replied[i]: when its reply came, zero while none did
	sendErr error       // the first request the kernel refused (a missing route): counted as lost

	stopSending chan struct{}
	sending     sync.WaitGroup
	receiving   chan struct{}
}

// replyWait is how long Stop waits for the replies to the last requests: a reply later than that counts as a
// loss, as for ping -W 1.
const replyWait = time.Second

// StartSteadyPing starts pinging dst from a place every interval (at least 10 ms).
func StartSteadyPing(from Place, dst netip.Addr, interval time.Duration) (*SteadyPing, error) {
	return startPinger(from, dst, max(interval, 10*time.Millisecond), 0)
}

// startPinger sends an echo request every interval, limit of them (0: until Stop).
func startPinger(from Place, dst netip.Addr, interval time.Duration, limit int) (*SteadyPing, error) {
	bind := "0.0.0.0"
	if from.BindSource {
		bind = from.IP.String()
	}
	var conn *icmp.PacketConn
	err := ns.WithNetNSPath(nsPath(from.NS), func(ns.NetNS) error {
		var err error
		conn, err = icmp.ListenPacket("ip4:icmp", bind) // the socket stays in this namespace
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("opening an ICMP socket in %s: %w", from.NS, err)
	}
	idb := make([]byte, 2)
	_, _ = cryptorand.Read(idb)
	s := &SteadyPing{conn: conn, dst: dst, id: int(idb[0])<<8 | int(idb[1]), interval: interval, limit: limit,
		start: time.Now(), stopSending: make(chan struct{}), receiving: make(chan struct{})}
	go s.receive()
	s.sending.Add(1)
	go s.send()
	return s, nil
}

func (s *SteadyPing) send() {
	defer s.sending.Done()
	t := time.NewTicker(s.interval)
	defer t.Stop()
	payload := make([]byte, 56)
	for {
		s.mu.Lock()
		seq := len(s.sent)
		s.sent = append(s.sent, time.Now())
		s.replied = append(s.replied, time.Time{})
		s.mu.Unlock()
		msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: s.id, Seq: seq & 0xffff, Data: payload}}
		b, _ := msg.Marshal(nil)
		if _, err := s.conn.WriteTo(b, &net.IPAddr{IP: net.IP(s.dst.AsSlice())}); err != nil {
			s.mu.Lock()
			if s.sendErr == nil {
				s.sendErr = err
			}
			s.mu.Unlock()
		}
		if s.limit > 0 && seq+1 >= s.limit {
			return
		}
		select {
		case <-s.stopSending:
			return
		case <-t.C:
		}
	}
}

// answered counts the requests answered so far.
func (s *SteadyPing) answered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.replied {
		if !r.IsZero() {
			n++
		}
	}
	return n
}

func (s *SteadyPing) receive() {
	defer close(s.receiving)
	buf := make([]byte, 1500)
	for {
		n, peer, err := s.conn.ReadFrom(buf)
		if err != nil {
			return // closed by Stop
		}
		now := time.Now()
		m, err := icmp.ParseMessage(1, buf[:n])
		if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
			continue
		}
		echo, ok := m.Body.(*icmp.Echo)
		ip, _ := peer.(*net.IPAddr)
		if !ok || echo.ID != s.id || ip == nil || !ip.IP.Equal(net.IP(s.dst.AsSlice())) {
			continue
		}
		s.mu.Lock()
		// The latest request with this sequence number (they wrap after 65,536 requests).
		for i := len(s.sent) - 1; i >= 0; i-- {
			if i&0xffff == echo.Seq {
				if s.replied[i].IsZero() {
					s.replied[i] = now
				}
				break
			}
		}
		s.mu.Unlock()
	}
}

// PingStats summarise a steady ping over its whole window, from its start to Stop.
type PingStats struct {
	// Sent counts every request; Received those answered within replyWait of Stop.
	Sent, Received int
	// LongestGap is the longest time without a reply in the window (from the start to the first reply,
	// between two replies, from the last reply to Stop) less one interval: how long the path was down.
	LongestGap time.Duration
	// SendErr is the first request the kernel refused to send (counted as lost).
	SendErr error
	// LostAt holds when each request without a reply left.
	LostAt []time.Time

	replies []time.Time
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

// Lost is the number of requests without a reply: every request sent before Stop had at least replyWait for
// its reply, so an outage lasting until Stop counts in full.
func (s PingStats) Lost() int { return s.Sent - s.Received }

func (s PingStats) String() string {
	return fmt.Sprintf("%d sent, %d lost, longest gap %v", s.Sent, s.Lost(), s.LongestGap.Round(time.Millisecond))
}

// Stop stops sending, waits replyWait for the replies to the last requests and summarises the whole window.
// It fails only when no request was answered at all.
func (s *SteadyPing) Stop() (PingStats, error) {
	close(s.stopSending)
	s.sending.Wait()
	stopped := time.Now()
	time.Sleep(replyWait)
	_ = s.conn.Close()
	<-s.receiving

	s.mu.Lock()
	defer s.mu.Unlock()
	st := PingStats{Sent: len(s.sent), SendErr: s.sendErr}
	for i, r := range s.replied {
		if !r.IsZero() && r.Sub(s.sent[i]) <= replyWait {
			st.Received++
			st.replies = append(st.replies, r)
		} else {
			st.LostAt = append(st.LostAt, s.sent[i])
		}
	}
	if st.Received == 0 {
		return st, fmt.Errorf("no reply at all from %s (%d requests; send error: %v)", s.dst, st.Sent, s.sendErr)
	}
	sort.Slice(st.replies, func(i, j int) bool { return st.replies[i].Before(st.replies[j]) })
	last := s.start
	for _, r := range append(st.replies, stopped) {
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
		if !r.TCPOK() {
			tcp = fmt.Sprintf("%d/%d FAIL", r.TCPOKAttempts, len(r.Attempts))
		}
		if !r.TCPSource.IsValid() {
			seen = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.From, r.To, r.Path, icmp, tcp, seen, r.wantSource())
	}
	_ = w.Flush()
	for _, r := range results {
		for i, a := range r.Attempts {
			if a.ICMPErr != nil || a.ICMPReceived != a.ICMPSent {
				fmt.Fprintf(&b, "  %s -> %s, attempt %d of %d: ICMP %d/%d %v\n", r.From.Label, r.To.Label, i+1, len(r.Attempts), a.ICMPReceived, a.ICMPSent, a.ICMPErr)
			}
			if a.TCPErr != nil || a.TCPSource != r.wantSource() {
				fmt.Fprintf(&b, "  %s -> %s, attempt %d of %d: TCP source %v: %v\n", r.From.Label, r.To.Label, i+1, len(r.Attempts), a.TCPSource, a.TCPErr)
			}
		}
	}
	return b.String()
}
