package podendpoint

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/winnet-io/winnet/internal/cni"
)

// Labels of the CNI metrics.
const (
	cniCommandAdd = string(cni.CommandAdd)
	cniCommandDel = string(cni.CommandDel)
)

// cniBuckets spans a fast ADD on an idle node (milliseconds) to a call held up by HNS (seconds).
var cniBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

var (
	cniRequestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "winnet",
		Subsystem: "cni",
		Name:      "request_duration_seconds",
		Help:      "Time the agent took to answer CNI requests, by command and result (success or the CNI error code).",
		Buckets:   cniBuckets,
	}, []string{"command", "result"})
	cniStepDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "winnet",
		Subsystem: "cni",
		Name:      "step_duration_seconds",
		Help:      "Time each step of the agent's CNI ADD and DEL took (ipam, endpoint, attach, port, flows, store; DEL: flows+port, endpoint, ipam, store).",
		Buckets:   cniBuckets,
	}, []string{"command", "step"})
	vnicToForwarding = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "winnet",
		Subsystem: "pod",
		Name:      "vnic_to_forwarding_seconds",
		Help:      "Time from a Pod's vNIC appearing (when the runtime starts the sandbox, after CNI ADD) to its OVS port forwarding.",
		Buckets:   cniBuckets,
	})
	policyWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "winnet",
		Subsystem: "pod",
		Name:      "policy_wait_seconds",
		Help:      "Time a new Pod's port waited, from CNI ADD's end, for the NetworkPolicy flows for the Pod to be committed before it could be bound.",
		Buckets:   cniBuckets,
	})
)

// observePolicyWait records how long a new Pod's port waited for its NetworkPolicy flows.
func observePolicyWait(took time.Duration) { policyWait.Observe(took.Seconds()) }

// observeVNIC records how long a Pod's port took to forward once its vNIC appeared.
func observeVNIC(took time.Duration) { vnicToForwarding.Observe(took.Seconds()) }

func init() {
	ctrlmetrics.Registry.MustRegister(cniRequestDuration, cniStepDuration, vnicToForwarding, policyWait)
}

// observeRequest records how long a CNI request took and how it ended (code 0: success).
func observeRequest(command string, took time.Duration, code uint) {
	result := "success"
	if code != 0 {
		result = fmt.Sprintf("error-%d", code)
	}
	cniRequestDuration.WithLabelValues(command, result).Observe(took.Seconds())
}

// stepTimer records how long each step of an ADD or DEL took, for the step metric and the debug
// log.
type stepTimer struct {
	command string
	last    time.Time
	steps   []string
}

func newStepTimer(command string) *stepTimer { return &stepTimer{command: command, last: time.Now()} }

func (s *stepTimer) done(step string) {
	now := time.Now()
	took := now.Sub(s.last)
	cniStepDuration.WithLabelValues(s.command, step).Observe(took.Seconds())
	s.steps = append(s.steps, fmt.Sprintf("%s=%s", step, took.Round(10*time.Microsecond)))
	s.last = now
}

func (s *stepTimer) String() string { return strings.Join(s.steps, " ") }
