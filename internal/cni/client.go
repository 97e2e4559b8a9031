package cni

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/winnet-io/winnet/internal/peertrust"
)

const (
	// DefaultDialTimeout bounds connecting to the agent.
	DefaultDialTimeout = 5 * time.Second
	// DefaultRequestTimeout bounds one request, from dialing to the last byte of the response, when
	// the caller's context has no earlier deadline. HNS operations on Windows can be slow, so it is
	// generous; kubelet retries failed sandbox setups on its own.
	DefaultRequestTimeout = 2 * time.Minute
)

// ErrAgentUnreachable is wrapped by Client.Do when no connection to the agent could be made (the
// socket or pipe does not exist, nobody listens on it, or dialing timed out).
var ErrAgentUnreachable = errors.New("winnet agent is not reachable")

// ClientOptions configures a Client.
type ClientOptions struct {
	// Address is the agent's unix socket path (Linux) or named pipe path (Windows).
	// Empty means DefaultAddress.
	Address string
	// DialTimeout bounds connecting; zero means DefaultDialTimeout.
	DialTimeout time.Duration
	// RequestTimeout bounds the whole request; zero means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Server checks, on every connection and before anything is sent, that the agent's end is run
	// by the node's administrators; nil means peertrust.NewVerifier() (the named pipe's server
	// process on Windows, the socket's peer on Linux).
	Server ServerVerifier
}

// ServerVerifier checks who serves the other end of a connection (peertrust.Verifier).
type ServerVerifier interface {
	Verify(conn net.Conn) error
}

// Client sends Requests to the agent, one connection per request.
type Client struct {
	server         ServerVerifier
	address        string
	dialTimeout    time.Duration
	requestTimeout time.Duration
}

// NewClient returns a Client for the agent described by opts.
func NewClient(opts ClientOptions) *Client {
	c := &Client{
		server:         opts.Server,
		address:        opts.Address,
		dialTimeout:    opts.DialTimeout,
		requestTimeout: opts.RequestTimeout,
	}
	if c.address == "" {
		c.address = DefaultAddress
	}
	if c.server == nil {
		c.server = peertrust.NewVerifier()
	}
	if c.dialTimeout <= 0 {
		c.dialTimeout = DefaultDialTimeout
	}
	if c.requestTimeout <= 0 {
		c.requestTimeout = DefaultRequestTimeout
	}
	return c
}

// Address returns the socket or pipe path the client dials.
func (c *Client) Address() string {
	return c.address
}

// Do sends req to the agent and returns its Response. The returned error reports only a failure to
// exchange the messages: it wraps ErrAgentUnreachable when no connection could be made, ErrProtocol
// when the agent's answer violates the protocol, and the context's error when ctx ended first. A CNI
// error decided by the agent is returned in Response.Error with a nil error.
func (c *Client) Do(ctx context.Context, req Request) (Response, error) {
	if err := req.Validate(); err != nil {
		return Response{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()

	dialCtx, dialCancel := context.WithTimeout(ctx, c.dialTimeout)
	conn, err := Dial(dialCtx, c.address)
	dialCancel()
	if err != nil {
		return Response{}, fmt.Errorf("dialing %q: %w: %w", c.address, ErrAgentUnreachable, err)
	}
	defer conn.Close()
	// A user may create the pipe's name while the agent is down: send nothing to a server that is
	// not the node's administrators'.
	if err := c.server.Verify(conn); err != nil {
		return Response{}, fmt.Errorf("checking who serves %q: %w: %w", c.address, ErrAgentUnreachable, err)
	}

	resp, err := exchange(ctx, conn, req)
	if err != nil {
		if ctxErr := contextError(ctx, err); ctxErr != nil {
			return Response{}, fmt.Errorf("%s request to winnet agent at %q: %w (%w)", req.Command, c.address, ctxErr, err)
		}
		return Response{}, fmt.Errorf("%s request to winnet agent at %q: %w", req.Command, c.address, err)
	}
	return resp, nil
}

// contextError returns the context error that caused the I/O error err, or nil. The connection's
// deadline equals ctx's, so a read can time out an instant before ctx reports DeadlineExceeded.
func contextError(ctx context.Context, err error) error {
	if errors.Is(err, ErrProtocol) {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if deadline, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// exchange writes req on conn and reads the Response, within ctx's deadline and until ctx ends.
func exchange(ctx context.Context, conn net.Conn, req Request) (Response, error) {
	if deadline, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(deadline); err != nil {
			return Response{}, fmt.Errorf("setting connection deadline: %w", err)
		}
	}
	// Unblock pending reads and writes as soon as ctx is cancelled.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	if err := WriteRequest(conn, req); err != nil {
		return Response{}, err
	}
	return ReadResponse(conn)
}
