//go:build linux

package egress_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/agent"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

var server *framework.APIServer

func TestMain(m *testing.M) {
	framework.Main(m, "Egress integration tests", &server, framework.MainOptions{})
}

const converge = 30 * time.Second

// echoPort is the external host's TCP echo server.
const echoPort = 9090

// TestEgressCounters: a selected Pod on the holder opens connections to the external host through the
// egress IP (the external host sees that IP as their source); the holder agent's real metrics endpoint
// then counts them in winnet_egress_connections_total, and every byte they sent (the payload with the
// headers, not only the first packets) in winnet_egress_sent_bytes_total, for that Egress; a Pod the
// Egress does not select adds nothing.
func TestEgressCounters(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.84.0/24"))
	address := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	// winnet's namespace, where the agent renews its Egress Lease (it holds no egress IP without).
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agent.DefaultNamespace}}
	if err := server.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	a := framework.StartPodNodeWith(t, server, u, "egm-a", "192.168.84.11/24", "10.244.84.0/24", converge,
		framework.PodNodeOptions{Agent: framework.AgentOptions{MetricsBindAddress: address, Egress: true}})
	// The external host's veth would send partial TCP checksums, which the node's userspace datapath
	// forwards as they are (real hosts on a wire do not).
	if err := simnode.DisableTxChecksum(u.External().NS, simnode.HostIfName); err != nil {
		t.Fatal(err)
	}
	reader, err := server.NewMetricsReader(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	sources := serveEcho(t, u.External().NS, echoPort)

	tenant := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "egm-x"}}
	g.Expect(server.Client.Create(ctx, tenant)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), tenant) })
	selected := a.AddPod(t, "billing", framework.TestPodOptions{Namespace: tenant.Name, Labels: map[string]string{"app": "billing"}})
	other := a.AddPod(t, "other", framework.TestPodOptions{Namespace: tenant.Name, Labels: map[string]string{"app": "other"}})

	egressIP := netip.MustParseAddr("192.168.84.200")
	eg := &networkv1alpha1.Egress{ObjectMeta: metav1.ObjectMeta{Name: "egm-billing"}, Spec: networkv1alpha1.EgressSpec{
		PodSelector: networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{"app": "billing"}},
		NamespaceSelector: networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{
			"kubernetes.io/metadata.name": networkv1alpha1.LabelValue(tenant.Name)}},
		EgressIP: networkv1alpha1.IPv4Address(egressIP.String()),
	}}
	g.Expect(server.Client.Create(ctx, eg)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), eg) })
	// No winnet-controller runs here: the test assigns the Egress to the node as it would.
	eg.Status.Node = a.Name
	meta.SetStatusCondition(&eg.Status.Conditions, metav1.Condition{Type: networkv1alpha1.AssignedCondition, Status: metav1.ConditionTrue,
		Reason: networkv1alpha1.EgressAssignedReason, Message: "assigned by the test"})
	g.Expect(server.Client.Status().Update(ctx, eg)).To(Succeed())

	ext := netip.AddrPortFrom(u.ExternalIP, echoPort)
	g.Eventually(func() (netip.Addr, error) { return talk(selected.NS, ext, 1) }).WithTimeout(converge).Should(Equal(egressIP),
		"the external host sees the egress IP as the selected Pod's source")
	before := scrape(t, reader, address)
	const conns, payload = 5, 1000
	for range conns {
		src, err := talk(selected.NS, ext, payload)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(src).To(Equal(egressIP))
	}
	for range conns {
		src, err := talk(other.NS, ext, payload)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(src).To(Equal(netip.MustParseAddr("192.168.84.11")), "the Pod not selected leaves from the node IP")
	}
	g.Expect(sources.count(egressIP)).To(BeNumerically(">=", conns+1))
	after := scrape(t, reader, address)
	t.Logf("winnet_egress_connections_total{egress=%q}: %v -> %v; winnet_egress_sent_bytes_total: %v -> %v; winnet_egress_sent_packets_total: %v -> %v",
		eg.Name, before.conns[eg.Name], after.conns[eg.Name], before.bytes[eg.Name], after.bytes[eg.Name], before.packets[eg.Name], after.packets[eg.Name])
	g.Expect(after.conns[eg.Name]-before.conns[eg.Name]).To(BeNumerically("==", conns), "one per connection of the selected Pod, none of the other Pod's")
	// Each connection: the SYN, the ACKs, the payload and the FIN, each packet with its headers (at
	// least 54 bytes of Ethernet, IPv4 and TCP): more than the payload and its packets' headers, less
	// than that with a generous allowance per connection for ACKs and retransmissions; none of the
	// other Pod's.
	sent, packets := after.bytes[eg.Name]-before.bytes[eg.Name], after.packets[eg.Name]-before.packets[eg.Name]
	g.Expect(packets).To(BeNumerically(">=", conns*4), "SYN, ACK, payload and FIN of each connection")
	g.Expect(sent).To(And(BeNumerically(">=", conns*payload+packets*54), BeNumerically("<", conns*(payload+40*200))),
		"the bytes of every packet the selected Pod sent, the later ones with the payload included")
	g.Expect(after.conns).To(HaveLen(1), "only the Egress the node holds")

	// The Egress deleted: its series go with its flows.
	g.Expect(server.Client.Delete(ctx, eg)).To(Succeed())
	g.Eventually(func() map[string]float64 { return scrape(t, reader, address).conns }).WithTimeout(converge).Should(BeEmpty())
	_ = client.ObjectKeyFromObject(eg)
}

// page is what one scrape says of the Egress counters, by Egress.
type page struct{ conns, bytes, packets map[string]float64 }

var egressLine = regexp.MustCompile(`^winnet_egress_(connections|sent_bytes|sent_packets)_total\{egress="([^"]*)"\} (\S+)$`)

// scrape reads the agent's real metrics endpoint (HTTPS, authorized by the API server).
func scrape(t *testing.T, reader *framework.MetricsReader, address string) page {
	t.Helper()
	body, err := reader.Scrape(context.Background(), address)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	p := page{conns: map[string]float64{}, bytes: map[string]float64{}, packets: map[string]float64{}}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		m := egressLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		switch m[1] {
		case "connections":
			p.conns[m[2]] = v
		case "sent_bytes":
			p.bytes[m[2]] = v
		default:
			p.packets[m[2]] = v
		}
	}
	return p
}

// freePort is a free TCP port on the loopback address, for the agent's metrics endpoint.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// seenSources counts the source addresses of the echo server's connections.
type seenSources struct {
	mu sync.Mutex
	n  map[netip.Addr]int
}

func (s *seenSources) count(a netip.Addr) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[a]
}

// serveEcho runs, in the namespace, a TCP server that writes back the connection's source address and
// then echoes what it reads.
func serveEcho(t *testing.T, nsName string, port int) *seenSources {
	t.Helper()
	var l net.Listener
	if err := framework.InNS(nsName, func() error {
		var err error
		l, err = net.Listen("tcp4", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatalf("serving in %s: %v", nsName, err)
	}
	t.Cleanup(func() { l.Close() })
	s := &seenSources{n: map[netip.Addr]int{}}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			src := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
			s.mu.Lock()
			s.n[src]++
			s.mu.Unlock()
			go func() {
				defer c.Close()
				if _, err := fmt.Fprintf(c, "%s\n", src); err != nil {
					return
				}
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return s
}

// talk opens one TCP connection from the namespace to addr, reads the source address the server saw,
// sends n bytes and reads their echo.
func talk(nsName string, addr netip.AddrPort, n int) (netip.Addr, error) {
	var c net.Conn
	if err := framework.InNS(nsName, func() error {
		var err error
		c, err = net.DialTimeout("tcp4", addr.String(), 2*time.Second)
		return err
	}); err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return netip.Addr{}, err
	}
	src, err := netip.ParseAddr(line[:len(line)-1])
	if err != nil {
		return netip.Addr{}, err
	}
	if _, err := c.Write(bytes.Repeat([]byte("x"), n)); err != nil {
		return src, err
	}
	if _, err := io.ReadFull(c, make([]byte, n)); err != nil {
		return src, err
	}
	return src, nil
}
