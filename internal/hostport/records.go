package hostport

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/winnet-io/winnet/internal/securefs"
)

// DirName is the directory, in the agent's state directory, of the sandboxes' mapping records:
// beside the attachment records ("pods"), never in them. An agent of release 0.1.0 decodes every
// "pods/*.json" as an attachment with unknown fields refused and sets aside what it cannot
// decode; it never looks in this directory, so a rollback leaves it alone (and serves no
// hostPort), and a roll forward finds it again.
const DirName = "hostports"

// maxRecordSize bounds a record read at start.
const maxRecordSize = 64 << 10

// Record is one sandbox's mappings as the agent keeps them.
type Record struct {
	SandboxID string    `json:"sandboxID"`
	Mappings  []Mapping `json:"mappings"`
}

// Records keeps one JSON file per sandbox with mappings under a directory (StateDir/DirName).
type Records struct {
	Dir string
}

// Put records the sandbox's mappings (none: Delete).
func (s Records) Put(sandbox string, mappings []Mapping) error {
	if len(mappings) == 0 {
		return s.Delete(sandbox)
	}
	b, err := json.Marshal(Record{SandboxID: sandbox, Mappings: mappings})
	if err != nil {
		return fmt.Errorf("encoding the hostPorts of sandbox %s: %w", sandbox, err)
	}
	if _, err := securefs.EnsureDir(s.Dir, securefs.Private); err != nil {
		return fmt.Errorf("preparing the hostPort records: %w", err)
	}
	if err := securefs.WriteFile(s.path(sandbox), b, securefs.Private); err != nil {
		return fmt.Errorf("recording the hostPorts of sandbox %s: %w", sandbox, err)
	}
	return nil
}

// Delete forgets the sandbox's record; an unknown sandbox is a no-op.
func (s Records) Delete(sandbox string) error {
	if err := os.Remove(s.path(sandbox)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the hostPorts of sandbox %s: %w", sandbox, err)
	}
	return nil
}

// Load reads every record, by sandbox ID. A record that cannot be read or decoded, or names
// another sandbox than its file, is returned in bad (and not in records) for the caller to report
// and delete.
func (s Records) Load() (records map[string][]Mapping, bad map[string]error, err error) {
	records, bad = map[string][]Mapping{}, map[string]error{}
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return records, bad, nil
	} else if err != nil {
		return nil, nil, fmt.Errorf("reading the hostPort records %s: %w", s.Dir, err)
	}
	for _, e := range entries {
		sandbox, ok := strings.CutSuffix(e.Name(), ".json")
		if e.IsDir() || !ok {
			continue
		}
		b, err := securefs.ReadFile(filepath.Join(s.Dir, e.Name()), securefs.Private, maxRecordSize)
		if err != nil {
			bad[sandbox] = err
			continue
		}
		var r Record
		if err := json.Unmarshal(b, &r); err != nil {
			bad[sandbox] = fmt.Errorf("decoding: %w", err)
			continue
		}
		if r.SandboxID != sandbox {
			bad[sandbox] = fmt.Errorf("records sandbox %q", r.SandboxID)
			continue
		}
		records[sandbox] = r.Mappings
	}
	return records, bad, nil
}

func (s Records) path(sandbox string) string {
	return filepath.Join(s.Dir, sandbox+".json")
}
