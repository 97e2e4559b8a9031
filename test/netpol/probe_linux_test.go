//go:build linux

package netpol

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mattfenwick/cyclonus/pkg/connectivity/probe"
	corev1 "k8s.io/api/core/v1"

	"github.com/winnet-io/winnet/test/framework"
)

// probeTimeout bounds one probe: a TCP connection must be established and answered, or a UDP
// datagram answered, within it; otherwise the cell is blocked. Blocked packets are dropped without
// an answer, so a blocked cell always takes the whole timeout; all cells of a step run at once.
const probeTimeout = 2 * time.Second

// udpResend is how often a UDP probe sends its datagram again while it has no answer.
const udpResend = 250 * time.Millisecond

// Probes use source ports from this range, each once, so that no probe can hit a conntrack entry
// an earlier probe left (policy evaluates only new connections; a reused 5-tuple would be seen as
// established). A full run makes about 60,000 probes: the counter wraps after some 20 minutes,
// far beyond the conntrack timeouts of closed TCP and idle UDP connections.
const firstSourcePort, lastSourcePort = 20000, 60999

var sourcePorts atomic.Uint32

func nextSourcePort() int {
	return firstSourcePort + int(sourcePorts.Add(1)%uint32(lastSourcePort-firstSourcePort+1))
}

// realRunner is a cyclonus probe.JobRunner that sends real packets: for each job, a new connection
// from the source Pod's network namespace to the destination Pod's address and port. A Pod's
// traffic to itself never reaches OVS on Windows (it stays in the Pod's compartment), so the
// loopback cells are not probed and left unknown.
type realRunner struct {
	pods map[string]*framework.TestPod
}

var _ probe.JobRunner = (*realRunner)(nil)

func (r *realRunner) RunJobs(jobs []*probe.Job) []*probe.JobResult {
	out := make([]*probe.JobResult, len(jobs))
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = r.run(job)
		}()
	}
	wg.Wait()
	return out
}

func (r *realRunner) run(job *probe.Job) *probe.JobResult {
	unknown := probe.ConnectivityUnknown
	res := &probe.JobResult{Job: job, Ingress: &unknown, Egress: &unknown, Combined: probe.ConnectivityUnknown}
	from, to := r.pods[job.FromKey], r.pods[job.ToKey]
	if from == nil || to == nil || job.FromKey == job.ToKey {
		return res
	}
	if err := ask(from.NS, job.Protocol, netip.AddrPortFrom(to.IP, uint16(job.ResolvedPort)), job.ToKey); err != nil {
		res.Combined = probe.ConnectivityBlocked
	} else {
		res.Combined = probe.ConnectivityAllowed
	}
	return res
}

// ask opens a new connection from the namespace to addr and checks that the server of the Pod
// want answers (framework.Serve answers "<name> <client address>").
func ask(nsName string, proto corev1.Protocol, addr netip.AddrPort, want string) error {
	var c net.Conn
	err := framework.InNS(nsName, func() error {
		d := net.Dialer{Timeout: probeTimeout}
		network := "tcp4"
		d.LocalAddr = &net.TCPAddr{Port: nextSourcePort()}
		if proto == corev1.ProtocolUDP {
			network = "udp4"
			d.LocalAddr = &net.UDPAddr{Port: nextSourcePort()}
		}
		var err error
		c, err = d.Dial(network, addr.String())
		return err
	})
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(probeTimeout))
	var answer string
	if proto == corev1.ProtocolUDP {
		// Like a TCP client resending its SYN, the datagram is sent again until answered: one lost
		// in a burst of probes is not a refusal. All go on the same 5-tuple, so a datagram policy
		// refuses is refused again (refused packets are never committed to conntrack).
		done := make(chan struct{})
		defer close(done)
		go func() {
			for {
				if _, err := c.Write([]byte("hello")); err != nil {
					return
				}
				select {
				case <-done:
					return
				case <-time.After(udpResend):
				}
			}
		}()
		buf := make([]byte, 1500)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		answer = string(buf[:n])
	} else {
		b, err := io.ReadAll(c)
		if err != nil {
			return err
		}
		answer = string(b)
	}
	if !strings.HasPrefix(answer, want+" ") {
		return fmt.Errorf("answered %q, want %s", answer, want)
	}
	return nil
}
