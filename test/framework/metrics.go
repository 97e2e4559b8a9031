//go:build !windows

package framework

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/winnet-io/winnet"
)

// MetricsReader scrapes winnet's metrics endpoints as Prometheus does: over HTTPS, with the token of
// a ServiceAccount allowed get on /metrics (the chart's winnet-metrics-reader role). The agent and
// the controller serve metrics only to such callers.
type MetricsReader struct {
	token  string
	client *http.Client
}

// NewMetricsReader creates the ServiceAccount metrics-reader in namespace default of the API server,
// binds it to a role allowing get on /metrics and returns a reader with its token.
func (s *APIServer) NewMetricsReader(ctx context.Context) (*MetricsReader, error) {
	cs, err := kubernetes.NewForConfig(s.Config)
	if err != nil {
		return nil, fmt.Errorf("metrics reader: %w", err)
	}
	const ns, name = "default", "metrics-reader"
	objects := []func() error{
		func() error {
			_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
				Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}}, metav1.CreateOptions{})
			return err
		},
	}
	for _, create := range objects {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("metrics reader: %w", err)
		}
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(24 * 3600))}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("metrics reader: requesting a token: %w", err)
	}
	return &MetricsReader{token: tr.Status.Token, client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the agent's self-signed certificate, on loopback in a test
	}}}, nil
}

// Scrape returns the metrics page served at address (host:port).
func (r *MetricsReader) Scrape(ctx context.Context, address string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+address+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", address, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", address, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s: %.200s", address, resp.Status, body)
	}
	return body, nil
}

// CheckMetricsAccess checks that the metrics endpoint at address (host:port, HTTPS) serves only
// callers allowed get on /metrics: a scrape without a token, with a token the API server does not
// know, or with the token of a ServiceAccount without that permission gets no metrics (401, 401 or
// 500, 403); plain HTTP gets none; the reader of NewMetricsReader gets them. It returns the first
// violation.
func (s *APIServer) CheckMetricsAccess(ctx context.Context, address string) error {
	reader, err := s.NewMetricsReader(ctx)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(s.Config)
	if err != nil {
		return err
	}
	const ns, other = "default", "metrics-outsider"
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: other}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, other, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	scrape := func(scheme, bearer string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+address+"/metrics", nil)
		if err != nil {
			return 0, "", err
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := reader.client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	for _, c := range []struct {
		what, bearer string
		want         []int
	}{
		{"no token", "", []int{http.StatusUnauthorized}},
		// controller-runtime's filter answers 500 ("Authentication failed") when the TokenReview
		// reports an error with the unauthenticated status, as it does for a malformed token.
		{"a token the API server does not know", "not-a-token", []int{http.StatusUnauthorized, http.StatusInternalServerError}},
		{"a ServiceAccount not allowed get on /metrics", tr.Status.Token, []int{http.StatusForbidden}},
	} {
		code, body, err := scrape("https", c.bearer)
		if err != nil {
			return fmt.Errorf("%s: %w", c.what, err)
		}
		if !slices.Contains(c.want, code) || strings.Contains(body, "# HELP") {
			return fmt.Errorf("%s: status %d (want one of %v), metrics served: %t", c.what, code, c.want, strings.Contains(body, "# HELP"))
		}
	}
	if _, body, err := scrape("http", reader.token); err == nil && strings.Contains(body, "# HELP") {
		return fmt.Errorf("plain HTTP got the metrics")
	}
	body, err := reader.Scrape(ctx, address)
	if err != nil {
		return fmt.Errorf("a ServiceAccount allowed get on /metrics: %w", err)
	}
	if !strings.Contains(string(body), "# HELP") {
		return fmt.Errorf("a ServiceAccount allowed get on /metrics got no metrics: %.200s", body)
	}
	return nil
}

// ScrapeBuildInfo checks that the metrics endpoint at address serves winnet_build_info at 1 with the
// labels of this process's build (the agent and the controller run in the test process).
func ScrapeBuildInfo(ctx context.Context, s *APIServer, address string) error {
	reader, err := s.NewMetricsReader(ctx)
	if err != nil {
		return err
	}
	body, err := reader.Scrape(ctx, address)
	if err != nil {
		return err
	}
	b := winnet.Build()
	want := fmt.Sprintf("winnet_build_info{goversion=%q,revision=%q,version=%q} 1\n", b.GoVersion, b.Revision, b.Version)
	if !strings.Contains(string(body), want) {
		return fmt.Errorf("the metrics at %s have no %q", address, strings.TrimSpace(want))
	}
	return nil
}
