package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/internal/securefs"
)

// Reasons of the Events the agent records on its Node about its directories and records.
const (
	// UntrustedDirectoryReason: a directory the agent writes is owned by someone other than the
	// node's administrators; the agent does not start.
	UntrustedDirectoryReason = "UntrustedDirectory"
	// DirectoryRepairedReason: a directory was open to others; the agent narrowed it and what it
	// holds, and revalidates the records in it as it reads them.
	DirectoryRepairedReason = "DirectoryRepaired"
	// RecordSetAsideReason: a record the agent read at start was not trusted; it was moved aside.
	RecordSetAsideReason = "StateRecordSetAside"
)

// protectedDir is one directory the agent writes, with who else may read it.
type protectedDir struct {
	path   string
	access securefs.Access
	what   string
}

// agentDirectories are the directories the agent creates or writes: its state (IPAM allocations,
// Pod attachments, adapter records, a retired node's record), the runtime's CNI configuration
// directory and, when the agent removes the shim winnet installed, that shim's directory.
func agentDirectories(opts HostOptions) []protectedDir {
	dirs := []protectedDir{
		{path: opts.StateDir, access: securefs.Private, what: "state directory"},
		{path: opts.CNIConfDir, access: securefs.Public, what: "CNI configuration directory"},
	}
	if opts.CNIShimPath != "" {
		dirs = append(dirs, protectedDir{path: filepath.Dir(opts.CNIShimPath), access: securefs.Public, what: "CNI binary directory"})
	}
	return dirs
}

// protectDirectories creates, checks and repairs the agent's directories at every start
// (internal/securefs), before anything in them is read: one owned by someone other than the node's
// administrators stops the agent (the error and an Event on the Node name it); one only too open is
// repaired with everything in it, and an Event says so (the records in it are then validated
// one by one as they are read: OpenStore, ReadRetirement, the adapter records).
func protectDirectories(ctx context.Context, c client.Client, nodeName string, opts HostOptions) error {
	log := ctrl.LoggerFrom(ctx)
	for _, d := range agentDirectories(opts) {
		res, err := securefs.EnsureDir(d.path, d.access)
		if errors.Is(err, securefs.ErrUntrustedOwner) {
			msg := fmt.Sprintf("The %s %s is not owned by the node's administrators: winnet-agent does not start until an administrator removes it or gives it to SYSTEM (root): %v", d.what, d.path, err)
			nodeEvent(ctx, c, nodeName, corev1.EventTypeWarning, UntrustedDirectoryReason, msg)
			return fmt.Errorf("refusing the %s %s: %w", d.what, d.path, err)
		} else if err != nil {
			return fmt.Errorf("preparing the %s %s: %w", d.what, d.path, err)
		}
		if len(res.Repaired) > 0 {
			log.Info("Narrowed the permissions of a directory open to others", "directory", d.path, "paths", len(res.Repaired))
			nodeEvent(ctx, c, nodeName, corev1.EventTypeWarning, DirectoryRepairedReason,
				fmt.Sprintf("The %s %s was open to others than the node's administrators: narrowed it and %d paths in it; its records are revalidated", d.what, d.path, len(res.Repaired)-1))
		}
	}
	return nil
}

// nodeEvent records an Event about the agent's Node. It is written directly: the manager's event
// recorder starts with the manager, which a refused start never reaches. A failure is logged.
func nodeEvent(ctx context.Context, c client.Client, nodeName, eventType, reason, message string) {
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: strings.ToLower(nodeName) + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: nodeName},
		Reason:         reason,
		Message:        message,
		Type:           eventType,
		Source:         corev1.EventSource{Component: "winnet-agent", Host: nodeName},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
	if err := c.Create(ctx, ev); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Recording an Event on the Node failed", "reason", reason, "message", message)
	}
}
