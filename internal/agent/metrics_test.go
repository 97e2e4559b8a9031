//go:build !windows

package agent_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/winnet-io/winnet/internal/agent"
	"github.com/winnet-io/winnet/test/framework"
)

func TestPprofOnlyOnLoopback(t *testing.T) {
	for _, tc := range []struct {
		address string
		ok      bool
	}{
		{"", true}, {"0", true}, {"127.0.0.1:6060", true}, {"127.1.2.3:6060", true}, {"[::1]:6060", true}, {"localhost:6060", true},
		{":6060", false}, {"0.0.0.0:6060", false}, {"[::]:6060", false}, {"10.0.0.5:6060", false}, {"example.com:6060", false}, {"6060", false},
	} {
		t.Run(tc.address, func(t *testing.T) {
			g := NewWithT(t)
			err := agent.Options{NodeName: "n", PprofBindAddress: tc.address}.Validate()
			if tc.ok {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(ContainSubstring("--pprof-bind-address")))
			}
		})
	}
}

// freeLoopbackPort returns a TCP port free on 127.0.0.1 when called.
func freeLoopbackPort(g Gomega) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestMetricsNeedATokenAllowedToGetThem starts the agent's manager against a real API server with
// metrics enabled: a scrape without a token is refused (401), one with the token of a
// ServiceAccount not allowed get on /metrics too (403); the chart's reader role lets Prometheus's
// ServiceAccount in; plain HTTP gets nothing.
func TestMetricsNeedATokenAllowedToGetThem(t *testing.T) {
	g := NewWithT(t)
	server, err := framework.StartAPIServer()
	if err != nil {
		t.Fatalf("this test needs a real kube-apiserver: %v", err)
	}
	t.Cleanup(func() { _ = server.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cs, err := kubernetes.NewForConfig(server.Config)
	g.Expect(err).NotTo(HaveOccurred())
	const ns = "default"
	token := func(sa string) string {
		_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return tr.Status.Token
	}
	prometheus, other := token("prometheus"), token("someone")
	// The chart's winnet-metrics-reader, bound to Prometheus's ServiceAccount (metrics.readers).
	g.Expect(server.Client.Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "winnet-metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	})).To(Succeed())
	g.Expect(server.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "winnet-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "winnet-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: ns}},
	})).To(Succeed())

	address := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(g))
	mgr, err := agent.NewManager(server.Config, agent.Options{NodeName: "node-a", MetricsBindAddress: address, HealthProbeBindAddress: "0",
		MetricsCertDir: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())
	mctx, mcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() { mcancel(); <-done })

	httpsClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // the agent's self-signed certificate
	}}
	scrape := func(scheme, bearer string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+address+"/metrics", nil)
		if err != nil {
			return 0, "", err
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := httpsClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	g.Eventually(func() error { _, _, err := scrape("https", ""); return err }).WithTimeout(30*time.Second).Should(Succeed(), "the metrics endpoint starts")

	code, _, err := scrape("https", "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusUnauthorized), "no token")
	// controller-runtime's filter answers 500 ("Authentication failed") when the TokenReview
	// reports an error with the unauthenticated status, as it does for a malformed token.
	code, body, err := scrape("https", "not-a-token")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(BeElementOf(http.StatusUnauthorized, http.StatusInternalServerError), "a token the API server does not know")
	g.Expect(body).NotTo(ContainSubstring("# HELP"))
	code, _, err = scrape("https", other)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusForbidden), "a ServiceAccount not allowed get on /metrics")
	code, body, err = scrape("https", prometheus)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(body).To(ContainSubstring("# HELP"))
	code, body, err = scrape("http", prometheus)
	if err == nil {
		g.Expect(body).NotTo(ContainSubstring("# HELP"), "plain HTTP gets no metrics (status %d)", code)
	}
}
