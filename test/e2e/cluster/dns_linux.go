//go:build linux

package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// The cluster DNS, as kubeadm deploys it: CoreDNS Pods labelled k8s-app=kube-dns behind kube-system/kube-dns.
const (
	DNSNamespace   = metav1.NamespaceSystem
	DNSServiceName = "kube-dns"
	DNSPodName     = "coredns"
	dnsReadyPort   = 8181
)

// APIServerName is a name the API server's serving certificate holds: clients that reach it through the
// kubernetes Service check its certificate against this name (kubeconfig's tls-server-name), as the test
// certificate names neither the ClusterIP nor kubernetes.default.
const APIServerName = "localhost"

// CoreDNSBinary returns the CoreDNS that hack/setup-test-deps.sh built into bin/coredns-<version>/.
func CoreDNSBinary() (string, error) {
	matches, _ := filepath.Glob(filepath.Join(framework.RepoRoot(), "bin", "coredns-*", "coredns"))
	sort.Strings(matches)
	if len(matches) == 0 {
		return "", fmt.Errorf("no CoreDNS in %s: run hack/setup-test-deps.sh (make test-deps)", filepath.Join(framework.RepoRoot(), "bin"))
	}
	return matches[len(matches)-1], nil
}

// corefile is kubeadm's Corefile for the cluster domain without the forward to the node's resolvers (the
// simulated cluster has no upstream DNS): the kubernetes plugin reads Services and EndpointSlices through the
// kubeconfig, ready answers the readiness probe once it has.
const corefile = `.:53 {
    errors
    log
    health :8080
    ready :%d
    kubernetes %s in-addr.arpa ip6.arpa {
        kubeconfig %s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    cache 30
}
`

// StartDNS runs CoreDNS as the cluster DNS on the node: a Pod kube-system/coredns (StartCoreDNS) and the
// Service kube-system/kube-dns on DNSServiceIP (UDP and TCP 53). kube-controller-manager publishes the Pod in
// kube-dns's EndpointSlice once it is Ready. StartDNS returns once a DNS query for the kubernetes Service, sent
// from the node to DNSServiceIP, is answered with its ClusterIP.
func (c *Cluster) StartDNS(ctx context.Context, node *Node, timeout time.Duration) (*Pod, error) {
	c.logf("Starting CoreDNS on %s as %s/%s (%s)", node.Name, DNSNamespace, DNSServiceName, DNSServiceIP)
	svc := CoreDNSService(DNSNamespace, DNSServiceName, map[string]string{"k8s-app": DNSServiceName})
	svc.Spec.ClusterIP = DNSServiceIP.String()
	if err := c.Client.Create(ctx, svc); err != nil {
		return nil, fmt.Errorf("creating Service %s/%s: %w", DNSNamespace, DNSServiceName, err)
	}
	d, err := c.StartCoreDNS(ctx, node, DNSNamespace, DNSPodName, svc.Spec.Selector, timeout)
	if d == nil {
		return nil, err
	}
	c.dns = d.process
	if err != nil {
		return d.Pod, err
	}
	want := fmt.Sprintf("kubernetes.default.svc.%s", ClusterDomain)
	if err := waitFor(timeout, 200*time.Millisecond, func() error {
		addrs, err := LookupIn(ctx, node.NSPath, DNSServiceIP, want)
		if err != nil {
			return err
		}
		if len(addrs) != 1 || addrs[0] != KubernetesServiceIP {
			return fmt.Errorf("%s resolves to %v, want %s", want, addrs, KubernetesServiceIP)
		}
		return nil
	}); err != nil {
		return d.Pod, fmt.Errorf("the cluster DNS does not answer through %s: %w", DNSServiceIP, err)
	}
	return d.Pod, nil
}

// CoreDNSService is a Service in front of CoreDNS Pods labelled labels: UDP and TCP 53 to their named ports.
func CoreDNSService(namespace, name string, labels map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("dns")},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("dns-tcp")},
			},
		},
	}
}

// CoreDNS is a CoreDNS process serving in its Pod.
type CoreDNS struct {
	Pod     *Pod
	process *process
	stopped bool
}

// Stop stops the CoreDNS process (SIGTERM) and deletes its Pod; a second call does nothing.
func (d *CoreDNS) Stop(ctx context.Context, c *Cluster) error {
	if d.stopped {
		return nil
	}
	d.stopped = true
	return errors.Join(d.process.stop(syscall.SIGTERM, 5*time.Second), c.DeletePod(ctx, d.Pod))
}

// StartCoreDNS runs CoreDNS in a Pod on the node, as a CoreDNS Deployment's Pod: the Pod namespace/name
// labelled labels, attached through CNI like any other, with the ports dns (UDP 53) and dns-tcp (TCP 53), the
// CoreDNS process inside its namespace with the permissions of the ServiceAccount kube-system/coredns (a token
// from the TokenRequest API, the RBAC of kubeadm's system:coredns), reaching the API server through the
// kubernetes Service as in-cluster clients do. The Pod becomes Ready when CoreDNS's readiness endpoint
// answers, probed from the node as kubelet does. A CoreDNS returned with an error has its process to stop.
func (c *Cluster) StartCoreDNS(ctx context.Context, node *Node, namespace, name string, labels map[string]string, timeout time.Duration) (*CoreDNS, error) {
	bin, err := CoreDNSBinary()
	if err != nil {
		return nil, err
	}
	token, err := c.dnsToken(ctx)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(c.RunDir, namespace+"-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster:
    server: https://%s
    certificate-authority: %s
    tls-server-name: %s
users:
- name: coredns
  user:
    token: %s
contexts:
- name: coredns
  context: {cluster: cluster, user: coredns}
current-context: coredns
`, netip.AddrPortFrom(KubernetesServiceIP, 443), c.CAFile, APIServerName, token)), 0o600); err != nil {
		return nil, fmt.Errorf("writing CoreDNS's kubeconfig: %w", err)
	}
	conf := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(corefile, dnsReadyPort, ClusterDomain, kubeconfig)), 0o644); err != nil {
		return nil, fmt.Errorf("writing the Corefile: %w", err)
	}

	pod, err := c.AddPodWith(ctx, node, name, PodOptions{
		Namespace: namespace, Labels: labels, DNSPolicy: corev1.DNSDefault, NotReady: true,
		Ports: []corev1.ContainerPort{
			{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
			{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
		},
	}, timeout)
	if err != nil {
		return nil, err
	}
	p, err := c.reg.startProcess("coredns", filepath.Join(dir, "coredns.log"), false,
		"ip", "netns", "exec", pod.NS, bin, "-conf", conf)
	d := &CoreDNS{Pod: pod, process: p}
	if err != nil {
		return d, err
	}
	if err := waitFor(timeout, 200*time.Millisecond, func() error {
		if !p.running() {
			return fmt.Errorf("CoreDNS exited; last lines of its log:\n%s", p.logTail(20))
		}
		return httpGetIn(node.NSPath, fmt.Sprintf("http://%s/ready", netip.AddrPortFrom(pod.IP, dnsReadyPort)))
	}); err != nil {
		return d, fmt.Errorf("CoreDNS did not become ready: %w", err)
	}
	return d, c.SetPodReady(ctx, pod, true)
}

// dnsToken gives CoreDNS the ServiceAccount kube-system/coredns with kubeadm's system:coredns permissions and
// returns a token for it from the TokenRequest API.
func (c *Cluster) dnsToken(ctx context.Context) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: DNSNamespace, Name: DNSPodName}}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: DNSNamespace, Name: sa.Name}},
	}
	for _, o := range []client.Object{sa, role, binding} {
		if err := c.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("creating CoreDNS's %T %s: %w", o, o.GetName(), err)
		}
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](48 * 3600)}}
	if err := c.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", DNSNamespace, sa.Name, err)
	}
	return tr.Status.Token, nil
}

// httpGetIn sends GET url from inside the namespace at nsPath and fails unless the answer is 200.
func httpGetIn(nsPath, url string) error {
	hc := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var conn net.Conn
			err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
				var err error
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		}}}
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// LookupIn resolves name's IPv4 addresses by asking the DNS server at server (UDP 53) from inside the
// namespace at nsPath; name is taken as fully qualified.
func LookupIn(ctx context.Context, nsPath string, server netip.Addr, name string) ([]netip.Addr, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var conn net.Conn
		err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
			var err error
			conn, err = (&net.Dialer{}).DialContext(ctx, network, netip.AddrPortFrom(server, 53).String())
			return err
		})
		return conn, err
	}}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	ips, err := r.LookupNetIP(ctx, "ip4", name+".")
	if err != nil {
		return nil, err
	}
	for i := range ips {
		ips[i] = ips[i].Unmap()
	}
	return ips, nil
}

// kubernetesDefault is run by python3 inside a Pod's namespace (`ip netns exec`, which makes the resolv.conf
// the HNS simulator wrote from the Pod's DNS settings the Pod's /etc/resolv.conf): it resolves
// kubernetes.default through the system resolver (search list, ndots), connects to port 443 of the address,
// checks the API server's certificate against the cluster's CA (under APIServerName) and asks for /version.
const kubernetesDefault = `
import socket, ssl, sys
ca, server_name = sys.argv[1], sys.argv[2]
addr = socket.getaddrinfo("kubernetes.default", 443, socket.AF_INET, socket.SOCK_STREAM)[0][4]
print(addr[0])
ctx = ssl.create_default_context(cafile=ca)
with socket.create_connection(addr, timeout=5) as s, ctx.wrap_socket(s, server_hostname=server_name) as t:
    t.sendall(b"GET /version HTTP/1.1\r\nHost: kubernetes.default\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = t.recv(65536)
        if not chunk:
            break
        data += chunk
print(data.decode())
`

// KubernetesDefaultAnswer is what a Pod got from https://kubernetes.default/version.
type KubernetesDefaultAnswer struct {
	// Resolved is the address kubernetes.default resolved to.
	Resolved netip.Addr
	// Status is the HTTP status line, GitVersion the API server's version from the body.
	Status, GitVersion string
}

var gitVersionRE = regexp.MustCompile(`"gitVersion":\s*"([^"]*)"`)

// KubernetesDefault asks https://kubernetes.default/version from inside the Pod, resolving the name through
// the Pod's own resolver configuration.
func (c *Cluster) KubernetesDefault(p *Pod) (KubernetesDefaultAnswer, error) {
	var a KubernetesDefaultAnswer
	out, err := hostcmd.Command("ip", "netns", "exec", p.NS, "/usr/bin/python3", "-c", kubernetesDefault, c.CAFile, APIServerName).CombinedOutput()
	if err != nil {
		return a, fmt.Errorf("https://kubernetes.default/version from %s: %w: %s", p.Name, err, out)
	}
	resolved, response, _ := strings.Cut(string(out), "\n")
	if a.Resolved, err = netip.ParseAddr(resolved); err != nil {
		return a, fmt.Errorf("https://kubernetes.default/version from %s: %w: %s", p.Name, err, out)
	}
	a.Status, _, _ = strings.Cut(response, "\r\n")
	if m := gitVersionRE.FindStringSubmatch(response); m != nil {
		a.GitVersion = m[1]
	}
	return a, nil
}
