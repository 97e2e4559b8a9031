//go:build linux

package hns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	eventtypes "github.com/containerd/containerd/api/events"
	containersapi "github.com/containerd/containerd/api/services/containers/v1"
	eventsapi "github.com/containerd/containerd/api/services/events/v1"
	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// ContainerdNamespace is the containerd namespace of the containers the CRI plugin (kubelet's) runs.
const ContainerdNamespace = "k8s.io"

// containerdRetry is how long the sandbox source waits before it connects to containerd again.
const containerdRetry = time.Second

// ContainerdSandboxes makes containerd the simulator's source of sandbox starts and stops, as the
// compute service is HNS's on Windows: a sandbox runs from the start of the task of the container
// that owns the network namespace (the Pod's pause container, whose OCI spec names the namespace
// by the path CNI ADD was given) until that task is deleted. It marks them in the simulator's
// sandbox directory (StartSandbox, StopSandbox) from containerd's task events in namespace k8s.io
// (start; exit or delete of the container's own process)
// and, on every (re)connection, from the tasks that run then, so that starts and stops missed
// while it was not connected are caught up. Containers sharing another's namespace (the Pod's
// application containers: /proc/<pid>/ns/net) start nothing.
type ContainerdSandboxes struct {
	// Address is containerd's gRPC socket.
	Address string
	// SandboxDir is LinuxSimOptions.SandboxDir.
	SandboxDir string
	Log        logr.Logger
}

// Run follows containerd until ctx is done, connecting again whenever the connection fails.
func (c ContainerdSandboxes) Run(ctx context.Context) {
	for {
		err := c.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		c.Log.Info("Following containerd's sandboxes failed; connecting again", "address", c.Address, "reason", err.Error())
		select {
		case <-ctx.Done():
			return
		case <-time.After(containerdRetry):
		}
	}
}

// follow subscribes to containerd's task events, catches up with the running tasks, then handles
// events until the stream or ctx ends.
func (c ContainerdSandboxes) follow(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+c.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connecting to containerd at %s: %w", c.Address, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx, "containerd-namespace", ContainerdNamespace))
	defer cancel()
	// Subscribe first: a task that starts while the running ones are listed is then not missed.
	stream, err := eventsapi.NewEventsClient(conn).Subscribe(ctx, &eventsapi.SubscribeRequest{
		Filters: []string{`namespace==` + ContainerdNamespace + `,topic~="^/tasks/(start|exit|delete)$"`},
	})
	if err != nil {
		return fmt.Errorf("subscribing to containerd's task events: %w", err)
	}
	containers := containersapi.NewContainersClient(conn)
	// owners maps the ID of each container owning a started sandbox to its namespace path.
	owners, err := c.catchUp(ctx, containers, tasksapi.NewTasksClient(conn))
	if err != nil {
		return err
	}
	for {
		env, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("receiving containerd's events: %w", err)
		}
		if env.Namespace != ContainerdNamespace || env.Event == nil {
			continue
		}
		switch env.Topic {
		case "/tasks/start":
			var e eventtypes.TaskStart
			if err := proto.Unmarshal(env.Event.GetValue(), &e); err != nil {
				c.Log.Error(err, "Decoding a task start event")
				continue
			}
			if err := c.started(ctx, containers, owners, e.ContainerID); err != nil {
				c.Log.Error(err, "Starting a sandbox", "container", e.ContainerID)
			}
		case "/tasks/exit", "/tasks/delete":
			// containerd 2.x's sandbox controller deletes the pause task through the shim, without a
			// delete event: its exit ends the sandbox, the delete (1.6) when the exit was missed.
			var containerID, processID string
			if env.Topic == "/tasks/exit" {
				var e eventtypes.TaskExit
				if err := proto.Unmarshal(env.Event.GetValue(), &e); err != nil {
					c.Log.Error(err, "Decoding a task exit event")
					continue
				}
				containerID, processID = e.ContainerID, e.ID
			} else {
				var e eventtypes.TaskDelete
				if err := proto.Unmarshal(env.Event.GetValue(), &e); err != nil {
					c.Log.Error(err, "Decoding a task delete event")
					continue
				}
				containerID, processID = e.ContainerID, e.ID
			}
			// Exec processes exit too: only the container's own process ends it.
			if processID != "" && processID != containerID {
				continue
			}
			if nsPath, ok := owners[containerID]; ok {
				delete(owners, containerID)
				if err := StopSandbox(c.SandboxDir, nsPath); err != nil {
					c.Log.Error(err, "Stopping a sandbox", "container", containerID)
				} else {
					c.Log.Info("Sandbox stopped", "container", containerID, "netns", nsPath, "event", env.Topic)
				}
			}
		}
	}
}

// catchUp marks the sandboxes of the running tasks started and removes the marks of every other.
func (c ContainerdSandboxes) catchUp(ctx context.Context, containers containersapi.ContainersClient, tasks tasksapi.TasksClient) (map[string]string, error) {
	list, err := tasks.List(ctx, &tasksapi.ListTasksRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing containerd's tasks: %w", err)
	}
	owners := map[string]string{}
	for _, t := range list.Tasks {
		if t.Status != tasktypes.Status_RUNNING && t.Status != tasktypes.Status_PAUSED {
			continue
		}
		// containerd (1.6 and 2.x) lists a task with its container's ID in ID, ContainerID empty.
		id := t.ID
		if id == "" {
			id = t.ContainerID
		}
		if err := c.started(ctx, containers, owners, id); err != nil {
			if status.Code(err) == codes.NotFound {
				continue // deleted since the list: its delete event follows
			}
			return nil, err
		}
	}
	running := map[string]bool{}
	for _, nsPath := range owners {
		running[sandboxFileName(nsPath)] = true
	}
	entries, err := os.ReadDir(c.SandboxDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading the sandbox directory: %w", err)
	}
	for _, e := range entries {
		if !running[e.Name()] {
			if err := os.Remove(c.SandboxDir + "/" + e.Name()); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("forgetting a sandbox that no longer runs: %w", err)
			}
		}
	}
	return owners, nil
}

// started marks the sandbox of the container's network namespace started when the container owns
// it (its spec names a namespace path outside /proc).
func (c ContainerdSandboxes) started(ctx context.Context, containers containersapi.ContainersClient, owners map[string]string, id string) error {
	resp, err := containers.Get(ctx, &containersapi.GetContainerRequest{ID: id})
	if err != nil {
		return fmt.Errorf("getting container %s: %w", id, err)
	}
	nsPath, err := NetworkNamespaceOfSpec(resp.Container.GetSpec().GetValue())
	if err != nil {
		return fmt.Errorf("container %s: %w", id, err)
	}
	if nsPath == "" || strings.HasPrefix(nsPath, "/proc/") {
		return nil // the host's namespace, or another container's
	}
	if err := StartSandbox(c.SandboxDir, nsPath); err != nil {
		return err
	}
	owners[id] = nsPath
	c.Log.Info("Sandbox started", "container", id, "netns", nsPath)
	return nil
}

// NetworkNamespaceOfSpec returns the path of the network namespace an OCI runtime spec (JSON) joins,
// or "" when it joins none (a new one, or the host's).
func NetworkNamespaceOfSpec(spec []byte) (string, error) {
	var s struct {
		Linux *struct {
			Namespaces []struct {
				Type string `json:"type"`
				Path string `json:"path"`
			} `json:"namespaces"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(spec, &s); err != nil {
		return "", fmt.Errorf("decoding the OCI spec: %w", err)
	}
	if s.Linux == nil {
		return "", nil
	}
	for _, n := range s.Linux.Namespaces {
		if n.Type == "network" {
			return n.Path, nil
		}
	}
	return "", nil
}
