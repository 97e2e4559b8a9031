package agent

import (
	"context"
	"fmt"

	eventsv1 "k8s.io/api/events/v1"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// EventComponent is the reportingController of winnet-agent's Events.
const EventComponent = "winnet-agent"

// NewEventRecorder returns winnet-agent's Event recorder (events.k8s.io/v1), whose Events carry the
// node's name as reportingInstance, as the kubelet's do. controller-runtime's recorder reports
// "<controller>-<hostname>", and a Windows host name is not the node name (it differs in case, or
// altogether with --hostname-override or a cloud provider's names): the chart's admission policy
// winnet-agent-events admits an agent's Event only when it names the node the agent's token is
// bound to. The API limits reportingInstance to 128 characters: on a node with a longer name the
// agent's Events are refused (they are logged all the same).
//
// The recorder sends from now on and stops when mgr stops.
func NewEventRecorder(mgr manager.Manager, nodeName string) (events.EventRecorder, error) {
	cl, err := eventsv1client.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("creating the events.k8s.io client: %w", err)
	}
	broadcaster := NewEventBroadcaster(cl, nodeName)
	ctx, cancel := context.WithCancel(context.Background())
	if err := mgr.Add(manager.RunnableFunc(func(stop context.Context) error {
		<-stop.Done()
		cancel()
		broadcaster.Shutdown()
		return nil
	})); err != nil {
		cancel()
		return nil, fmt.Errorf("adding the Event broadcaster to the manager: %w", err)
	}
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		cancel()
		return nil, fmt.Errorf("starting the Event broadcaster: %w", err)
	}
	return broadcaster.NewRecorder(mgr.GetScheme(), EventComponent), nil
}

// NewEventBroadcaster returns a broadcaster that writes Events through cl with reportingInstance
// nodeName (NewEventRecorder's); the caller starts and shuts it down.
func NewEventBroadcaster(cl eventsv1client.EventsV1Interface, nodeName string) events.EventBroadcaster {
	return events.NewBroadcaster(nodeEventSink{EventSink: &events.EventSinkImpl{Interface: cl}, nodeName: nodeName})
}

// nodeEventSink writes Events with reportingInstance the node's name. Series are patched into the
// Event first created (a patch carries only the series), so it keeps that reportingInstance.
type nodeEventSink struct {
	events.EventSink
	nodeName string
}

func (s nodeEventSink) Create(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	event = event.DeepCopy()
	event.ReportingInstance = s.nodeName
	return s.EventSink.Create(ctx, event)
}

func (s nodeEventSink) Update(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	event = event.DeepCopy()
	event.ReportingInstance = s.nodeName
	return s.EventSink.Update(ctx, event)
}
