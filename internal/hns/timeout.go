package hns

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// withTimeout runs fn in its own goroutine and waits at most d for it. When fn does not return in time, or
// returns only because its context expired, the result is ErrTimeout wrapped with op; fn's goroutine is left to
// finish on its own (HNS calls cannot be cancelled) and its late result is discarded. When the caller's ctx ends
// first, its error is returned wrapped with op. Errors fn returns are wrapped with op.
func withTimeout[T any](ctx context.Context, d time.Duration, op string, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("%s: %w", op, err)
	}
	callCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()

	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1) // buffered: a late fn must not block forever
	go func() {
		v, err := fn(callCtx)
		done <- result{v: v, err: err}
	}()

	timedOut := func() (T, error) {
		if err := ctx.Err(); err != nil {
			return zero, fmt.Errorf("%s: %w", op, err)
		}
		return zero, fmt.Errorf("%s: %w after %s", op, ErrTimeout, d)
	}
	select {
	case r := <-done:
		if r.err == nil {
			return r.v, nil
		}
		if callCtx.Err() != nil && errors.Is(r.err, callCtx.Err()) {
			return timedOut()
		}
		return zero, fmt.Errorf("%s: %w", op, r.err)
	case <-callCtx.Done():
		return timedOut()
	}
}

// withTimeoutErr is withTimeout for calls that return only an error.
func withTimeoutErr(ctx context.Context, d time.Duration, op string, fn func(context.Context) error) error {
	_, err := withTimeout(ctx, d, op, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, fn(ctx)
	})
	return err
}

// bounded makes a raw implementation keep the Interface contract on timeouts and error context: every call goes
// through withTimeout with the bound of its class. Every implementation (hcn, simulators) is wrapped in it.
type bounded struct {
	raw      Interface
	timeouts Timeouts
	// deleting holds the endpoint deletes in progress, by upper-case endpoint ID.
	deleteMu sync.Mutex
	deleting map[string]*deleteCall
}

var _ Interface = (*bounded)(nil)

func newBounded(raw Interface, t Timeouts) *bounded {
	return &bounded{raw: raw, timeouts: t.withDefaults()}
}

func (b *bounded) GetNetworkByName(ctx context.Context, name string) (*Network, error) {
	return withTimeout(ctx, b.timeouts.Default, fmt.Sprintf("getting network %q", name),
		func(ctx context.Context) (*Network, error) { return b.raw.GetNetworkByName(ctx, name) })
}

func (b *bounded) CreateTransparentNetwork(ctx context.Context, spec NetworkSpec) (*Network, error) {
	return withTimeout(ctx, b.timeouts.Network,
		fmt.Sprintf("creating Transparent network %q on adapter %q", spec.Name, spec.AdapterName),
		func(ctx context.Context) (*Network, error) { return b.raw.CreateTransparentNetwork(ctx, spec) })
}

func (b *bounded) DeleteNetwork(ctx context.Context, networkID string) error {
	return withTimeoutErr(ctx, b.timeouts.Network, fmt.Sprintf("deleting network %q", networkID),
		func(ctx context.Context) error { return b.raw.DeleteNetwork(ctx, networkID) })
}

func (b *bounded) EnableOVSExtension(ctx context.Context, networkID string) error {
	return withTimeoutErr(ctx, b.timeouts.Network, fmt.Sprintf("enabling the OVS extension on network %q", networkID),
		func(ctx context.Context) error { return b.raw.EnableOVSExtension(ctx, networkID) })
}

func (b *bounded) OVSExtensionEnabled(ctx context.Context, networkID string) (bool, error) {
	return withTimeout(ctx, b.timeouts.Default, fmt.Sprintf("querying the OVS extension on network %q", networkID),
		func(ctx context.Context) (bool, error) { return b.raw.OVSExtensionEnabled(ctx, networkID) })
}

func (b *bounded) CreateEndpoint(ctx context.Context, spec EndpointSpec) (*Endpoint, error) {
	return withTimeout(ctx, b.timeouts.Default,
		fmt.Sprintf("creating endpoint %q on network %q", spec.Name, spec.NetworkID),
		func(ctx context.Context) (*Endpoint, error) { return b.raw.CreateEndpoint(ctx, spec) })
}

func (b *bounded) GetEndpointByName(ctx context.Context, name string) (*Endpoint, error) {
	return withTimeout(ctx, b.timeouts.Default, fmt.Sprintf("getting endpoint %q", name),
		func(ctx context.Context) (*Endpoint, error) { return b.raw.GetEndpointByName(ctx, name) })
}

func (b *bounded) ListEndpoints(ctx context.Context, networkID string) ([]Endpoint, error) {
	return withTimeout(ctx, b.timeouts.Default, fmt.Sprintf("listing endpoints of network %q", networkID),
		func(ctx context.Context) ([]Endpoint, error) { return b.raw.ListEndpoints(ctx, networkID) })
}

// DeleteEndpoint deletes the endpoint with at most one call outstanding per endpoint. HNS endpoint
// deletes are known to hang, and a hung call cannot be cancelled: a caller that times out leaves its
// call running, and a retry (kubelet repeats DEL) joins that call instead of starting another, so
// hung calls never pile up. Once the call returns, the next delete starts afresh (a no-op when the
// endpoint is gone).
func (b *bounded) DeleteEndpoint(ctx context.Context, endpointID string) error {
	op := fmt.Sprintf("deleting endpoint %q", endpointID)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	key := strings.ToUpper(endpointID)
	b.deleteMu.Lock()
	call := b.deleting[key]
	if call == nil {
		call = &deleteCall{done: make(chan struct{})}
		if b.deleting == nil {
			b.deleting = map[string]*deleteCall{}
		}
		b.deleting[key] = call
		go func() {
			call.err = b.raw.DeleteEndpoint(context.WithoutCancel(ctx), endpointID)
			b.deleteMu.Lock()
			delete(b.deleting, key)
			b.deleteMu.Unlock()
			close(call.done)
		}()
	}
	b.deleteMu.Unlock()
	timer := time.NewTimer(b.timeouts.EndpointDelete)
	defer timer.Stop()
	select {
	case <-call.done:
		if call.err != nil {
			return fmt.Errorf("%s: %w", op, call.err)
		}
		return nil
	case <-timer.C:
		return fmt.Errorf("%s: %w after %s (the call goes on; a retry waits for it)", op, ErrTimeout, b.timeouts.EndpointDelete)
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", op, ctx.Err())
	}
}

// deleteCall is an endpoint delete in progress: done closes when it returned with err.
type deleteCall struct {
	done chan struct{}
	err  error
}

func (b *bounded) AttachEndpoint(ctx context.Context, endpointID, namespaceID string) error {
	return withTimeoutErr(ctx, b.timeouts.Default,
		fmt.Sprintf("attaching endpoint %q to namespace %q", endpointID, namespaceID),
		func(ctx context.Context) error { return b.raw.AttachEndpoint(ctx, endpointID, namespaceID) })
}

func (b *bounded) DetachEndpoint(ctx context.Context, endpointID, namespaceID string) error {
	return withTimeoutErr(ctx, b.timeouts.Default,
		fmt.Sprintf("detaching endpoint %q from namespace %q", endpointID, namespaceID),
		func(ctx context.Context) error { return b.raw.DetachEndpoint(ctx, endpointID, namespaceID) })
}
