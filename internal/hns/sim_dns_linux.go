//go:build linux

package hns

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// netnsEtcDir is where `ip netns exec` finds a named namespace's own /etc files: it bind-mounts
// /etc/netns/<name>/resolv.conf over /etc/resolv.conf.
const netnsEtcDir = "/etc/netns"

// resolvConfPath is the resolver configuration of the named namespace at nsPath; empty for a namespace that
// has no name under the simulator's namespace directory. /var/run is a link to /run: both name the same
// directory.
func (b *vethBackend) resolvConfPath(nsPath string) string {
	if sameDir(filepath.Dir(nsPath), b.netnsDir) {
		return filepath.Join(netnsEtcDir, filepath.Base(nsPath), "resolv.conf")
	}
	return ""
}

// sameDir reports whether a and b are the same directory, following links.
func sameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	ra, errA := filepath.EvalSymlinks(a)
	rb, errB := filepath.EvalSymlinks(b)
	return errA == nil && errB == nil && ra == rb
}

// writeResolvConf makes the endpoint's DNS settings the resolver configuration of its namespace, as HNS
// configures the compartment's DNS client from the endpoint's Dns field (hcn HostComputeEndpoint.Dns). An
// endpoint without DNS settings leaves the namespace's configuration alone.
func (b *vethBackend) writeResolvConf(ep Endpoint, nsPath string) error {
	if ep.DNS.empty() {
		return nil
	}
	path := b.resolvConfPath(nsPath)
	if path == "" {
		return nil
	}
	var sb strings.Builder
	if ep.DNS.Domain != "" {
		fmt.Fprintf(&sb, "domain %s\n", ep.DNS.Domain)
	}
	if len(ep.DNS.Search) > 0 {
		fmt.Fprintf(&sb, "search %s\n", strings.Join(ep.DNS.Search, " "))
	}
	for _, s := range ep.DNS.Servers {
		fmt.Fprintf(&sb, "nameserver %s\n", s)
	}
	if len(ep.DNS.Options) > 0 {
		fmt.Fprintf(&sb, "options %s\n", strings.Join(ep.DNS.Options, " "))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing the DNS settings of endpoint %q: %w", ep.Name, err)
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		return fmt.Errorf("writing the DNS settings of endpoint %q: %w", ep.Name, err)
	}
	b.mu.Lock()
	b.resolvConfs[strings.ToUpper(ep.ID)] = path
	b.mu.Unlock()
	return nil
}

// removeResolvConf removes the resolver configuration the endpoint's vNIC wrote.
func (b *vethBackend) removeResolvConf(ep Endpoint) {
	b.mu.Lock()
	path, ok := b.resolvConfs[strings.ToUpper(ep.ID)]
	delete(b.resolvConfs, strings.ToUpper(ep.ID))
	b.mu.Unlock()
	if ok {
		_ = os.Remove(path)
		_ = os.Remove(filepath.Dir(path))
	}
}
