package podendpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/winnet-io/winnet/internal/securefs"
)

// endpointPrefix starts the name of every Pod's HNS endpoint and OVS port: with the hash that
// follows it, winnet's ownership mark on them.
const endpointPrefix = "winnet-"

// endpointNamePattern matches the names EndpointName gives (and not the gateway's or tunnel's).
var endpointNamePattern = regexp.MustCompile(`^` + endpointPrefix + `[0-9a-f]{8}$`)

// EndpointName is the name of the HNS endpoint and the OVS port of a Pod sandbox: "winnet-" and 8
// hex digits of the SHA-256 of the sandbox ID, 15 bytes, so that it is also a valid Linux interface
// name (the host end of the endpoint in the HNS simulator).
func EndpointName(sandboxID string) string {
	sum := sha256.Sum256([]byte(sandboxID))
	return endpointPrefix + hex.EncodeToString(sum[:])[:8]
}

// Attachment is one Pod sandbox's network attachment as the agent made it.
type Attachment struct {
	SandboxID    string `json:"sandboxID"`
	PodNamespace string `json:"podNamespace"`
	PodName      string `json:"podName"`
	// PodUID is empty until known (from K8S_POD_UID or the Pod object).
	PodUID string `json:"podUID,omitempty"`
	// Netns and IfName are the sandbox's CNI_NETNS and CNI_IFNAME.
	Netns  string `json:"netns"`
	IfName string `json:"ifName"`
	// EndpointName names the HNS endpoint and the OVS port.
	EndpointName string `json:"endpointName"`
	EndpointID   string `json:"endpointID"`
	// NetworkID is the HNS network and Bridge the OVS bridge the endpoint and port are on.
	NetworkID string `json:"networkID"`
	Bridge    string `json:"bridge"`
	// IP is the Pod's address with the Pod CIDR's prefix length; Gateway its default gateway.
	IP      netip.Prefix `json:"ip"`
	Gateway netip.Addr   `json:"gateway"`
	MAC     string       `json:"mac"`
	MTU     int          `json:"mtu"`
	OFPort  int32        `json:"ofPort"`
	// Containers are the containers ADD attached: the sandbox and workload containers.
	Containers []string `json:"containers"`
	// PodSeen records that the Pod object was seen for this attachment: once it is gone, so is the Pod.
	PodSeen bool `json:"podSeen,omitempty"`
	// Deleting records that a detach began: nothing is repaired any more, and a detach that failed
	// half-way is finished by the next DEL or by the PodEndpoint reconciler.
	Deleting bool      `json:"deleting,omitempty"`
	Created  time.Time `json:"created"`
	// WaitingForVNIC records that the endpoint's vNIC has not appeared yet (it comes when the
	// runtime starts the sandbox, after ADD): the port is unbound and has no ofport (see vnic.go).
	WaitingForVNIC bool `json:"waitingForVNIC,omitempty"`
	// VNICMissing records that the vNIC did not appear within the agent's wait.
	VNICMissing bool `json:"vnicMissing,omitempty"`
	// PolicyPending records that the NetworkPolicy flows for the Pod were not committed within the
	// agent's wait (Options.PolicyTimeout): the port stays unbound, the Pod isolated, until they are.
	PolicyPending bool `json:"policyPending,omitempty"`
	// VNICToForwarding is how long the port took to forward once the vNIC appeared.
	VNICToForwarding time.Duration `json:"vnicToForwarding,omitempty"`
}

// Pod returns the key of the attachment's Pod (the PodEndpoint reconciler's work item).
func (a *Attachment) Pod() types.NamespacedName {
	return types.NamespacedName{Namespace: a.PodNamespace, Name: a.PodName}
}

func (a *Attachment) clone() *Attachment {
	c := *a
	c.Containers = slices.Clone(a.Containers)
	return &c
}

// Store holds the node's attachments, in memory and as one JSON file per sandbox under its
// directory, so that a restarted agent knows what it attached. It is safe for concurrent use;
// callers serialise the changes to one sandbox.
type Store struct {
	dir string
	mu  sync.RWMutex
	// bySandbox holds every attachment; byPod the sandboxes of each Pod.
	bySandbox map[string]*Attachment
	byPod     map[types.NamespacedName][]string
	// setAside are the records OpenStore did not trust and moved aside.
	setAside []SetAside
}

// MaxAttachmentSize bounds an attachment record read at start; the agent writes about 1 KiB.
const MaxAttachmentSize = 64 << 10

// SetAside is a record OpenStore did not trust: it was moved to Path (beside its old name, never
// read again nor removed) for the reason Err, and the agent went on without it.
type SetAside struct {
	Record, Path string
	Err          error
}

// OpenStore loads the attachments recorded under dir, creating it protected if needed
// (internal/securefs; its owner must be the node's administrators). A record that is not a bounded
// regular file owned by them, or not a valid attachment of the sandbox its name says, is moved
// aside (SetAside lists them) and never crashes the agent nor deletes anything.
func OpenStore(dir string) (*Store, error) {
	if _, err := securefs.EnsureDir(dir, securefs.Private); err != nil {
		return nil, fmt.Errorf("preparing the attachment store: %w", err)
	}
	s := &Store{dir: dir, bySandbox: map[string]*Attachment{}, byPod: map[types.NamespacedName][]string{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the attachment store %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		a, err := readAttachment(path, strings.TrimSuffix(e.Name(), ".json"))
		if err != nil {
			aside, merr := securefs.MoveAside(path)
			if merr != nil {
				return nil, fmt.Errorf("setting aside the untrusted record %s (%w): %w", path, err, merr)
			}
			s.setAside = append(s.setAside, SetAside{Record: path, Path: aside, Err: err})
			continue
		}
		s.index(a)
	}
	return s, nil
}

// readAttachment reads and validates the record of sandboxID at path.
func readAttachment(path, sandboxID string) (*Attachment, error) {
	b, err := securefs.ReadFile(path, securefs.Private, MaxAttachmentSize)
	if err != nil {
		return nil, err
	}
	a := &Attachment{}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(a); err != nil {
		return nil, fmt.Errorf("decoding attachment %s: %w", path, err)
	}
	if err := a.validate(sandboxID); err != nil {
		return nil, fmt.Errorf("attachment %s: %w", path, err)
	}
	return a, nil
}

// validate checks an attachment read from a file: it is the sandbox its file name says, of a Pod,
// with the endpoint name winnet derives and the address fields well-formed.
func (a *Attachment) validate(sandboxID string) error {
	switch {
	case a.SandboxID != sandboxID:
		return fmt.Errorf("records sandbox %q, not %q", a.SandboxID, sandboxID)
	case a.PodNamespace == "" || a.PodName == "":
		return errors.New("names no Pod")
	case a.EndpointName != EndpointName(a.SandboxID):
		return fmt.Errorf("endpoint name %q is not winnet's %q", a.EndpointName, EndpointName(a.SandboxID))
	case !a.IP.IsValid():
		return errors.New("has no valid IP")
	case len(a.Containers) > 1024:
		return fmt.Errorf("lists %d containers", len(a.Containers))
	}
	return nil
}

// SetAside returns the records OpenStore did not trust and moved aside.
func (s *Store) SetAside() []SetAside {
	return slices.Clone(s.setAside)
}

func (s *Store) index(a *Attachment) {
	if _, ok := s.bySandbox[a.SandboxID]; !ok {
		s.byPod[a.Pod()] = append(s.byPod[a.Pod()], a.SandboxID)
	}
	s.bySandbox[a.SandboxID] = a
}

// Get returns a copy of the sandbox's attachment.
func (s *Store) Get(sandboxID string) (*Attachment, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	a, ok := s.bySandbox[sandboxID]
	if !ok {
		return nil, false
	}
	return a.clone(), true
}

// ByPod returns copies of the attachments of a Pod (normally one; more while a recreated sandbox
// replaces the previous one).
func (s *Store) ByPod(pod types.NamespacedName) []*Attachment {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*Attachment
	for _, id := range s.byPod[pod] {
		out = append(out, s.bySandbox[id].clone())
	}
	return out
}

// List returns copies of every attachment.
func (s *Store) List() []*Attachment {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*Attachment, 0, len(s.bySandbox))
	for _, a := range s.bySandbox {
		out = append(out, a.clone())
	}
	return out
}

// Put records the attachment, on disk first.
func (s *Store) Put(a *Attachment) error {
	b, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("encoding attachment of sandbox %s: %w", a.SandboxID, err)
	}
	if err := writeFileAtomic(s.path(a.SandboxID), b); err != nil {
		return fmt.Errorf("recording attachment of sandbox %s: %w", a.SandboxID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index(a.clone())
	return nil
}

// Delete forgets the sandbox's attachment; forgetting an unknown sandbox is a no-op.
func (s *Store) Delete(sandboxID string) error {
	if err := os.Remove(s.path(sandboxID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing attachment of sandbox %s: %w", sandboxID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.bySandbox[sandboxID]
	if !ok {
		return nil
	}
	delete(s.bySandbox, sandboxID)
	pod := a.Pod()
	s.byPod[pod] = slices.DeleteFunc(s.byPod[pod], func(id string) bool { return id == sandboxID })
	if len(s.byPod[pod]) == 0 {
		delete(s.byPod, pod)
	}
	return nil
}

func (s *Store) path(sandboxID string) string {
	return filepath.Join(s.dir, sandboxID+".json")
}

// writeFileAtomic writes data to a temporary file of a unique name beside path and renames it
// over path, so that a crash leaves the old record or the new one. The directory is made again
// (protected) if it is gone: a retired node's last CNI DEL removes the agent's state (cni.Retire),
// and the node network may come back while the agent runs.
func writeFileAtomic(path string, data []byte) error {
	if _, err := securefs.EnsureDir(filepath.Dir(path), securefs.Private); err != nil {
		return err
	}
	return securefs.WriteFile(path, data, securefs.Private)
}
