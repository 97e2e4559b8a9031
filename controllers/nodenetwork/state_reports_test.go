package nodenetwork

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestCountReportsAreCoalesced: the node's status is written at once for a change of what a condition
// says, and at most once per interval for changes of counts only, however many there are (a cluster
// adding Services, policies or Nodes, every agent seeing each). A first count change after a quiet
// interval is written at once.
func TestCountReportsAreCoalesced(t *testing.T) {
	s := NewState()
	const interval = 300 * time.Millisecond
	s.countInterval = interval
	reports := s.watchReports("node-a")
	var wakes atomic.Int64
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-reports:
				wakes.Add(1)
			case <-done:
				return
			}
		}
	}()
	waitFor := func(want int64, why string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); wakes.Load() != want; {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d wake-ups, want %d", why, wakes.Load(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// The first reports of each reconciler are written at once.
	s.SetRoutes(RoutesResult{})
	s.SetServices(ServicesResult{})
	s.SetPolicies(PoliciesResult{})
	if got := wakes.Load(); got < 1 {
		waitFor(1, "first reports")
	}
	time.Sleep(2 * interval)
	base := wakes.Load()

	// A first count change after a quiet interval: at once.
	s.SetServices(ServicesResult{Services: 1, Ports: 1})
	waitFor(base+1, "a count change after a quiet interval")

	// 300 count changes in a burst: held back, then one wake-up for all.
	for i := 2; i < 102; i++ {
		s.SetServices(ServicesResult{Services: i, Ports: i})
		s.SetRoutes(RoutesResult{Desired: i, Installed: i})
		s.SetPolicies(PoliciesResult{Policies: i, Rules: i})
	}
	if got := wakes.Load(); got > base+2 {
		t.Fatalf("a burst of 300 count changes woke the reconciler %d times at once", got-base-1)
	}
	waitFor(base+2, "the burst's held-back report")
	time.Sleep(2 * interval)
	if got := wakes.Load(); got != base+2 {
		t.Fatalf("%d wake-ups after the burst's report, want none", got-base-2)
	}

	// A failure is written at once, even within the interval.
	s.SetServices(ServicesResult{Services: 102, Ports: 102})
	waitFor(base+3, "a count change after a quiet interval")
	s.SetServices(ServicesResult{Err: "the switch refused the bundle"})
	waitFor(base+4, "a failure right after a count change")
	s.SetRoutes(RoutesResult{Desired: 101, Installed: 100, Failed: []string{"node-x: no route"}})
	waitFor(base+5, "a failed route")
}

// TestStatusShowsPublishedCounts: what the status is written from is the reports as of the last
// wake-up of the reconciler; counts changed since wait for the next one, even when something else
// makes the reconciler write the status meanwhile (its own status write comes back to it).
func TestStatusShowsPublishedCounts(t *testing.T) {
	s := NewState()
	s.countInterval = time.Hour
	reports := s.watchReports("node-a")
	s.SetServices(ServicesResult{Services: 1, Ports: 1})
	<-reports
	if got, _ := s.servicesResult(); got.Services != 1 {
		t.Fatalf("the first report is published at once: status shows %d Services", got.Services)
	}
	s.SetServices(ServicesResult{Services: 2, Ports: 2})
	if got, _ := s.servicesResult(); got.Services != 1 {
		t.Fatalf("a count change within the interval is held back: status shows %d Services, want 1", got.Services)
	}
	s.SetServices(ServicesResult{Services: 2, Ports: 2, Err: "refused"})
	<-reports
	if got, _ := s.servicesResult(); got.Services != 2 || got.Err != "refused" {
		t.Fatalf("a failure is published at once with the counts: status shows %+v", got)
	}
}
