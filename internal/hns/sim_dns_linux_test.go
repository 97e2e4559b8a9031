//go:build linux

package hns

import (
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// TestResolvConfPathFollowsLinks: a runtime names a Pod's namespace /run/netns/<name> or /var/run/netns/<name>
// (one directory, /var/run links to /run); either way the namespace's resolver configuration is
// /etc/netns/<name>/resolv.conf, which `ip netns exec` mounts over /etc/resolv.conf.
func TestResolvConfPathFollowsLinks(t *testing.T) {
	g := NewWithT(t)
	if target, err := filepath.EvalSymlinks("/var/run"); err != nil || target != "/run" {
		t.Fatalf("this test expects /var/run to link to /run, as on Debian (got %q, %v)", target, err)
	}
	b := &vethBackend{netnsDir: DefaultNetNSDir}
	g.Expect(b.resolvConfPath("/run/netns/pod-a")).To(Equal("/etc/netns/pod-a/resolv.conf"))
	g.Expect(b.resolvConfPath("/var/run/netns/pod-a")).To(Equal("/etc/netns/pod-a/resolv.conf"))
	g.Expect(b.resolvConfPath("/proc/123/ns/net")).To(BeEmpty(), "a namespace without a name has no /etc/netns")
}
