package cmdline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/test/wine"
)

// TestRESTConfigAPIServer: --apiserver replaces the server of the kubeconfig (the kubernetes Service's
// ClusterIP, which winnet itself provides on the node) and keeps its credentials; anything but an https URL
// is refused.
func TestRESTConfigAPIServer(t *testing.T) {
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

	cfg, err := RESTConfig(path, "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Host).To(Equal("https://10.96.0.1:443"))

	cfg, err = RESTConfig(path, "https://192.168.77.2:6443")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Host).To(Equal("https://192.168.77.2:6443"))
	g.Expect(cfg.BearerToken).To(Equal("secret"), "the credentials stay")

	for _, bad := range []string{"192.168.77.2:6443", "http://192.168.77.2:6443", "https://"} {
		_, err = RESTConfig(path, bad)
		g.Expect(err).To(MatchError(ContainSubstring("is not an https://host:port URL")), bad)
	}
}

// TestFlagSet: -help prints the usage and the flags but the hidden ones, and is not an error;
// a bad flag is; positional arguments are refused where a command takes none.
func TestFlagSet(t *testing.T) {
	g := NewWithT(t)
	var out strings.Builder
	fs := FlagSet("winnet-x", "Usage: winnet-x [flags]", "secret")
	fs.SetOutput(&out)
	fs.String("shown", "a", "a flag people use")
	fs.String("secret", "", "a benchmark's knob")
	help, err := Parse(fs, []string{"-help"})
	g.Expect(help).To(BeTrue())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.String()).To(HavePrefix("Usage: winnet-x [flags]\n\nFlags:\n"))
	g.Expect(out.String()).To(ContainSubstring("-shown"))
	g.Expect(out.String()).NotTo(ContainSubstring("secret"))

	help, err = Parse(FlagSet("winnet-x", "u"), []string{"-nope"})
	g.Expect(help).To(BeFalse())
	g.Expect(err).To(MatchError(ContainSubstring("flag provided but not defined: -nope")))

	fs = FlagSet("winnet-x reset", "u")
	g.Expect(Parse(fs, []string{"extra"})).To(BeFalse())
	g.Expect(NoArgs(fs)).To(MatchError(`winnet-x reset takes no arguments, got ["extra"]`))
}
