//go:build linux

package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/winnet-io/winnet/internal/hns"
)

// StopAPIServer stops the kube-apiserver process with SIGSTOP: it neither answers nor refuses, as an API server
// that hangs or a control plane cut off by the network. The returned function resumes it (once; later calls do
// nothing).
func (c *Cluster) StopAPIServer() (resume func() error, err error) {
	var pid int
	for p, name := range childPids("kube-apiserver") {
		if name == "kube-apiserver" {
			pid = p
		}
	}
	if pid == 0 {
		return nil, errors.New("no kube-apiserver process of this run")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("stopping kube-apiserver (pid %d): %w", pid, err)
	}
	c.logf("Stopped kube-apiserver (pid %d)", pid)
	var once sync.Once
	return func() error {
		err := errors.New("resumed already")
		once.Do(func() {
			err = syscall.Kill(pid, syscall.SIGCONT)
			c.logf("Resumed kube-apiserver (pid %d)", pid)
		})
		return err
	}, nil
}

// RecreateSandbox does what kubelet does when a Pod's sandbox dies, without the API server: CNI DEL of the old
// sandbox, then a new sandbox (a new container ID and network namespace) for the same Pod, CNI ADD, and the
// sandbox started. It does not write the Pod's status (kubelet cannot while the API server is away): p's IP
// becomes the new sandbox's and the caller decides what to write. It waits up to timeout for the Pod to reach
// its gateway.
func (c *Cluster) RecreateSandbox(ctx context.Context, p *Pod, timeout time.Duration) error {
	n := c.Node(p.Node)
	if n == nil {
		return fmt.Errorf("no node %s", p.Node)
	}
	if err := c.DeleteSandbox(ctx, p); err != nil {
		return err
	}
	p.NewSandbox()
	if err := addNS(p.NS); err != nil {
		return err
	}
	if err := c.CNIAdd(ctx, p, 0); err != nil {
		return fmt.Errorf("the new sandbox of Pod %s: %w", p.Name, err)
	}
	return waitFor(timeout, 50*time.Millisecond, func() error {
		sent, received, err := Ping(p.Place(), n.Gateway, 1)
		if err == nil && received < sent {
			err = fmt.Errorf("no reply from %s", n.Gateway)
		}
		if err != nil {
			return fmt.Errorf("the new sandbox of Pod %s does not reach its gateway: %w", p.Name, err)
		}
		return nil
	})
}

// DeleteSandbox tears the Pod's sandbox down as kubelet does, without the API server: CNI DEL (called again
// while the plugin answers "try again later"), the sandbox stopped and its network namespace deleted. The Pod
// object is left alone.
func (c *Cluster) DeleteSandbox(ctx context.Context, p *Pod) error {
	n := c.Node(p.Node)
	if n == nil {
		return fmt.Errorf("no node %s", p.Node)
	}
	list, err := n.waitConflist(0)
	if err != nil {
		return err
	}
	if err := c.delWithRetry(ctx, n, list, p); err != nil {
		return fmt.Errorf("CNI DEL of Pod %s's sandbox: %w", p.Name, err)
	}
	if err := hns.StopSandbox(n.SandboxDir(), p.NSPath); err != nil {
		return err
	}
	return deleteNS(p.NS)
}
