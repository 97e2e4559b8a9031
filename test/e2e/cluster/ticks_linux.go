//go:build linux

package cluster

import (
	"sync"
	"time"
)

// TickProbe tries something every interval, each try in its own goroutine (a slow try does not delay
// the next), and records which failed, in the order they started: new connections, DNS lookups, a
// NodePort, while something else happens (an upgrade, a node moving, a soak).
type TickProbe struct {
	Name string

	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	results TickResults
}

// TickResult is one try: when it started and how it ended (nil: it succeeded).
type TickResult struct {
	At  time.Time
	Err error
}

// TickResults are a probe's tries in the order they started.
type TickResults []TickResult

// StartTicks starts trying try every interval until Finish.
func StartTicks(name string, interval time.Duration, try func() error) *TickProbe {
	p := &TickProbe{Name: name, stop: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case now := <-t.C:
				p.mu.Lock()
				i := len(p.results)
				p.results = append(p.results, TickResult{At: now})
				p.mu.Unlock()
				p.wg.Add(1)
				go func() {
					defer p.wg.Done()
					err := try()
					p.mu.Lock()
					p.results[i].Err = err
					p.mu.Unlock()
				}()
			}
		}
	}()
	return p
}

// Finish stops the ticks, waits for the tries in flight and returns every try.
func (p *TickProbe) Finish() TickResults {
	close(p.stop)
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.results
}

// Failures counts the tries that failed, and returns the first failure's error.
func (rs TickResults) Failures() (int, error) {
	n := 0
	var first error
	for _, r := range rs {
		if r.Err != nil {
			n++
			if first == nil {
				first = r.Err
			}
		}
	}
	return n, first
}

// Successes counts the tries that succeeded (for a probe of what must be refused: violations).
func (rs TickResults) Successes() int {
	n, _ := rs.Failures()
	return len(rs) - n
}

// FailedAt returns when each failed try started.
func (rs TickResults) FailedAt() []time.Time {
	var out []time.Time
	for _, r := range rs {
		if r.Err != nil {
			out = append(out, r.At)
		}
	}
	return out
}

// LongestGap is the longest window of failed tries: from the start of the first failed try to the
// start of the next successful one (or of the last try, when none succeeded after).
func (rs TickResults) LongestGap() time.Duration {
	var longest time.Duration
	var since time.Time
	for _, r := range rs {
		if r.Err != nil {
			if since.IsZero() {
				since = r.At
			}
			continue
		}
		if !since.IsZero() {
			longest = max(longest, r.At.Sub(since))
			since = time.Time{}
		}
	}
	if !since.IsZero() {
		longest = max(longest, rs[len(rs)-1].At.Sub(since))
	}
	return longest
}
