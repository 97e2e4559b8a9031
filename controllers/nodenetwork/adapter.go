package nodenetwork

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/securefs"
)

// AdapterRecordFile is the file, in the agent's state directory, where the agent records the uplink
// adapter's IP configuration before HNS takes it to the management vNIC. It outlives the agent and
// a reboot: the agent re-adds the node IP from it when HNS did not move it, checks against it that
// the adapter got its configuration back at teardown, and `winnet-agent reset` reads it offline.
func AdapterRecordFile(stateDir, adapter string) string {
	return filepath.Join(stateDir, "adapter-"+adapter+".json")
}

// AdapterRecord is what the agent records of the uplink adapter.
type AdapterRecord struct {
	Adapter  string           `json:"adapter"`
	IPConfig hostnet.IPConfig `json:"ipConfig"`
}

// maxAdapterRecordSize bounds an adapter record read from the state directory.
const maxAdapterRecordSize = 64 << 10

// ReadAdapterRecord reads a record written by the agent; a missing file wraps fs.ErrNotExist. The
// record feeds the host adapter's IP configuration, so it must be a bounded regular file owned by
// the node's administrators and closed to others (internal/securefs), and name the adapter its file
// name says.
func ReadAdapterRecord(path string) (AdapterRecord, error) {
	b, err := securefs.ReadFile(path, securefs.Private, maxAdapterRecordSize)
	if err != nil {
		return AdapterRecord{}, fmt.Errorf("reading the adapter record: %w", err)
	}
	var rec AdapterRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return AdapterRecord{}, fmt.Errorf("decoding the adapter record %s: %w", path, err)
	}
	if rec.Adapter == "" || AdapterRecordFile(filepath.Dir(path), rec.Adapter) != path {
		return AdapterRecord{}, fmt.Errorf("the adapter record %s names adapter %q", path, rec.Adapter)
	}
	return rec, nil
}

// adapterRecords keeps the records in memory and, with a state directory, in files.
type adapterRecords struct {
	mu  sync.Mutex
	dir string
	mem map[string]hostnet.IPConfig
}

func (a *adapterRecords) get(adapter string) (hostnet.IPConfig, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if cfg, ok := a.mem[adapter]; ok {
		return cfg, true, nil
	}
	if a.dir == "" {
		return hostnet.IPConfig{}, false, nil
	}
	rec, err := ReadAdapterRecord(AdapterRecordFile(a.dir, adapter))
	if errors.Is(err, fs.ErrNotExist) {
		return hostnet.IPConfig{}, false, nil
	} else if err != nil {
		return hostnet.IPConfig{}, false, err
	}
	a.remember(adapter, rec.IPConfig)
	return rec.IPConfig, true, nil
}

func (a *adapterRecords) remember(adapter string, cfg hostnet.IPConfig) {
	if a.mem == nil {
		a.mem = map[string]hostnet.IPConfig{}
	}
	a.mem[adapter] = cfg
}

func (a *adapterRecords) put(adapter string, cfg hostnet.IPConfig) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.dir != "" {
		b, err := json.MarshalIndent(AdapterRecord{Adapter: adapter, IPConfig: cfg}, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding the adapter record: %w", err)
		}
		if _, err := securefs.EnsureDir(a.dir, securefs.Private); err != nil {
			return fmt.Errorf("recording adapter %s: %w", adapter, err)
		}
		if err := securefs.WriteFile(AdapterRecordFile(a.dir, adapter), append(b, '\n'), securefs.Private); err != nil {
			return fmt.Errorf("recording adapter %s: %w", adapter, err)
		}
	}
	a.remember(adapter, cfg)
	return nil
}

func (a *adapterRecords) delete(adapter string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.mem, adapter)
	if a.dir == "" {
		return nil
	}
	if err := os.Remove(AdapterRecordFile(a.dir, adapter)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the record of adapter %s: %w", adapter, err)
	}
	return nil
}

// AdapterIPWait bounds how long the agent, and `winnet-agent reset`, wait for HNS to give the adapter
// the node IP back after the network is deleted, before they re-apply the recorded configuration.
const AdapterIPWait = 10 * time.Second

// RestoreAdapter waits, bounded by wait, for the adapter to hold ip again after HNS deleted the
// network, and re-applies the recorded configuration cfg when HNS did not give it back. It reports
// whether it re-applied it; it fails when the adapter does not hold ip even then.
func RestoreAdapter(ctx context.Context, h interface {
	hostnet.Links
	hostnet.Adapters
}, adapter hostnet.Link, cfg hostnet.IPConfig, ip netip.Addr, wait time.Duration) (bool, error) {
	deadline := time.Now().Add(wait)
	for {
		if p, err := addressOf(ctx, h, adapter.Index, ip); err != nil {
			return false, err
		} else if p.IsValid() {
			return false, nil
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := h.ApplyIPConfig(ctx, adapter.Index, cfg); err != nil {
		return true, fmt.Errorf("giving adapter %s its recorded IP configuration back: %w", adapter.Name, err)
	}
	if p, err := addressOf(ctx, h, adapter.Index, ip); err != nil {
		return true, err
	} else if !p.IsValid() {
		return true, fmt.Errorf("adapter %s does not hold %s after its recorded configuration was re-applied", adapter.Name, ip)
	}
	return true, nil
}
