package ovsdb

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/go-logr/logr"
	"github.com/ovn-kubernetes/libovsdb/cache"
	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/winnet-io/winnet/internal/groupcommit"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb/vswitchd"
)

const (
	// OwnerKey is the external_ids key that marks bridges, ports and interfaces winnet owns.
	OwnerKey = "winnet-owner"
	// DefaultOwner is the value of OwnerKey unless Options.Owner says otherwise.
	DefaultOwner = "winnet"
	// FlowRestoreWaitKey is the Open_vSwitch other_config key that makes
	// ovs-vswitchd keep its datapath flows until the controller has replayed.
	FlowRestoreWaitKey = "flow-restore-wait"

	defaultTimeout = 10 * time.Second
	// convergeTimeout bounds how long we wait for the monitor to reflect our own transaction.
	convergeTimeout = 5 * time.Second
)

// ErrNotFound is returned when a bridge or port that must exist does not.
var ErrNotFound = errors.New("not found")

// Interface is the contract of the OVSDB layer. Ensure creates or fixes and
// reports whether it changed anything; Delete of something absent is a no-op;
// ReconcilePorts removes owned ports that are not desired.
type Interface interface {
	EnsureBridge(ctx context.Context, spec BridgeSpec) (bool, error)
	DeleteBridge(ctx context.Context, name string) (bool, error)
	EnsurePort(ctx context.Context, bridge string, spec PortSpec) (bool, error)
	EnsurePortApplied(ctx context.Context, bridge string, spec PortSpec) (bool, error)
	DeletePort(ctx context.Context, bridge, name string) (bool, error)
	ReconcilePorts(ctx context.Context, bridge string, desired []PortSpec) (bool, error)
	OwnedPorts(ctx context.Context, bridge string) ([]PortInfo, error)
	WaitOFPort(ctx context.Context, name string) (int32, error)
	WaitApplied(ctx context.Context) error
	BridgeExternalIDs(ctx context.Context, bridge string) (map[string]string, error)
	SetBridgeExternalIDs(ctx context.Context, bridge string, ids map[string]string) (bool, error)
	SetFlowRestoreWait(ctx context.Context, enabled bool) (bool, error)
	MutatingOperations() uint64
	Close()
}

var _ Interface = (*Client)(nil)

// Options configures a Client.
type Options struct {
	// Address is the ovsdb-server unix socket path (Linux) or named pipe
	// (Windows). Empty means DefaultAddress.
	Address string
	// SocketDir, on Windows, is the protected directory (internal/securefs, the agent's state
	// directory) where the client's private socket bridging libovsdb to the named pipe is made;
	// empty means DefaultSocketDir. Unused on Linux.
	SocketDir string
	// Owner is the value written under OwnerKey; empty means DefaultOwner.
	Owner string
	// Timeout bounds connecting, monitoring and each reconnect attempt; default 10s.
	Timeout time.Duration
	// Logger overrides the logger taken from the context passed to New.
	Logger *logr.Logger
}

// Client is a libovsdb client with one monitor on Open_vSwitch, Bridge, Port and Interface.
type Client struct {
	ovs     client.Client
	owner   string
	log     logr.Logger
	closeFn func()

	mutations atomic.Uint64
	// transactions counts the transactions sent.
	transactions atomic.Uint64

	// changedMu guards changed: per table (and for any table), a channel closed (and replaced)
	// whenever the monitor brings a row of the table added, changed or deleted, so that WaitOFPort
	// wakes when OVS attaches a port, WaitApplied when ovs-vswitchd reports a configuration and a
	// transaction when the monitor brings its own update, instead of at their next poll.
	changedMu sync.Mutex
	changed   map[string]chan struct{}

	// timeout bounds a transaction that carries several callers' changes (Options.Timeout).
	timeout time.Duration
	// portMu serialises the transactions of port changes; portQueue holds the changes waiting
	// for the next one (portcommit.go).
	portMu    sync.Mutex
	portQueue groupcommit.Queue[*portReq]

	// watchersMu guards watchers (see WatchRows).
	watchersMu sync.Mutex
	watchers   map[*rowWatcher]struct{}
}

// rowWatcher is one WatchRows subscription.
type rowWatcher struct {
	names func() []string
	ch    chan struct{}
}

// WatchRows reports, until ctx ends, changes to the bridges, ports and interfaces named by names
// (asked again at every change, so the set may change): the channel receives a value when such
// a row is deleted or updated by anyone, winnet included (several changes may give one value).
// Rows added are left out. It costs no request: the client's monitor already brings every change
// of these tables.
func (c *Client) WatchRows(ctx context.Context, names func() []string) <-chan struct{} {
	w := &rowWatcher{names: names, ch: make(chan struct{}, 1)}
	c.watchersMu.Lock()
	c.watchers[w] = struct{}{}
	c.watchersMu.Unlock()
	context.AfterFunc(ctx, func() {
		c.watchersMu.Lock()
		delete(c.watchers, w)
		c.watchersMu.Unlock()
	})
	return w.ch
}

// rowChanged tells the watchers of the row's name that it was updated or deleted.
func (c *Client) rowChanged(m model.Model) {
	var name string
	switch row := m.(type) {
	case *vswitchd.Bridge:
		name = row.Name
	case *vswitchd.Port:
		name = row.Name
	case *vswitchd.Interface:
		name = row.Name
	default:
		return
	}
	c.watchersMu.Lock()
	defer c.watchersMu.Unlock()
	for w := range c.watchers {
		if slices.Contains(w.names(), name) {
			select {
			case w.ch <- struct{}{}:
			default: // a value is pending
			}
		}
	}
}

// onlyPortsChanged reports a bridge update that only added or removed ports. WatchRows leaves it
// out: every Pod's port changes its bridge's row, and a watched port that goes is reported by its
// own row's deletion.
func onlyPortsChanged(old, m model.Model) bool {
	before, ok := old.(*vswitchd.Bridge)
	after, ok2 := m.(*vswitchd.Bridge)
	if !ok || !ok2 {
		return false
	}
	b := *before
	b.Ports = after.Ports
	return reflect.DeepEqual(&b, after)
}

// tableChanged returns a channel that is closed at the next row of the table the monitor adds or
// changes.
func (c *Client) tableChanged(table string) <-chan struct{} {
	c.changedMu.Lock()
	defer c.changedMu.Unlock()
	ch := c.changed[table]
	if ch == nil {
		ch = make(chan struct{})
		c.changed[table] = ch
	}
	return ch
}

// InterfaceChanged returns a channel that is closed at the next Interface row the monitor adds,
// changes or deletes: a caller waiting for an interface's state looks again then, not in a loop.
func (c *Client) InterfaceChanged() <-chan struct{} { return c.tableChanged(vswitchd.InterfaceTable) }

// anyTable names, for tableChanged, a change to any table.
const anyTable = ""

// notifyChanged wakes every waiter of tableChanged(table) and of tableChanged(anyTable); it runs on
// libovsdb's event goroutine after the cache holds the change.
func (c *Client) notifyChanged(table string) {
	c.changedMu.Lock()
	defer c.changedMu.Unlock()
	for _, t := range []string{table, anyTable} {
		if ch := c.changed[t]; ch != nil {
			close(ch)
			delete(c.changed, t)
		}
	}
}

// New connects to ovsdb-server, starts the monitor and waits for the initial dump.
func New(ctx context.Context, opts Options) (*Client, error) {
	log := logr.FromContextOrDiscard(ctx)
	if opts.Logger != nil {
		log = *opts.Logger
	}
	log = log.WithName("ovsdb")
	if opts.Address == "" {
		opts.Address = DefaultAddress
	}
	if opts.Owner == "" {
		opts.Owner = DefaultOwner
	}
	if opts.Timeout == 0 {
		opts.Timeout = defaultTimeout
	}
	dbModel, err := model.NewClientDBModel(vswitchd.OpenvSwitchTable, map[string]model.Model{
		vswitchd.OpenvSwitchTable: &vswitchd.OpenvSwitch{},
		vswitchd.BridgeTable:      &vswitchd.Bridge{},
		vswitchd.PortTable:        &vswitchd.Port{},
		vswitchd.InterfaceTable:   &vswitchd.Interface{},
		vswitchd.FlowTableTable:   &vswitchd.FlowTable{},
	})
	if err != nil {
		return nil, fmt.Errorf("building OVSDB client model: %w", err)
	}
	endpoint, closeFn, err := dialEndpoint(ctx, log, opts.Address, opts.SocketDir)
	if err != nil {
		return nil, err
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 50 * time.Millisecond
	bo.MaxInterval = 2 * time.Second
	bo.MaxElapsedTime = 0 // never give up: libovsdb panics when the backoff stops
	libLog := log.V(2)
	ovs, err := client.NewOVSDBClient(dbModel,
		client.WithEndpoint(endpoint),
		client.WithReconnect(opts.Timeout, bo),
		client.WithLogger(&libLog))
	if err != nil {
		closeFn()
		return nil, fmt.Errorf("creating OVSDB client for %q: %w", opts.Address, err)
	}
	c := &Client{ovs: ovs, owner: opts.Owner, log: log, closeFn: closeFn, changed: map[string]chan struct{}{}, timeout: opts.Timeout,
		watchers: map[*rowWatcher]struct{}{}}

	log.V(1).Info("Connecting to OVSDB", "address", opts.Address)
	cctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	if err := ovs.Connect(cctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("connecting to OVSDB at %q: %w", opts.Address, err)
	}
	ovs.Cache().AddEventHandler(&cache.EventHandlerFuncs{
		AddFunc: func(table string, _ model.Model) { c.notifyChanged(table) },
		UpdateFunc: func(table string, old, m model.Model) {
			c.notifyChanged(table)
			if !onlyPortsChanged(old, m) {
				c.rowChanged(m)
			}
		},
		DeleteFunc: func(table string, m model.Model) {
			c.notifyChanged(table)
			c.rowChanged(m)
		},
	})
	ovsRow, br, port, iface, ft := &vswitchd.OpenvSwitch{}, &vswitchd.Bridge{}, &vswitchd.Port{}, &vswitchd.Interface{}, &vswitchd.FlowTable{}
	mon := ovs.NewMonitor(
		client.WithTable(ovsRow, &ovsRow.UUID, &ovsRow.Bridges, &ovsRow.OtherConfig, &ovsRow.ExternalIDs, &ovsRow.OVSVersion,
			&ovsRow.NextCfg, &ovsRow.CurCfg),
		client.WithTable(br, &br.UUID, &br.Name, &br.Ports, &br.DatapathType, &br.Protocols, &br.FailMode,
			&br.OtherConfig, &br.ExternalIDs, &br.FlowTables),
		client.WithTable(ft, &ft.UUID, &ft.FlowLimit),
		client.WithTable(port, &port.UUID, &port.Name, &port.Interfaces, &port.ExternalIDs),
		client.WithTable(iface, &iface.UUID, &iface.Name, &iface.Type, &iface.Options, &iface.OfportRequest,
			&iface.Ofport, &iface.Error, &iface.ExternalIDs, &iface.MTURequest),
	)
	if _, err := ovs.Monitor(cctx, mon); err != nil {
		c.Close()
		return nil, fmt.Errorf("monitoring OVSDB at %q: %w", opts.Address, err)
	}
	return c, nil
}

// Close disconnects from ovsdb-server.
func (c *Client) Close() {
	if c.ovs != nil {
		c.ovs.Close()
	}
	if c.closeFn != nil {
		c.closeFn()
	}
}

// Connected reports whether the client currently has a connection.
func (c *Client) Connected() bool { return c.ovs.Connected() }

// MutatingOperations counts the insert, update, mutate and delete operations
// this client has sent. Two identical Ensure calls in a row leave it unchanged
// the second time.
func (c *Client) MutatingOperations() uint64 { return c.mutations.Load() }

// txn accumulates the operations of one transaction.
type txn struct {
	ops []ovsdb.Operation
	n   int
}

func (t *txn) add(ops []ovsdb.Operation, err error) error {
	if err != nil {
		return err
	}
	t.ops = append(t.ops, ops...)
	return nil
}

func (t *txn) named(prefix string) string {
	t.n++
	return fmt.Sprintf("%s_%d", prefix, t.n)
}

// apply plans from the cache, transacts if the plan has operations, then waits
// until the cache reflects the result (a re-plan is empty). It reports whether
// it changed anything.
func (c *Client) apply(ctx context.Context, what string, plan func(ctx context.Context, t *txn) error) (bool, error) {
	t := &txn{}
	if err := plan(ctx, t); err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	if len(t.ops) == 0 {
		return false, nil
	}
	if err := c.transact(ctx, t.ops); err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return true, c.converge(ctx, what, plan)
}

func (c *Client) transact(ctx context.Context, ops []ovsdb.Operation) error {
	res, err := c.ovs.Transact(ctx, ops...)
	if err != nil {
		return fmt.Errorf("transacting: %w", err)
	}
	if _, err := ovsdb.CheckOperationResults(res, ops); err != nil {
		return fmt.Errorf("transaction failed: %w", err)
	}
	c.countMutations(ops)
	return nil
}

// countMutations counts the insert, update, mutate and delete operations of a transaction sent.
func (c *Client) countMutations(ops []ovsdb.Operation) {
	c.transactions.Add(1)
	var n uint64
	for _, op := range ops {
		if op.Op != ovsdb.OperationWait && op.Op != ovsdb.OperationSelect {
			n++
		}
	}
	c.mutations.Add(n)
}

// rootRow returns the single Open_vSwitch row.
func (c *Client) rootRow(ctx context.Context) (*vswitchd.OpenvSwitch, error) {
	var rows []vswitchd.OpenvSwitch
	if err := c.ovs.List(ctx, &rows); err != nil {
		return nil, fmt.Errorf("listing Open_vSwitch: %w", err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("Open_vSwitch row: %w (database not initialised?)", ErrNotFound)
	}
	return &rows[0], nil
}

// WaitApplied returns once ovs-vswitchd has applied every change committed to the database before
// the call, as ovs-vsctl waits: it increments next_cfg and waits for ovs-vswitchd to report that
// configuration in cur_cfg. After DeletePort and WaitApplied, ovs-vswitchd has closed the port's
// interface: it cannot mistake an interface of the same name created afterwards for the old one
// (the userspace datapath would turn the new one down when it closes the old).
func (c *Client) WaitApplied(ctx context.Context) error {
	_, err := c.applyPort(ctx, "waiting for ovs-vswitchd", true, func(context.Context, *txn) error { return nil })
	return err
}

// SetFlowRestoreWait sets or clears other_config:flow-restore-wait.
func (c *Client) SetFlowRestoreWait(ctx context.Context, enabled bool) (bool, error) {
	return c.apply(ctx, fmt.Sprintf("setting %s=%t", FlowRestoreWaitKey, enabled), func(ctx context.Context, t *txn) error {
		root, err := c.rootRow(ctx)
		if err != nil {
			return err
		}
		_, present := root.OtherConfig[FlowRestoreWaitKey]
		if enabled == present && (!enabled || root.OtherConfig[FlowRestoreWaitKey] == "true") {
			return nil
		}
		oc := copyMap(root.OtherConfig)
		if enabled {
			oc[FlowRestoreWaitKey] = "true"
		} else {
			delete(oc, FlowRestoreWaitKey)
		}
		updated := &vswitchd.OpenvSwitch{UUID: root.UUID, OtherConfig: oc}
		return t.add(c.ovs.Where(updated).Update(updated, &updated.OtherConfig))
	})
}

// FlowRestoreWait reports whether other_config:flow-restore-wait is set.
func (c *Client) FlowRestoreWait(ctx context.Context) (bool, error) {
	root, err := c.rootRow(ctx)
	if err != nil {
		return false, err
	}
	return root.OtherConfig[FlowRestoreWaitKey] == "true", nil
}

// OVSVersion returns Open_vSwitch's ovs_version, which ovs-vswitchd writes as it starts (empty
// while no ovs-vswitchd has run on the database).
func (c *Client) OVSVersion(ctx context.Context) (string, error) {
	root, err := c.rootRow(ctx)
	if err != nil {
		return "", err
	}
	if root.OVSVersion == nil {
		return "", nil
	}
	return *root.OVSVersion, nil
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m)+2)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// mergeMap returns base with want's keys set, and whether that changed base.
func mergeMap(base, want map[string]string) (map[string]string, bool) {
	changed := false
	for k, v := range want {
		if cur, ok := base[k]; !ok || cur != v {
			changed = true
			break
		}
	}
	if !changed {
		return base, false
	}
	out := copyMap(base)
	for k, v := range want {
		out[k] = v
	}
	return out, true
}

func isNotFound(err error) bool {
	return errors.Is(err, client.ErrNotFound)
}
