package hns

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestWithTimeout(t *testing.T) {
	errBoom := errors.New("boom")
	const bound = 100 * time.Millisecond
	tests := []struct {
		name string
		// parent is the caller's context; nil means Background.
		parent   func() (context.Context, context.CancelFunc)
		fn       func(ctx context.Context) (int, error)
		want     int
		wantErr  error
		notErr   error
		maxTime  time.Duration
		minTime  time.Duration
		wantText string
	}{
		{
			name:    "result within the bound",
			fn:      func(context.Context) (int, error) { return 42, nil },
			want:    42,
			maxTime: bound,
		},
		{
			name:     "error wrapped with the operation",
			fn:       func(context.Context) (int, error) { return 0, errBoom },
			wantErr:  errBoom,
			notErr:   ErrTimeout,
			wantText: `doing "x": boom`,
			maxTime:  bound,
		},
		{
			name: "call that ignores its context times out at the bound",
			fn: func(context.Context) (int, error) {
				time.Sleep(time.Second)
				return 1, nil
			},
			wantErr:  ErrTimeout,
			minTime:  bound,
			maxTime:  bound + 400*time.Millisecond,
			wantText: `doing "x": HNS call timed out after 100ms`,
		},
		{
			name: "call that returns its expired context is a timeout",
			fn: func(ctx context.Context) (int, error) {
				<-ctx.Done()
				return 0, ctx.Err()
			},
			wantErr: ErrTimeout,
			minTime: bound,
			maxTime: bound + 400*time.Millisecond,
		},
		{
			name: "caller's cancellation is not a timeout",
			parent: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(20*time.Millisecond, cancel)
				return ctx, cancel
			},
			fn: func(context.Context) (int, error) {
				time.Sleep(time.Second)
				return 1, nil
			},
			wantErr: context.Canceled,
			notErr:  ErrTimeout,
			maxTime: bound,
		},
		{
			name: "caller's context already done: the call is not made",
			parent: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx, cancel
			},
			fn:      func(context.Context) (int, error) { panic("called") },
			wantErr: context.Canceled,
			maxTime: bound,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tt.parent != nil {
				ctx, cancel = tt.parent()
			}
			defer cancel()
			start := time.Now()
			got, err := withTimeout(ctx, bound, `doing "x"`, tt.fn)
			elapsed := time.Since(start)
			g.Expect(elapsed).To(BeNumerically("<", tt.maxTime))
			g.Expect(elapsed).To(BeNumerically(">=", tt.minTime))
			if tt.wantErr == nil {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got).To(Equal(tt.want))
				return
			}
			g.Expect(err).To(MatchError(tt.wantErr))
			g.Expect(err.Error()).To(HavePrefix(`doing "x": `))
			if tt.notErr != nil {
				g.Expect(errors.Is(err, tt.notErr)).To(BeFalse())
			}
			if tt.wantText != "" {
				g.Expect(err.Error()).To(Equal(tt.wantText))
			}
		})
	}
}
