package agent

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
)

// recordingSink keeps what it was given.
type recordingSink struct{ created, updated, patched []*eventsv1.Event }

func (s *recordingSink) Create(_ context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	s.created = append(s.created, e)
	return e, nil
}

func (s *recordingSink) Update(_ context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	s.updated = append(s.updated, e)
	return e, nil
}

func (s *recordingSink) Patch(_ context.Context, e *eventsv1.Event, _ []byte) (*eventsv1.Event, error) {
	s.patched = append(s.patched, e)
	return e, nil
}

// TestNodeEventSink: the agent's Events are written with the node's name as reportingInstance (what
// the chart's admission policy winnet-agent-events checks), not client-go's "<controller>-<hostname>",
// and the broadcaster's own copy (its series cache) is left as it was.
func TestNodeEventSink(t *testing.T) {
	g := NewWithT(t)
	inner := &recordingSink{}
	sink := nodeEventSink{EventSink: inner, nodeName: "win-a"}
	ev := &eventsv1.Event{ReportingController: EventComponent, ReportingInstance: EventComponent + "-WIN-3KJH2G1", Note: "n"}

	_, err := sink.Create(context.Background(), ev)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = sink.Update(context.Background(), ev)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = sink.Patch(context.Background(), ev, []byte(`{}`))
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(inner.created).To(ConsistOf(HaveField("ReportingInstance", "win-a")))
	g.Expect(inner.updated).To(ConsistOf(HaveField("ReportingInstance", "win-a")))
	g.Expect(inner.created[0].ReportingController).To(Equal(EventComponent))
	g.Expect(inner.patched).To(ConsistOf(BeIdenticalTo(ev)), "a series patch carries only the series")
	g.Expect(ev.ReportingInstance).To(Equal(EventComponent+"-WIN-3KJH2G1"), "the caller's Event is not changed")
}
