package main

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/test/wine"
)

// TestRestConfigAPIServer: --apiserver replaces the server of the kubeconfig (the kubernetes Service's
// ClusterIP, which winnet itself provides on the node) and keeps its credentials; anything but an https URL
// is refused.
func TestRestConfigAPIServer(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(wine.TempDir(t), "kubeconfig")
	g.Expect(os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://10.96.0.1:443", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: secret}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`), 0o600)).To(Succeed())

	cfg, err := restConfig(path, "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Host).To(Equal("https://10.96.0.1:443"))

	cfg, err = restConfig(path, "https://192.168.77.2:6443")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Host).To(Equal("https://192.168.77.2:6443"))
	g.Expect(cfg.BearerToken).To(Equal("secret"), "the credentials stay")

	for _, bad := range []string{"192.168.77.2:6443", "http://192.168.77.2:6443", "https://"} {
		_, err = restConfig(path, bad)
		g.Expect(err).To(MatchError(ContainSubstring("is not an https://host:port URL")), bad)
	}
}
