package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/go-logr/logr"
)

// Handler executes CNI requests in the agent.
//
// Handle is called once per request, concurrently for different connections, with a context that
// ends when the handling deadline passes or the server stops. It returns the Response to send: an
// error Response (see ErrorResponse) for a failed command, the CNI result JSON in Result for a
// successful ADD, and an empty Response for any other success.
type Handler interface {
	Handle(ctx context.Context, req Request) Response
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req Request) Response

var _ Handler = HandlerFunc(nil)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, req Request) Response {
	return f(ctx, req)
}

const (
	// DefaultReadTimeout bounds reading a request once a connection is accepted.
	DefaultReadTimeout = 10 * time.Second
	// DefaultHandleTimeout bounds one Handler call; it matches the shim's DefaultRequestTimeout.
	DefaultHandleTimeout = DefaultRequestTimeout
	// DefaultWriteTimeout bounds writing the response.
	DefaultWriteTimeout = 10 * time.Second
	// DefaultMaxConnections bounds the connections served at once (reading a request, waiting,
	// being handled, writing the answer): one goroutine and one small buffer each. Beyond it the
	// server stops accepting until one ends, and new connections wait in the listener's backlog.
	DefaultMaxConnections = 4096
	// DefaultMaxConcurrent bounds the requests handled at once; the others wait for a slot.
	DefaultMaxConcurrent = 64
	// DefaultQueueTimeout bounds how long a request waits for a slot before it is answered with
	// ErrTryAgainLater (the runtime retries); it leaves the shim's request time to handle it.
	DefaultQueueTimeout = 30 * time.Second
)

// ServeOptions configures Serve's per-connection deadlines and bounds. Zero values select the
// defaults.
type ServeOptions struct {
	ReadTimeout   time.Duration
	HandleTimeout time.Duration
	WriteTimeout  time.Duration
	// MaxConnections bounds the connections served at once (DefaultMaxConnections). A connection
	// that has not sent its request holds no handling slot: idle connections never delay a
	// request that arrived.
	MaxConnections int
	// MaxConcurrent bounds the requests handled at once (DefaultMaxConcurrent).
	MaxConcurrent int
	// QueueTimeout bounds the wait for a handling slot (DefaultQueueTimeout).
	QueueTimeout time.Duration
}

func (o ServeOptions) withDefaults() ServeOptions {
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.HandleTimeout <= 0 {
		o.HandleTimeout = DefaultHandleTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.QueueTimeout <= 0 {
		o.QueueTimeout = DefaultQueueTimeout
	}
	return o
}

// limits are a server's semaphores.
type limits struct {
	conns, handlers chan struct{}
}

// Serve serves h on l with the default deadlines until ctx ends; see ServeWithOptions.
func Serve(ctx context.Context, l net.Listener, h Handler) error {
	return ServeWithOptions(ctx, l, h, ServeOptions{})
}

// ServeWithOptions accepts connections on l and answers the one Request each carries with h's
// Response. When ctx ends it closes l, waits for the requests in flight and returns nil; if accepting
// fails for another reason it closes l, waits likewise and returns that error. A request that violates
// the protocol is answered with a CNI error without calling h; a panic in h is answered with
// ErrInternal. At most opts.MaxConnections connections are served and opts.MaxConcurrent requests
// handled at once; a request that finds no handling slot within opts.QueueTimeout is answered with
// ErrTryAgainLater (11) without calling h. Problems with single connections are logged through the
// logr logger in ctx.
func ServeWithOptions(ctx context.Context, l net.Listener, h Handler, opts ServeOptions) error {
	opts = opts.withDefaults()
	log := logr.FromContextOrDiscard(ctx).WithValues("address", l.Addr().String())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { _ = l.Close() })
	defer stop()

	lim := limits{conns: make(chan struct{}, opts.MaxConnections), handlers: make(chan struct{}, opts.MaxConcurrent)}
	log.V(1).Info("Serving CNI requests", "maxConnections", opts.MaxConnections, "maxConcurrent", opts.MaxConcurrent)
	for {
		select {
		case lim.conns <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		conn, err := l.Accept()
		if err != nil {
			<-lim.conns
			if ctx.Err() != nil {
				return nil
			}
			_ = l.Close()
			return fmt.Errorf("accepting CNI connection on %q: %w", l.Addr().String(), err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-lim.conns }()
			serveConn(ctx, conn, h, opts, lim, log)
		}()
	}
}

// serveConn answers the one request on conn: it reads it, waits for a handling slot (bounded by
// opts.QueueTimeout, then ErrTryAgainLater), and calls h.
func serveConn(ctx context.Context, conn net.Conn, h Handler, opts ServeOptions, lim limits, log logr.Logger) {
	defer conn.Close()

	if err := conn.SetReadDeadline(time.Now().Add(opts.ReadTimeout)); err != nil {
		log.Error(err, "Setting read deadline on CNI connection failed")
		return
	}
	req, err := ReadRequest(conn)
	if err != nil {
		if !errors.Is(err, ErrProtocol) {
			log.Error(err, "Reading CNI request failed")
			return
		}
		log.Error(err, "Rejecting malformed CNI request")
		writeResponse(conn, ErrorResponse(types.ErrDecodingFailure, "malformed request from CNI shim", err.Error()), opts, log)
		return
	}

	if len(req.StdinData) > MaxConfigSize {
		writeResponse(conn, Response{Error: ConfigTooLarge(len(req.StdinData))}, opts, log)
		return
	}
	reqLog := log.WithValues("command", req.Command, "containerID", req.ContainerID, "ifName", req.IfName)
	queued := time.NewTimer(opts.QueueTimeout)
	select {
	case lim.handlers <- struct{}{}:
		queued.Stop()
	case <-queued.C:
		reqLog.Info("Too many CNI requests in flight: answering try again later", "maxConcurrent", opts.MaxConcurrent, "waited", opts.QueueTimeout)
		writeResponse(conn, ErrorResponse(types.ErrTryAgainLater,
			fmt.Sprintf("the winnet agent is handling %d requests; try again later", opts.MaxConcurrent), ""), opts, reqLog)
		return
	case <-ctx.Done():
		queued.Stop()
		writeResponse(conn, ErrorResponse(types.ErrTryAgainLater, "the winnet agent is stopping; try again later", ""), opts, reqLog)
		return
	}
	hctx, cancel := context.WithTimeout(logr.NewContext(ctx, reqLog), opts.HandleTimeout)
	resp := callHandler(hctx, h, req)
	cancel()
	<-lim.handlers

	if resp.Error == nil && len(resp.Result) > 0 && !json.Valid(resp.Result) {
		resp = ErrorResponse(types.ErrInternal, "winnet agent produced an invalid CNI result", "result is not valid JSON")
	}
	writeResponse(conn, resp, opts, reqLog)
}

// callHandler calls h, turning a panic into an ErrInternal response.
func callHandler(ctx context.Context, h Handler, req Request) (resp Response) {
	defer func() {
		if r := recover(); r != nil {
			logr.FromContextOrDiscard(ctx).Error(fmt.Errorf("panic: %v", r), "CNI handler panicked")
			resp = ErrorResponse(types.ErrInternal, "winnet agent failed while handling the request", fmt.Sprint(r))
		}
	}()
	return h.Handle(ctx, req)
}

func writeResponse(conn net.Conn, resp Response, opts ServeOptions, log logr.Logger) {
	if err := conn.SetWriteDeadline(time.Now().Add(opts.WriteTimeout)); err != nil {
		log.Error(err, "Setting write deadline on CNI connection failed")
		return
	}
	err := WriteResponse(conn, resp)
	if errors.Is(err, ErrMessageTooLarge) {
		// Nothing was written: tell the shim instead of leaving it with a closed connection.
		log.Error(err, "CNI response too large, answering with an error")
		err = WriteResponse(conn, ErrorResponse(types.ErrInternal, "winnet agent produced a response that is too large", err.Error()))
	}
	if err != nil {
		log.Error(err, "Writing CNI response failed")
	}
}
