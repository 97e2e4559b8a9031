package ovsdb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/winnet-io/winnet/internal/ovs/ovsdb/vswitchd"
)

// PortType is the type of a port's (single) interface.
type PortType string

const (
	// PortTypeInternal is an OVS internal port (gateway, Pod ports on Windows, LOCAL).
	PortTypeInternal PortType = "internal"
	// PortTypeSystem is an existing host interface attached to the bridge (the uplink).
	PortTypeSystem PortType = "system"
	// PortTypeVXLAN is a flow-based VXLAN tunnel port.
	PortTypeVXLAN PortType = "vxlan"
	// PortTypeGeneve is a flow-based Geneve tunnel port.
	PortTypeGeneve PortType = "geneve"
)

// ovsType is the value of Interface.type; OVS spells system as "".
func (t PortType) ovsType() string {
	if t == PortTypeSystem {
		return ""
	}
	return string(t)
}

// PortSpec is the desired state of a port with one interface of the same name.
type PortSpec struct {
	Name string
	Type PortType
	// OFPortRequest asks OVS for this OpenFlow port number; 0 lets OVS choose.
	OFPortRequest int32
	// Options are the interface options (tunnel settings); nil means none.
	Options map[string]string
	// ExternalIDs are added to the port's and interface's external_ids.
	ExternalIDs map[string]string
}

// TunnelOptions are the settings of a flow-based tunnel port.
type TunnelOptions struct {
	// LocalIP is the source address of encapsulated packets; empty lets OVS choose.
	LocalIP string
	// DstPort is the UDP port; 0 keeps the IANA default (4789 VXLAN, 6081 Geneve).
	DstPort int
}

// TunnelPort returns the spec of a flow-based tunnel port
// (options remote_ip=flow, key=flow, local_ip, dst_port).
func TunnelPort(name string, typ PortType, ofPort int32, o TunnelOptions) PortSpec {
	opts := map[string]string{"remote_ip": "flow", "key": "flow"}
	if o.LocalIP != "" {
		opts["local_ip"] = o.LocalIP
	}
	if o.DstPort != 0 {
		opts["dst_port"] = strconv.Itoa(o.DstPort)
	}
	return PortSpec{Name: name, Type: typ, OFPortRequest: ofPort, Options: opts}
}

// PortInfo describes an owned port as OVS reports it.
type PortInfo struct {
	Name   string
	Type   PortType
	OFPort int32
}

func (c *Client) logger(ctx context.Context) logr.Logger {
	if l, err := logr.FromContext(ctx); err == nil {
		return l
	}
	return c.log
}

func isErrNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

func (c *Client) getPort(ctx context.Context, name string) (*vswitchd.Port, error) {
	p := &vswitchd.Port{Name: name}
	if err := c.ovs.Get(ctx, p); err != nil {
		if isNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting port %q: %w", name, err)
	}
	return p, nil
}

func (c *Client) getInterface(ctx context.Context, uuid string) (*vswitchd.Interface, error) {
	i := &vswitchd.Interface{UUID: uuid}
	if err := c.ovs.Get(ctx, i); err != nil {
		if isNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting interface %s: %w", uuid, err)
	}
	return i, nil
}

// planCreatePortRows adds the inserts of an interface and its port; it returns
// the port's named UUID, which the caller must reference from a bridge.
func (c *Client) planCreatePortRows(t *txn, spec PortSpec) (string, error) {
	zero := 0
	guard := &vswitchd.Port{Name: spec.Name}
	if err := t.add(c.ovs.Where(guard).Wait(ovsdb.WaitConditionNotEqual, &zero, guard, &guard.Name)); err != nil {
		return "", err
	}
	iface := &vswitchd.Interface{
		UUID:        t.named("iface"),
		Name:        spec.Name,
		Type:        spec.Type.ovsType(),
		Options:     spec.Options,
		ExternalIDs: c.ownerIDs(spec.ExternalIDs),
	}
	if spec.OFPortRequest > 0 {
		req := int(spec.OFPortRequest)
		iface.OfportRequest = &req
	}
	port := &vswitchd.Port{
		UUID:        t.named("port"),
		Name:        spec.Name,
		Interfaces:  []string{iface.UUID},
		ExternalIDs: c.ownerIDs(spec.ExternalIDs),
	}
	if err := t.add(c.ovs.Create(iface)); err != nil {
		return "", err
	}
	if err := t.add(c.ovs.Create(port)); err != nil {
		return "", err
	}
	return port.UUID, nil
}

// planPort adds what makes the port on br match spec: create, move or fix.
func (c *Client) planPort(ctx context.Context, t *txn, br *vswitchd.Bridge, spec PortSpec) error {
	port, err := c.getPort(ctx, spec.Name)
	if err != nil {
		return err
	}
	if port == nil {
		c.logger(ctx).Info("Creating port", "bridge", br.Name, "port", spec.Name, "type", spec.Type)
		uuid, err := c.planCreatePortRows(t, spec)
		if err != nil {
			return err
		}
		return t.add(c.ovs.Where(br).Mutate(br, model.Mutation{
			Field: &br.Ports, Mutator: ovsdb.MutateOperationInsert, Value: []string{uuid},
		}))
	}
	if !slices.Contains(br.Ports, port.UUID) {
		// The port lives on another bridge: move it.
		var others []vswitchd.Bridge
		if err := c.ovs.WhereCache(func(b *vswitchd.Bridge) bool { return slices.Contains(b.Ports, port.UUID) }).List(ctx, &others); err != nil {
			return err
		}
		for i := range others {
			o := &others[i]
			if err := t.add(c.ovs.Where(o).Mutate(o, model.Mutation{
				Field: &o.Ports, Mutator: ovsdb.MutateOperationDelete, Value: []string{port.UUID},
			})); err != nil {
				return err
			}
		}
		if err := t.add(c.ovs.Where(br).Mutate(br, model.Mutation{
			Field: &br.Ports, Mutator: ovsdb.MutateOperationInsert, Value: []string{port.UUID},
		})); err != nil {
			return err
		}
	}
	if ids, changed := mergeMap(port.ExternalIDs, c.ownerIDs(spec.ExternalIDs)); changed {
		up := &vswitchd.Port{UUID: port.UUID, ExternalIDs: ids}
		if err := t.add(c.ovs.Where(up).Update(up, &up.ExternalIDs)); err != nil {
			return err
		}
	}
	for _, iu := range port.Interfaces {
		iface, err := c.getInterface(ctx, iu)
		if err != nil {
			return err
		}
		if iface == nil || iface.Name != spec.Name {
			continue
		}
		up := &vswitchd.Interface{UUID: iface.UUID}
		var fields []any
		if iface.Type != spec.Type.ovsType() {
			up.Type = spec.Type.ovsType()
			fields = append(fields, &up.Type)
		}
		if !maps.Equal(iface.Options, spec.Options) {
			up.Options = spec.Options
			if up.Options == nil {
				up.Options = map[string]string{}
			}
			fields = append(fields, &up.Options)
		}
		want := int(spec.OFPortRequest)
		if (want == 0) != (iface.OfportRequest == nil) || (want != 0 && *iface.OfportRequest != want) {
			if want != 0 {
				up.OfportRequest = &want
			}
			fields = append(fields, &up.OfportRequest)
		}
		if ids, changed := mergeMap(iface.ExternalIDs, c.ownerIDs(spec.ExternalIDs)); changed {
			up.ExternalIDs = ids
			fields = append(fields, &up.ExternalIDs)
		}
		if len(fields) > 0 {
			c.logger(ctx).Info("Updating interface", "bridge", br.Name, "port", spec.Name, "fields", len(fields))
			if err := t.add(c.ovs.Where(up).Update(up, fields...)); err != nil {
				return err
			}
		}
	}
	return nil
}

// planDeletePortRows deletes a port row and its interfaces (the caller removes the bridge reference).
func (c *Client) planDeletePortRows(ctx context.Context, t *txn, portUUID string) error {
	p := &vswitchd.Port{UUID: portUUID}
	if err := c.ovs.Get(ctx, p); err != nil {
		if isNotFound(err) {
			return nil
		}
		return err
	}
	for _, iu := range p.Interfaces {
		i := &vswitchd.Interface{UUID: iu}
		if err := t.add(c.ovs.Where(i).Delete()); err != nil {
			return err
		}
	}
	return t.add(c.ovs.Where(p).Delete())
}

func (c *Client) planDeletePort(ctx context.Context, t *txn, br *vswitchd.Bridge, port *vswitchd.Port) error {
	c.logger(ctx).Info("Deleting port", "bridge", br.Name, "port", port.Name)
	if err := t.add(c.ovs.Where(br).Mutate(br, model.Mutation{
		Field: &br.Ports, Mutator: ovsdb.MutateOperationDelete, Value: []string{port.UUID},
	})); err != nil {
		return err
	}
	return c.planDeletePortRows(ctx, t, port.UUID)
}

// EnsurePort creates the port on the bridge or fixes it (type, options,
// ofport_request, external_ids); a port of that name on another bridge is moved.
func (c *Client) EnsurePort(ctx context.Context, bridge string, spec PortSpec) (bool, error) {
	return c.ensurePort(ctx, bridge, spec, false)
}

// EnsurePortApplied is EnsurePort followed by WaitApplied in one transaction: it returns once
// ovs-vswitchd has applied the port (and everything committed before), so that the interface's
// ofport or error is the one ovs-vswitchd gave it after this change.
func (c *Client) EnsurePortApplied(ctx context.Context, bridge string, spec PortSpec) (bool, error) {
	return c.ensurePort(ctx, bridge, spec, true)
}

func (c *Client) ensurePort(ctx context.Context, bridge string, spec PortSpec, applied bool) (bool, error) {
	if spec.Name == "" {
		return false, fmt.Errorf("ensuring port on bridge %q: empty name", bridge)
	}
	return c.applyPort(ctx, fmt.Sprintf("ensuring port %q on bridge %q", spec.Name, bridge), applied, func(ctx context.Context, t *txn) error {
		br, err := c.getBridge(ctx, bridge)
		if err != nil {
			return err
		}
		return c.planPort(ctx, t, br, spec)
	})
}

// DeletePort deletes the port from the bridge; an absent port is a no-op.
func (c *Client) DeletePort(ctx context.Context, bridge, name string) (bool, error) {
	return c.applyPort(ctx, fmt.Sprintf("deleting port %q from bridge %q", name, bridge), false, func(ctx context.Context, t *txn) error {
		br, err := c.getBridge(ctx, bridge)
		if isErrNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		port, err := c.getPort(ctx, name)
		if err != nil || port == nil || !slices.Contains(br.Ports, port.UUID) {
			return err
		}
		return c.planDeletePort(ctx, t, br, port)
	})
}

// ReconcilePorts ensures every desired port and deletes the ports of the
// bridge that carry the ownership mark but are not desired, in one
// transaction. The bridge's LOCAL port is always kept.
func (c *Client) ReconcilePorts(ctx context.Context, bridge string, desired []PortSpec) (bool, error) {
	want := map[string]bool{bridge: true}
	for _, d := range desired {
		want[d.Name] = true
	}
	return c.apply(ctx, fmt.Sprintf("reconciling ports of bridge %q", bridge), func(ctx context.Context, t *txn) error {
		br, err := c.getBridge(ctx, bridge)
		if err != nil {
			return err
		}
		for _, d := range desired {
			if err := c.planPort(ctx, t, br, d); err != nil {
				return fmt.Errorf("port %q: %w", d.Name, err)
			}
		}
		for _, pu := range br.Ports {
			p := &vswitchd.Port{UUID: pu}
			if err := c.ovs.Get(ctx, p); err != nil {
				if isNotFound(err) {
					continue
				}
				return err
			}
			if want[p.Name] || p.ExternalIDs[OwnerKey] != c.owner {
				continue
			}
			if err := c.planDeletePort(ctx, t, br, p); err != nil {
				return err
			}
		}
		return nil
	})
}

// OwnedPorts lists the ports of the bridge that carry the ownership mark.
func (c *Client) OwnedPorts(ctx context.Context, bridge string) ([]PortInfo, error) {
	br, err := c.getBridge(ctx, bridge)
	if err != nil {
		return nil, err
	}
	var out []PortInfo
	for _, pu := range br.Ports {
		p := &vswitchd.Port{UUID: pu}
		if err := c.ovs.Get(ctx, p); err != nil {
			if isNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("listing ports of bridge %q: %w", bridge, err)
		}
		if p.ExternalIDs[OwnerKey] != c.owner {
			continue
		}
		info := PortInfo{Name: p.Name}
		for _, iu := range p.Interfaces {
			i, err := c.getInterface(ctx, iu)
			if err != nil {
				return nil, err
			}
			if i != nil && i.Name == p.Name {
				info.Type = PortType(i.Type)
				if i.Type == "" {
					info.Type = PortTypeSystem
				}
				if i.Ofport != nil {
					info.OFPort = int32(*i.Ofport)
				}
			}
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b PortInfo) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out, nil
}

// WaitOFPort waits until OVS has assigned an OpenFlow port number to the
// interface and returns it; an interface OVS failed to create returns its error.
// It looks again whenever the monitor brings an Interface change, and every 10 ms
// in case a reconnect replaced the cache that notifies it.
func (c *Client) WaitOFPort(ctx context.Context, name string) (int32, error) {
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for {
		changed := c.InterfaceChanged() // before the look, so a change after it is not missed
		i := &vswitchd.Interface{Name: name}
		err := c.ovs.Get(ctx, i)
		switch {
		case err == nil && i.Ofport != nil && *i.Ofport > 0:
			return int32(*i.Ofport), nil
		case err == nil && i.Ofport != nil && *i.Ofport == -1 && i.Error != nil:
			return -1, fmt.Errorf("interface %q: %s", name, *i.Error)
		case err != nil && !isNotFound(err):
			return 0, fmt.Errorf("waiting for ofport of %q: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting for ofport of %q: %w", name, ctx.Err())
		case <-changed:
		case <-ticker.C:
		}
	}
}
