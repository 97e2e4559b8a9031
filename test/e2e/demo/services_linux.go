//go:build linux

package main

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/internal/hostport"
	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// The demo's Service: web (NodePort, port 80 to the endpoints' named port "http") over echo servers that
// answer with their Pod's name and the client address they saw.
const (
	serviceName = "web"
	webPort     = 8080
	// asks is how many new connections each row of the Services table opens.
	asks = 12
	// webHostPort is web-a's hostPort on node-a (to its port http).
	webHostPort = 18080
)

// servicesDemo is the demo's Service with its endpoint Pods.
type servicesDemo struct {
	c         *cluster.Cluster
	svc       *corev1.Service
	endpoints []*cluster.Pod
}

// startServices runs CoreDNS on node-a and the Service web with one endpoint Pod on each node.
func startServices(ctx context.Context, c *cluster.Cluster) (*servicesDemo, error) {
	if _, err := c.StartDNS(ctx, c.Node("node-a"), time.Minute); err != nil {
		return nil, err
	}
	d := &servicesDemo{c: c}
	for _, e := range [][2]string{{"web-a", "node-a"}, {"web-b", "node-b"}} {
		if err := d.addEndpointPod(ctx, e[0], e[1]); err != nil {
			return nil, err
		}
	}
	d.svc = &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: serviceName},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": serviceName},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}},
		},
	}
	if err := c.Client.Create(ctx, d.svc); err != nil {
		return nil, fmt.Errorf("creating Service %s: %w", serviceName, err)
	}
	return d, d.waitEndpoints(ctx)
}

// addEndpointPod adds a Pod labelled app=web on the node with its echo server on the port named http.
// web-a also has the hostPort webHostPort.
func (d *servicesDemo) addEndpointPod(ctx context.Context, name, node string) error {
	opts := cluster.PodOptions{
		Labels: map[string]string{"app": serviceName},
		Ports:  []corev1.ContainerPort{{Name: "http", ContainerPort: webPort, Protocol: corev1.ProtocolTCP}},
	}
	if name == "web-a" {
		opts.Ports[0].HostPort = webHostPort
		opts.PortMappings = []hostport.PortMapping{{HostPort: webHostPort, ContainerPort: webPort, Protocol: "tcp"}}
	}
	p, err := d.c.AddPodWith(ctx, d.c.Node(node), name, opts, time.Minute)
	if err != nil {
		return err
	}
	// The echo server lives as long as the demo's serving process; the namespace goes with the demo.
	if _, err := cluster.ServeNamedEcho(p.NSPath, name, []int{webPort}, nil); err != nil {
		return err
	}
	d.endpoints = append(d.endpoints, p)
	return nil
}

// sliceAddresses returns the ready addresses of the Service's EndpointSlices, sorted.
func (d *servicesDemo) sliceAddresses(ctx context.Context) ([]string, error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := d.c.Client.List(ctx, list, client.InNamespace(cluster.PodNamespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: serviceName}); err != nil {
		return nil, err
	}
	var got []string
	for _, s := range list.Items {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				got = append(got, ep.Addresses...)
			}
		}
	}
	sort.Strings(got)
	return got, nil
}

// waitEndpoints waits until kube-controller-manager lists every endpoint Pod in the Service's EndpointSlices
// and a new connection from node-a's host reaches each of them.
func (d *servicesDemo) waitEndpoints(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := d.sliceAddresses(ctx)
		if err == nil && len(got) == len(d.endpoints) {
			names, _ := d.ask(ctx, d.c.Node("node-a").Host(), d.clusterIPPort(), 4*asks)
			if len(names) == len(d.endpoints) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the Service %s does not reach its %d endpoints (EndpointSlices: %v, %v)", serviceName, len(d.endpoints), got, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (d *servicesDemo) clusterIPPort() netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(d.svc.Spec.ClusterIP), 80)
}

// ask opens n new connections from a place to dst and counts the answers per endpoint; seen holds the client
// addresses the endpoints saw.
func (d *servicesDemo) ask(ctx context.Context, from cluster.Place, dst netip.AddrPort, n int) (names map[string]int, seen map[netip.Addr]bool) {
	names, seen = map[string]int{}, map[netip.Addr]bool{}
	for range n {
		a, err := cluster.AskEcho(ctx, from, "tcp4", dst, 2*time.Second)
		if err != nil {
			names["failed"]++
			continue
		}
		names[a.Name]++
		seen[a.Client] = true
	}
	return names, seen
}

func countList(names map[string]int) string {
	var parts []string
	for name, n := range names {
		parts = append(parts, fmt.Sprintf("%s x%d", name, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func addrList(seen map[netip.Addr]bool) string {
	var parts []string
	for a := range seen {
		parts = append(parts, a.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// table measures the Services rows with real packets: Pods to the Service by its DNS name (resolved through
// the Pod's own resolver), a Pod to https://kubernetes.default, the external host to the NodePort on each node
// and to web-a's hostPort on node-a.
func (d *servicesDemo) table(ctx context.Context, pods map[string]*cluster.Pod) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "FROM\tTO\tRESOLVED / VIA\tANSWERED BY (%d new connections)\tSOURCE SEEN\n", asks)
	name := serviceName + "." + cluster.PodNamespace + ".svc." + cluster.ClusterDomain
	for _, p := range []*cluster.Pod{pods["pod-a1"], pods["pod-b1"]} {
		out, err := hostcmd.CommandContext(ctx, "ip", "netns", "exec", p.NS, "getent", "hosts", name).CombinedOutput()
		fields := strings.Fields(string(out))
		if err != nil || len(fields) == 0 {
			fmt.Fprintf(w, "%s\t%s:80\tDNS failed: %v %s\t-\t-\n", p.Name, name, err, strings.TrimSpace(string(out)))
			continue
		}
		ip, err := netip.ParseAddr(fields[0])
		if err != nil {
			fmt.Fprintf(w, "%s\t%s:80\tDNS answered %q\t-\t-\n", p.Name, name, fields[0])
			continue
		}
		names, seen := d.ask(ctx, p.Place(), netip.AddrPortFrom(ip, 80), asks)
		fmt.Fprintf(w, "%s (%s)\t%s:80\t%s (ClusterIP)\t%s\t%s\n", p.Name, p.IP, name, ip, countList(names), addrList(seen))
	}
	kd, err := d.c.KubernetesDefault(pods["pod-b1"])
	if err != nil {
		fmt.Fprintf(w, "pod-b1\thttps://kubernetes.default/version\t%v\t-\t-\n", err)
	} else {
		fmt.Fprintf(w, "pod-b1 (%s)\thttps://kubernetes.default/version\t%s (ClusterIP)\tthe API server: %s, %s\t-\n",
			pods["pod-b1"].IP, kd.Resolved, kd.Status, kd.GitVersion)
	}
	for _, n := range d.c.Nodes() {
		dst := netip.AddrPortFrom(n.IP, uint16(d.svc.Spec.Ports[0].NodePort))
		names, seen := d.ask(ctx, d.c.ExternalPlace(), dst, asks)
		fmt.Fprintf(w, "external (%s)\t%s\tNodePort on %s\t%s\t%s\n", d.c.ExternalIP, dst, n.Name, countList(names), addrList(seen))
	}
	nodeA := d.c.Node("node-a")
	dst := netip.AddrPortFrom(nodeA.IP, webHostPort)
	names, seen := d.ask(ctx, d.c.ExternalPlace(), dst, asks)
	fmt.Fprintf(w, "external (%s)\t%s\thostPort of web-a on %s\t%s\t%s\n", d.c.ExternalIP, dst, nodeA.Name, countList(names), addrList(seen))
	_ = w.Flush()
	return b.String()
}

// webGroupBuckets returns node-a's select groups that balance over web-a (the Service's groups) with their
// number of buckets.
func (d *servicesDemo) webGroupBuckets() string {
	groups, err := d.c.Node("node-a").OVS.DumpGroups(cluster.BridgeName)
	if err != nil {
		return err.Error()
	}
	var out []string
	mark := fmt.Sprintf("nat(dst=%s:%d)", d.endpoints[0].IP, webPort)
	for _, g := range groups {
		if strings.Contains(g, mark) {
			id, _, _ := strings.Cut(strings.TrimSpace(g), ",")
			out = append(out, fmt.Sprintf("%s: %d buckets", id, strings.Count(g, "bucket_id:")))
		}
	}
	return strings.Join(out, "; ")
}

// addEndpoint adds a third endpoint Pod (web-c on node-b) and reports what changed: the EndpointSlices
// kube-controller-manager writes, node-a's select groups, and where new connections from pod-a1 go.
func (d *servicesDemo) addEndpoint(ctx context.Context, pods map[string]*cluster.Pod) (string, error) {
	name := fmt.Sprintf("web-%c", 'a'+len(d.endpoints))
	var b strings.Builder
	from := pods["pod-a1"].Place()
	report := func(when string) {
		addrs, err := d.sliceAddresses(ctx)
		names, _ := d.ask(ctx, from, d.clusterIPPort(), asks)
		fmt.Fprintf(&b, "%s:\n  EndpointSlices of %s: %v %v\n  node-a's groups for it: %s\n  %d new connections from pod-a1 to %s: %s\n",
			when, serviceName, addrs, errOrEmpty(err), d.webGroupBuckets(), asks, d.clusterIPPort(), countList(names))
	}
	report("Before")
	start := time.Now()
	if err := d.addEndpointPod(ctx, name, "node-b"); err != nil {
		return "", err
	}
	if err := d.waitEndpoints(ctx); err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "Added Pod %s on node-b (%s) with its echo server; kube-controller-manager and the agents took it in within %v\n",
		name, d.endpoints[len(d.endpoints)-1].IP, time.Since(start).Round(time.Millisecond))
	report("After")
	return b.String(), nil
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
