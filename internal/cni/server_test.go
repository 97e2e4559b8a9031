package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/peertrust"
	"github.com/winnet-io/winnet/test/wine"
)

// recorder is a test Handler that records requests and answers with respond.
type recorder struct {
	mu       sync.Mutex
	requests []Request
	respond  func(ctx context.Context, req Request) Response
}

func (r *recorder) Handle(ctx context.Context, req Request) Response {
	r.mu.Lock()
	r.requests = append(r.requests, req)
	r.mu.Unlock()
	if r.respond == nil {
		return Response{}
	}
	return r.respond(ctx, req)
}

func (r *recorder) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.requests...)
}

// startServer serves h on a fresh address and stops it when t ends, checking that Serve returned nil.
func startServer(t *testing.T, h Handler, opts ServeOptions) string {
	t.Helper()
	address := testAddress(t)
	ctx, cancel := context.WithCancel(context.Background())
	l, err := Listen(ctx, address)
	if err != nil {
		cancel()
		t.Fatalf("Listen(%q): %v", address, err)
	}
	wine.AfterListen(t, address)
	done := make(chan error, 1)
	go func() { done <- ServeWithOptions(ctx, l, h, opts) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve returned %v, want nil after cancellation", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not return within 10s of cancellation")
		}
	})
	return address
}

// newTestClient is NewClient with, under Wine only, the check of the server that Wine allows (see
// wine.ServerVerifier): elsewhere the platform's check applies, as in production.
func newTestClient(opts ClientOptions) *Client {
	if opts.Server == nil {
		opts.Server = wine.ServerVerifier()
	}
	return NewClient(opts)
}

var addRequest = Request{
	Command:     CommandAdd,
	ContainerID: "c0ffee",
	Netns:       "/var/run/netns/pod",
	IfName:      "eth0",
	Args:        "K8S_POD_NAME=web-0",
	Path:        "/opt/cni/bin",
	StdinData:   []byte(`{"cniVersion":"1.1.0","name":"winnet","type":"winnet-cni"}`),
}

func TestClientServerRoundTrip(t *testing.T) {
	const result = `{"cniVersion":"1.1.0","ips":[{"address":"10.244.1.5/24","gateway":"10.244.1.1"}]}`
	tests := []struct {
		name    string
		respond func(context.Context, Request) Response
		want    Response
	}{
		{
			name:    "result",
			respond: func(context.Context, Request) Response { return Response{Result: json.RawMessage(result)} },
			want:    Response{Result: json.RawMessage(result)},
		},
		{
			name: "CNI error reaches the client unchanged",
			respond: func(context.Context, Request) Response {
				return ErrorResponse(types.ErrInvalidNetworkConfig, "pod CIDR not assigned", "node n1")
			},
			want: Response{Error: &types.Error{Code: 7, Msg: "pod CIDR not assigned", Details: "node n1"}},
		},
		{
			name:    "handler panic becomes an internal error",
			respond: func(context.Context, Request) Response { panic("HNS exploded") },
			want:    Response{Error: &types.Error{Code: types.ErrInternal, Msg: "winnet agent failed while handling the request", Details: "HNS exploded"}},
		},
		{
			name:    "invalid result JSON becomes an internal error",
			respond: func(context.Context, Request) Response { return Response{Result: json.RawMessage(`{"ips":`)} },
			want:    Response{Error: &types.Error{Code: types.ErrInternal, Msg: "winnet agent produced an invalid CNI result", Details: "result is not valid JSON"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rec := &recorder{respond: tt.respond}
			address := startServer(t, rec, ServeOptions{})

			resp, err := newTestClient(ClientOptions{Address: address}).Do(context.Background(), addRequest)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(resp.Error).To(Equal(tt.want.Error))
			if tt.want.Result != nil {
				g.Expect(resp.Result).To(MatchJSON(tt.want.Result))
			} else {
				g.Expect(resp.Result).To(BeEmpty())
			}
			g.Expect(rec.Requests()).To(HaveLen(1))
			got := rec.Requests()[0]
			g.Expect(got.Command).To(Equal(addRequest.Command))
			g.Expect(got.ContainerID).To(Equal(addRequest.ContainerID))
			g.Expect(got.Netns).To(Equal(addRequest.Netns))
			g.Expect(got.IfName).To(Equal(addRequest.IfName))
			g.Expect(got.Args).To(Equal(addRequest.Args))
			g.Expect(got.Path).To(Equal(addRequest.Path))
			g.Expect(got.StdinData).To(Equal(addRequest.StdinData))
		})
	}
}

func TestServeAnswersConcurrentRequests(t *testing.T) {
	g := NewWithT(t)
	rec := &recorder{respond: func(_ context.Context, req Request) Response {
		return Response{Result: json.RawMessage(fmt.Sprintf(`{"containerID":%q}`, req.ContainerID))}
	}}
	address := startServer(t, rec, ServeOptions{})
	client := newTestClient(ClientOptions{Address: address})

	const n = 32
	var wg sync.WaitGroup
	errs := make([]error, n)
	results := make([]string, n)
	for i := range n {
		wg.Go(func() {
			req := addRequest
			req.ContainerID = fmt.Sprintf("c%d", i)
			resp, err := client.Do(context.Background(), req)
			errs[i], results[i] = err, string(resp.Result)
		})
	}
	wg.Wait()
	for i := range n {
		g.Expect(errs[i]).NotTo(HaveOccurred())
		g.Expect(results[i]).To(MatchJSON(fmt.Sprintf(`{"containerID":"c%d"}`, i)))
	}
	g.Expect(rec.Requests()).To(HaveLen(n))
}

// rawExchange writes raw bytes to the server at address and returns its decoded answer.
func rawExchange(g *WithT, address string, raw []byte) (Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := Dial(ctx, address)
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	g.Expect(conn.SetDeadline(time.Now().Add(10 * time.Second))).To(Succeed())
	_, err = conn.Write(raw)
	g.Expect(err).NotTo(HaveOccurred())
	return ReadResponse(conn)
}

func TestServeRejectsMalformedRequests(t *testing.T) {
	tests := []struct {
		name       string
		raw        []byte
		wantDetail string
	}{
		{name: "malformed JSON", raw: framed([]byte(`{"command":"ADD",`)), wantDetail: "decoding message: unexpected end of JSON input"},
		{name: "oversized", raw: frame(MaxMessageSize+1, nil), wantDetail: "message larger than 8388608 bytes"},
		{name: "unknown command", raw: framed([]byte(`{"command":"FLY","stdinData":"e30="}`)), wantDetail: `unknown command "FLY"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rec := &recorder{}
			address := startServer(t, rec, ServeOptions{})

			resp, err := rawExchange(g, address, tt.raw)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(resp.Error).NotTo(BeNil())
			g.Expect(resp.Error.Code).To(Equal(types.ErrDecodingFailure))
			g.Expect(resp.Error.Msg).To(Equal("malformed request from CNI shim"))
			g.Expect(resp.Error.Details).To(ContainSubstring(tt.wantDetail))
			g.Expect(rec.Requests()).To(BeEmpty(), "the handler is not called for a malformed request")
		})
	}
}

func TestServeReadDeadline(t *testing.T) {
	g := NewWithT(t)
	rec := &recorder{}
	address := startServer(t, rec, ServeOptions{ReadTimeout: 200 * time.Millisecond})

	conn, err := Dial(context.Background(), address)
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	// Send half a header and stall: the server must give up and close the connection.
	_, err = conn.Write([]byte{0, 0})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(conn.SetReadDeadline(time.Now().Add(5 * time.Second))).To(Succeed())
	start := time.Now()
	_, err = conn.Read(make([]byte, 1))
	g.Expect(err).To(HaveOccurred())
	var ne net.Error
	g.Expect(errors.As(err, &ne) && ne.Timeout()).To(BeFalse(), "the server closed the connection before the client's own deadline: %v", err)
	g.Expect(time.Since(start)).To(BeNumerically("<", 4*time.Second))
	g.Expect(rec.Requests()).To(BeEmpty())
}

func TestServeHandleTimeoutCancelsHandlerContext(t *testing.T) {
	g := NewWithT(t)
	rec := &recorder{respond: func(ctx context.Context, _ Request) Response {
		<-ctx.Done()
		return ErrorResponse(types.ErrTryAgainLater, "handler gave up", ctx.Err().Error())
	}}
	address := startServer(t, rec, ServeOptions{HandleTimeout: 200 * time.Millisecond})

	resp, err := newTestClient(ClientOptions{Address: address}).Do(context.Background(), addRequest)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.Error).To(Equal(&types.Error{Code: 11, Msg: "handler gave up", Details: context.DeadlineExceeded.Error()}))
}

func TestServeStopsAndWaitsForRequestsInFlight(t *testing.T) {
	g := NewWithT(t)
	address := testAddress(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, err := Listen(ctx, address)
	g.Expect(err).NotTo(HaveOccurred())
	wine.AfterListen(t, address)

	entered := make(chan struct{})
	var handlerSawCancel atomic.Bool
	h := HandlerFunc(func(hctx context.Context, _ Request) Response {
		close(entered)
		<-hctx.Done()
		time.Sleep(100 * time.Millisecond) // still busy after the server was told to stop
		handlerSawCancel.Store(true)
		return ErrorResponse(types.ErrTryAgainLater, "agent shutting down", "")
	})
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, l, h) }()

	type answer struct {
		resp Response
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := newTestClient(ClientOptions{Address: address}).Do(context.Background(), addRequest)
		answered <- answer{resp, err}
	}()
	g.Eventually(entered).WithTimeout(10 * time.Second).Should(BeClosed())
	cancel()

	g.Eventually(served).WithTimeout(10 * time.Second).Should(Receive(BeNil()))
	g.Expect(handlerSawCancel.Load()).To(BeTrue(), "Serve returned before the request in flight finished")
	var a answer
	g.Eventually(answered).WithTimeout(10 * time.Second).Should(Receive(&a))
	g.Expect(a.err).NotTo(HaveOccurred())
	g.Expect(a.resp.Error).To(Equal(&types.Error{Code: 11, Msg: "agent shutting down"}))

	// The listener is closed: new requests find no agent.
	_, err = newTestClient(ClientOptions{Address: address, DialTimeout: time.Second}).Do(context.Background(), addRequest)
	g.Expect(err).To(MatchError(ErrAgentUnreachable))
}

func TestClientErrors(t *testing.T) {
	// silentServer accepts connections, reads what arrives and answers with reply (nothing if nil).
	silentServer := func(t *testing.T, reply []byte) string {
		t.Helper()
		address := testAddress(t)
		l, err := Listen(context.Background(), address)
		if err != nil {
			t.Fatalf("Listen: %v", err)
		}
		wine.AfterListen(t, address)
		var wg sync.WaitGroup
		t.Cleanup(func() { _ = l.Close(); wg.Wait() })
		wg.Go(func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				wg.Go(func() {
					defer conn.Close()
					_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
					if _, err := ReadRequest(conn); err != nil {
						return
					}
					if reply != nil {
						_, _ = conn.Write(reply)
						return
					}
					_, _ = conn.Read(make([]byte, 1)) // wait for the client to give up
				})
			}
		})
		return address
	}

	tests := []struct {
		name        string
		address     func(t *testing.T) string
		ctx         func() (context.Context, context.CancelFunc)
		timeout     time.Duration
		wantIs      []error
		wantNotIs   []error
		wantMessage string
	}{
		{
			name:        "nothing at the address",
			address:     testAddress,
			wantIs:      []error{ErrAgentUnreachable},
			wantMessage: "dialing",
		},
		{
			name:      "agent never answers: request timeout",
			address:   func(t *testing.T) string { return silentServer(t, nil) },
			timeout:   300 * time.Millisecond,
			wantIs:    []error{context.DeadlineExceeded},
			wantNotIs: []error{ErrAgentUnreachable, ErrProtocol},
		},
		{
			name:    "agent never answers: caller's context cancelled",
			address: func(t *testing.T) string { return silentServer(t, nil) },
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(300*time.Millisecond, cancel)
				return ctx, cancel
			},
			wantIs:    []error{context.Canceled},
			wantNotIs: []error{ErrAgentUnreachable, ErrProtocol},
		},
		{
			name:        "oversized response",
			address:     func(t *testing.T) string { return silentServer(t, frame(MaxMessageSize+1, nil)) },
			wantIs:      []error{ErrMessageTooLarge, ErrProtocol},
			wantMessage: "message larger than",
		},
		{
			name:        "malformed response",
			address:     func(t *testing.T) string { return silentServer(t, framed([]byte(`{"result":`))) },
			wantIs:      []error{ErrProtocol},
			wantMessage: "decoding message",
		},
		{
			name:        "agent closes without answering",
			address:     func(t *testing.T) string { return silentServer(t, []byte{}) },
			wantNotIs:   []error{ErrAgentUnreachable, ErrProtocol},
			wantMessage: "reading message header: EOF",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			address := tt.address(t)
			ctx, cancel := context.WithCancel(context.Background())
			if tt.ctx != nil {
				ctx, cancel = tt.ctx()
			}
			defer cancel()
			client := newTestClient(ClientOptions{Address: address, RequestTimeout: tt.timeout})

			start := time.Now()
			_, err := client.Do(ctx, addRequest)
			g.Expect(err).To(HaveOccurred())
			g.Expect(time.Since(start)).To(BeNumerically("<", 5*time.Second))
			// The client quotes the address (%q): a Windows pipe name's backslashes come doubled.
			g.Expect(err.Error()).To(ContainSubstring(strconv.Quote(address)))
			g.Expect(err.Error()).To(ContainSubstring(tt.wantMessage))
			for _, target := range tt.wantIs {
				g.Expect(errors.Is(err, target)).To(BeTrue(), "error %q should wrap %q", err, target)
			}
			for _, target := range tt.wantNotIs {
				g.Expect(errors.Is(err, target)).To(BeFalse(), "error %q should not wrap %q", err, target)
			}
		})
	}
}

func TestNewClientDefaults(t *testing.T) {
	g := NewWithT(t)
	c := NewClient(ClientOptions{})
	g.Expect(c.Address()).To(Equal(DefaultAddress))
	g.Expect(c.dialTimeout).To(Equal(DefaultDialTimeout))
	g.Expect(c.requestTimeout).To(Equal(DefaultRequestTimeout))
}

// TestServeRefusesConfigurationOverTheLimit: a request whose configuration exceeds MaxConfigSize (from a
// client other than the shim, which refuses it itself) is answered with code 7 naming the limit, and the
// handler never sees it.
func TestServeRefusesConfigurationOverTheLimit(t *testing.T) {
	g := NewWithT(t)
	rec := &recorder{}
	address := startServer(t, rec, ServeOptions{})
	conf := append([]byte(`{"cniVersion":"1.1.0","name":"n","x":"`), bytes.Repeat([]byte("x"), MaxConfigSize)...)
	conf = append(conf, `"}`...)
	resp, err := newTestClient(ClientOptions{Address: address}).Do(context.Background(), Request{Command: CommandAdd, ContainerID: "c", StdinData: conf})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.Error).NotTo(BeNil())
	g.Expect(resp.Error.Code).To(BeEquivalentTo(types.ErrInvalidNetworkConfig))
	g.Expect(resp.Error.Msg).To(ContainSubstring("limit of 4194304 bytes"))
	g.Expect(rec.Requests()).To(BeEmpty())
}

// TestServeBoundsConcurrentRequests: with MaxConcurrent requests being handled, the next one waits
// for a slot; one that waits longer than QueueTimeout is answered try-again-later (code 11) without
// reaching the handler, and one whose slot frees in time is handled.
func TestServeBoundsConcurrentRequests(t *testing.T) {
	g := NewWithT(t)
	release := make(chan struct{})
	var inHandler atomic.Int32
	rec := &recorder{respond: func(ctx context.Context, req Request) Response {
		inHandler.Add(1)
		defer inHandler.Add(-1)
		if req.ContainerID != "quick" {
			<-release
		}
		return Response{}
	}}
	address := startServer(t, rec, ServeOptions{MaxConcurrent: 2, QueueTimeout: 500 * time.Millisecond})
	client := newTestClient(ClientOptions{Address: address})
	do := func(id string) chan Response {
		ch := make(chan Response, 1)
		go func() {
			req := addRequest
			req.ContainerID = id
			resp, err := client.Do(context.Background(), req)
			if err != nil {
				resp = ErrorResponse(types.ErrInternal, err.Error(), "")
			}
			ch <- resp
		}()
		return ch
	}
	first, second := do("slow-1"), do("slow-2")
	g.Eventually(inHandler.Load).Should(BeEquivalentTo(2))

	start := time.Now()
	excess := <-do("quick")
	g.Expect(excess.Error).NotTo(BeNil())
	g.Expect(excess.Error.Code).To(BeEquivalentTo(types.ErrTryAgainLater))
	g.Expect(time.Since(start)).To(BeNumerically(">=", 500*time.Millisecond), "it waited for a slot first")
	g.Expect(rec.Requests()).To(HaveLen(2), "the excess request never reached the handler")

	waiting := do("quick")
	time.Sleep(100 * time.Millisecond)
	close(release)
	g.Expect((<-waiting).Error).To(BeNil(), "a slot freed while it waited")
	g.Expect((<-first).Error).To(BeNil())
	g.Expect((<-second).Error).To(BeNil())
}

// TestServeIdleConnectionsDoNotDelayARequest: 1,000 connections that never send a request hold no
// handling slot: a request arriving after them is answered at once.
func TestServeIdleConnectionsDoNotDelayARequest(t *testing.T) {
	g := NewWithT(t)
	address := startServer(t, &recorder{}, ServeOptions{MaxConcurrent: 4, ReadTimeout: time.Minute})
	for range 1000 {
		conn, err := Dial(context.Background(), address)
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { _ = conn.Close() })
	}
	start := time.Now()
	resp, err := newTestClient(ClientOptions{Address: address, RequestTimeout: 10 * time.Second}).Do(context.Background(), addRequest)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.Error).To(BeNil())
	t.Logf("ADD answered in %s behind 1000 idle connections", time.Since(start))
	g.Expect(time.Since(start)).To(BeNumerically("<", 5*time.Second))
}

// refuse is a ServerVerifier that refuses every server.
type refuse struct{}

func (refuse) Verify(net.Conn) error {
	return fmt.Errorf("server process 42: user S-1-5-21-1-2-3-1001: %w", peertrust.ErrUntrustedServer)
}

// TestClientSendsNothingToAnUntrustedServer: when the server end is not the node's administrators'
// (a user created the pipe's name while the agent was down), the client sends nothing and reports
// the agent unreachable, saying why.
func TestClientSendsNothingToAnUntrustedServer(t *testing.T) {
	g := NewWithT(t)
	rec := &recorder{}
	address := startServer(t, rec, ServeOptions{})
	_, err := NewClient(ClientOptions{Address: address, Server: refuse{}}).Do(context.Background(), addRequest)
	g.Expect(err).To(MatchError(ErrAgentUnreachable))
	g.Expect(err).To(MatchError(peertrust.ErrUntrustedServer))
	time.Sleep(100 * time.Millisecond)
	g.Expect(rec.Requests()).To(BeEmpty(), "nothing was sent")
}

// TestClientsPlatformCheckTrustsTheTestsServer: the platform's check (the default) trusts a server
// run by this test's user: root on Linux, an elevated administrator on Windows.
func TestClientsPlatformCheckTrustsTheTestsServer(t *testing.T) {
	g := NewWithT(t)
	rec := &recorder{}
	address := startServer(t, rec, ServeOptions{})
	_, err := NewClient(ClientOptions{Address: address}).Do(context.Background(), addRequest)
	g.Expect(err).NotTo(HaveOccurred(), "the platform's check trusts a server run by this test's user")
	g.Expect(rec.Requests()).To(HaveLen(1))
}
