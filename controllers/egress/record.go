package egress

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"path/filepath"
	"slices"

	"github.com/winnet-io/winnet/internal/securefs"
)

// RecordFileName is the file in the agent's state directory that names the egress IPs the agent put
// on the bridge interface, written before it adds one: an agent that starts again removes those it no
// longer holds, even when their Egress was deleted while no agent ran (no other Egress names the IP
// then, and the agent tells an egress IP from the node's other addresses only by this record).
const RecordFileName = "egress-ips.json"

// maxRecordSize bounds what is read: thousands of addresses with room.
const maxRecordSize = 1 << 20

type recordFile struct {
	Version int          `json:"version"`
	IPs     []netip.Addr `json:"ips"`
}

// loadRecord reads the egress IPs recorded at path: none when the file does not exist. A file that
// cannot be trusted or read is an error (its IPs, unknown, are left where they are).
func loadRecord(path string) ([]netip.Addr, error) {
	data, err := securefs.ReadFile(path, securefs.Private, maxRecordSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var f recordFile
	if err := json.Unmarshal(data, &f); err != nil || f.Version != 1 {
		return nil, fmt.Errorf("reading %s: not a record of egress IPs (version 1): %v", path, err)
	}
	var out []netip.Addr
	for _, ip := range f.IPs {
		if ip.Is4() && !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out, nil
}

// saveRecord writes the egress IPs to path (the state directory is the agent's, private).
func saveRecord(path string, ips []netip.Addr) error {
	ips = slices.SortedFunc(slices.Values(ips), netip.Addr.Compare)
	data, err := json.Marshal(recordFile{Version: 1, IPs: ips})
	if err != nil {
		return err
	}
	if _, err := securefs.EnsureDir(filepath.Dir(path), securefs.Private); err != nil {
		return err
	}
	return securefs.WriteFile(path, data, securefs.Private)
}
