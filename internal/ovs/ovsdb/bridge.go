package ovsdb

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/winnet-io/winnet/internal/ovs/ovsdb/vswitchd"
)

const (
	// DatapathNetdev is the userspace datapath (used on Linux test nodes).
	DatapathNetdev = "netdev"
	// DatapathSystem is the kernel (Linux) or Hyper-V extension (Windows) datapath.
	DatapathSystem = "system"

	otherConfigHWAddr     = "hwaddr"
	otherConfigDatapathID = "datapath-id"
)

// BridgeSpec is the desired state of a bridge. The bridge always speaks
// OpenFlow 1.5 only, fails secure and carries the ownership mark; its LOCAL
// port (an internal port named like the bridge) is created with it.
type BridgeSpec struct {
	Name string
	// DatapathType is "netdev" or "system"; empty leaves OVS's default (system).
	DatapathType string
	// HWAddr sets other_config:hwaddr (the MAC of the LOCAL interface) if not nil.
	HWAddr net.HardwareAddr
	// DatapathID sets other_config:datapath-id (16 hex digits) if not zero.
	DatapathID uint64
	// ExternalIDs are added to the bridge's external_ids (existing keys are kept).
	ExternalIDs map[string]string
	// FlowLimits caps the number of flows of OpenFlow tables (table -> limit; flow_limit of the
	// table's Flow_Table row, overflow policy refuse): a flow added beyond it, learned ones included,
	// is refused. Tables not named keep theirs.
	FlowLimits map[int]int
}

func (s BridgeSpec) otherConfig() map[string]string {
	oc := map[string]string{}
	if s.HWAddr != nil {
		oc[otherConfigHWAddr] = strings.ToLower(s.HWAddr.String())
	}
	if s.DatapathID != 0 {
		oc[otherConfigDatapathID] = fmt.Sprintf("%016x", s.DatapathID)
	}
	return oc
}

func (c *Client) ownerIDs(extra map[string]string) map[string]string {
	ids := copyMap(extra)
	ids[OwnerKey] = c.owner
	return ids
}

// getBridge returns the cached bridge or ErrNotFound.
func (c *Client) getBridge(ctx context.Context, name string) (*vswitchd.Bridge, error) {
	br := &vswitchd.Bridge{Name: name}
	if err := c.ovs.Get(ctx, br); err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("bridge %q: %w", name, ErrNotFound)
		}
		return nil, fmt.Errorf("getting bridge %q: %w", name, err)
	}
	return br, nil
}

// EnsureBridge creates the bridge with its LOCAL port or fixes its settings.
func (c *Client) EnsureBridge(ctx context.Context, spec BridgeSpec) (bool, error) {
	if spec.Name == "" {
		return false, fmt.Errorf("ensuring bridge: empty name")
	}
	log := c.logger(ctx).WithValues("bridge", spec.Name)
	return c.apply(ctx, fmt.Sprintf("ensuring bridge %q", spec.Name), func(ctx context.Context, t *txn) error {
		br, err := c.getBridge(ctx, spec.Name)
		if err != nil && !isErrNotFound(err) {
			return err
		}
		if br == nil {
			log.Info("Creating bridge")
			return c.planCreateBridge(ctx, t, spec)
		}
		return c.planUpdateBridge(ctx, t, br, spec)
	})
}

func (c *Client) planCreateBridge(ctx context.Context, t *txn, spec BridgeSpec) error {
	root, err := c.rootRow(ctx)
	if err != nil {
		return err
	}
	zero := 0
	guard := &vswitchd.Bridge{Name: spec.Name}
	if err := t.add(c.ovs.Where(guard).Wait(ovsdb.WaitConditionNotEqual, &zero, guard, &guard.Name)); err != nil {
		return err
	}
	portUUID, err := c.planCreatePortRows(t, PortSpec{Name: spec.Name, Type: PortTypeInternal})
	if err != nil {
		return err
	}
	fail := vswitchd.BridgeFailModeSecure
	br := &vswitchd.Bridge{
		UUID:         t.named("bridge"),
		Name:         spec.Name,
		DatapathType: spec.DatapathType,
		Protocols:    []vswitchd.BridgeProtocols{vswitchd.BridgeProtocolsOpenflow15},
		FailMode:     &fail,
		OtherConfig:  spec.otherConfig(),
		ExternalIDs:  c.ownerIDs(spec.ExternalIDs),
		Ports:        []string{portUUID},
	}
	for table, limit := range spec.FlowLimits {
		uuid, err := c.planFlowTable(t, limit)
		if err != nil {
			return err
		}
		if br.FlowTables == nil {
			br.FlowTables = map[int]string{}
		}
		br.FlowTables[table] = uuid
	}
	if err := t.add(c.ovs.Create(br)); err != nil {
		return err
	}
	// Insert and reference in the same transaction, or the row is garbage-collected.
	return t.add(c.ovs.Where(root).Mutate(root, model.Mutation{
		Field: &root.Bridges, Mutator: ovsdb.MutateOperationInsert, Value: []string{br.UUID},
	}))
}

func (c *Client) planUpdateBridge(ctx context.Context, t *txn, br *vswitchd.Bridge, spec BridgeSpec) error {
	updated := &vswitchd.Bridge{UUID: br.UUID}
	var fields []any
	if spec.DatapathType != "" && br.DatapathType != spec.DatapathType {
		updated.DatapathType = spec.DatapathType
		fields = append(fields, &updated.DatapathType)
	}
	if len(br.Protocols) != 1 || br.Protocols[0] != vswitchd.BridgeProtocolsOpenflow15 {
		updated.Protocols = []vswitchd.BridgeProtocols{vswitchd.BridgeProtocolsOpenflow15}
		fields = append(fields, &updated.Protocols)
	}
	if br.FailMode == nil || *br.FailMode != vswitchd.BridgeFailModeSecure {
		fail := vswitchd.BridgeFailModeSecure
		updated.FailMode = &fail
		fields = append(fields, &updated.FailMode)
	}
	if oc, changed := mergeMap(br.OtherConfig, spec.otherConfig()); changed {
		updated.OtherConfig = oc
		fields = append(fields, &updated.OtherConfig)
	}
	if ids, changed := mergeMap(br.ExternalIDs, c.ownerIDs(spec.ExternalIDs)); changed {
		updated.ExternalIDs = ids
		fields = append(fields, &updated.ExternalIDs)
	}
	tables := maps.Clone(br.FlowTables)
	for table, limit := range spec.FlowLimits {
		if uuid, ok := br.FlowTables[table]; ok {
			ft := &vswitchd.FlowTable{UUID: uuid}
			if err := c.ovs.Get(ctx, ft); err == nil {
				if ft.FlowLimit == nil || *ft.FlowLimit != limit {
					ft.FlowLimit = &limit
					if err := t.add(c.ovs.Where(ft).Update(ft, &ft.FlowLimit)); err != nil {
						return err
					}
				}
				continue
			}
		}
		uuid, err := c.planFlowTable(t, limit)
		if err != nil {
			return err
		}
		if tables == nil {
			tables = map[int]string{}
		}
		tables[table] = uuid
	}
	if !maps.Equal(tables, br.FlowTables) {
		updated.FlowTables = tables
		fields = append(fields, &updated.FlowTables)
	}
	if len(fields) > 0 {
		if err := t.add(c.ovs.Where(updated).Update(updated, fields...)); err != nil {
			return err
		}
	}
	// The LOCAL port must exist too.
	return c.planPort(ctx, t, br, PortSpec{Name: spec.Name, Type: PortTypeInternal})
}

// planFlowTable plans a Flow_Table row with the limit and returns its named UUID; it must be
// referenced in the same transaction.
func (c *Client) planFlowTable(t *txn, limit int) (string, error) {
	ft := &vswitchd.FlowTable{UUID: t.named("flowtable"), FlowLimit: &limit}
	if err := t.add(c.ovs.Create(ft)); err != nil {
		return "", err
	}
	return ft.UUID, nil
}

// DeleteBridge deletes the bridge; its ports and interfaces go with it.
func (c *Client) DeleteBridge(ctx context.Context, name string) (bool, error) {
	return c.apply(ctx, fmt.Sprintf("deleting bridge %q", name), func(ctx context.Context, t *txn) error {
		br, err := c.getBridge(ctx, name)
		if isErrNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		root, err := c.rootRow(ctx)
		if err != nil {
			return err
		}
		if err := t.add(c.ovs.Where(root).Mutate(root, model.Mutation{
			Field: &root.Bridges, Mutator: ovsdb.MutateOperationDelete, Value: []string{br.UUID},
		})); err != nil {
			return err
		}
		for _, pu := range br.Ports {
			if err := c.planDeletePortRows(ctx, t, pu); err != nil {
				return err
			}
		}
		return t.add(c.ovs.Where(br).Delete())
	})
}

// BridgeExternalIDs returns a copy of the bridge's external_ids.
func (c *Client) BridgeExternalIDs(ctx context.Context, bridge string) (map[string]string, error) {
	br, err := c.getBridge(ctx, bridge)
	if err != nil {
		return nil, err
	}
	return copyMap(br.ExternalIDs), nil
}

// SetBridgeExternalIDs sets the given keys in the bridge's external_ids; an
// empty value removes the key.
func (c *Client) SetBridgeExternalIDs(ctx context.Context, bridge string, ids map[string]string) (bool, error) {
	return c.apply(ctx, fmt.Sprintf("setting external_ids on bridge %q", bridge), func(ctx context.Context, t *txn) error {
		br, err := c.getBridge(ctx, bridge)
		if err != nil {
			return err
		}
		out := copyMap(br.ExternalIDs)
		changed := false
		for k, v := range ids {
			cur, ok := out[k]
			switch {
			case v == "" && ok:
				delete(out, k)
				changed = true
			case v != "" && (!ok || cur != v):
				out[k] = v
				changed = true
			}
		}
		if !changed {
			return nil
		}
		updated := &vswitchd.Bridge{UUID: br.UUID, ExternalIDs: out}
		return t.add(c.ovs.Where(updated).Update(updated, &updated.ExternalIDs))
	})
}

// Bridges returns the names of the bridges that carry the ownership mark.
func (c *Client) Bridges(ctx context.Context) ([]string, error) {
	var brs []vswitchd.Bridge
	if err := c.ovs.WhereCache(func(b *vswitchd.Bridge) bool { return b.ExternalIDs[OwnerKey] == c.owner }).List(ctx, &brs); err != nil {
		return nil, fmt.Errorf("listing bridges: %w", err)
	}
	names := make([]string, 0, len(brs))
	for _, b := range brs {
		names = append(names, b.Name)
	}
	slices.Sort(names)
	return names, nil
}
