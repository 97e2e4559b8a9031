package ovsdb

import (
	"context"
	"fmt"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/winnet-io/winnet/internal/ovs/ovsdb/vswitchd"
)

// Port changes of concurrent callers share one transaction (group commit): every port change
// costs ovs-vswitchd a pass over its configuration (bridge_reconfigure), on the thread that also
// answers OpenFlow bundles, so the ports of Pods attached and detached at the same time are
// changed in a few transactions, not one each behind one another. A change that also waits for
// ovs-vswitchd to apply it (EnsurePortApplied) carries the increment of next_cfg in the same
// transaction, as ovs-vsctl does, instead of a second transaction and a second pass.

// portReq is one port change waiting for the transaction that carries it, and then its outcome.
type portReq struct {
	what string
	plan func(ctx context.Context, t *txn) error
	// applied asks for the increment of next_cfg with the change.
	applied bool

	// changed reports that the plan had operations; cfg is the next_cfg to wait for (applied
	// only); err is the outcome of planning and transacting.
	changed bool
	cfg     int
	err     error
}

// applyPort is apply for the port changes of concurrent callers (see above): it plans and
// transacts with every change queued meanwhile, then waits until the cache reflects this one and,
// when applied is set, until ovs-vswitchd reports it applied it.
func (c *Client) applyPort(ctx context.Context, what string, applied bool, plan func(ctx context.Context, t *txn) error) (bool, error) {
	req := &portReq{what: what, plan: plan, applied: applied}
	c.portQueue.Do(&c.portMu, req, func(batch []*portReq) { c.commitPorts(ctx, batch) })
	if req.err != nil {
		return req.changed, req.err
	}
	if req.changed {
		if err := c.converge(ctx, what, plan); err != nil {
			return true, err
		}
	}
	if applied {
		if err := c.waitCurCfg(ctx, req.cfg); err != nil {
			return req.changed, fmt.Errorf("%s: %w", what, err)
		}
	}
	return req.changed, nil
}

// commitPorts plans every queued change against the cache and transacts them together. If the
// transaction fails, each change is transacted on its own, so that only a bad one fails. The
// transaction is not bound to the context of the call that sends it, which carries other calls'
// changes too.
func (c *Client) commitPorts(ctx context.Context, batch []*portReq) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer cancel()
	// One txn numbers the named UUIDs of every plan, so that they are unique in the transaction.
	all := &txn{}
	type part struct {
		req      *portReq
		from, to int // the plan's operations in all.ops
	}
	var parts []part
	applied := false
	for _, r := range batch {
		from := len(all.ops)
		if err := r.plan(ctx, all); err != nil {
			all.ops = all.ops[:from]
			r.err = fmt.Errorf("%s: %w", r.what, err)
			continue
		}
		r.changed = len(all.ops) > from
		if r.changed || r.applied {
			parts = append(parts, part{req: r, from: from, to: len(all.ops)})
			applied = applied || r.applied
		}
	}
	if len(parts) == 0 {
		return
	}
	cfg, err := c.transactPorts(ctx, all.ops, applied)
	if err == nil {
		for _, p := range parts {
			p.req.cfg = cfg
		}
		return
	}
	if len(parts) == 1 {
		parts[0].req.err = fmt.Errorf("%s: %w", parts[0].req.what, err)
		return
	}
	c.log.V(1).Info("A transaction of several port changes failed; transacting each on its own", "changes", len(parts), "error", err.Error())
	for _, p := range parts {
		cfg, err := c.transactPorts(ctx, all.ops[p.from:p.to], p.req.applied)
		if err != nil {
			p.req.err = fmt.Errorf("%s: %w", p.req.what, err)
		}
		p.req.cfg = cfg
	}
}

// transactPorts transacts ops and, when applied is set, increments next_cfg in the same
// transaction and returns its new value.
func (c *Client) transactPorts(ctx context.Context, ops []ovsdb.Operation, applied bool) (int, error) {
	if !applied {
		return 0, c.transact(ctx, ops)
	}
	root, err := c.rootRow(ctx)
	if err != nil {
		return 0, err
	}
	bump, err := c.ovs.Where(root).Mutate(root, model.Mutation{Field: &root.NextCfg, Mutator: ovsdb.MutateOperationAdd, Value: 1})
	if err != nil {
		return 0, err
	}
	plan := ops
	ops = append(append(ops[:len(ops):len(ops)], bump...),
		ovsdb.Operation{Op: ovsdb.OperationSelect, Table: vswitchd.OpenvSwitchTable, Where: []ovsdb.Condition{}, Columns: []string{"next_cfg"}})
	res, err := c.ovs.Transact(ctx, ops...)
	if err == nil {
		_, err = ovsdb.CheckOperationResults(res, ops)
	}
	if err != nil {
		return 0, fmt.Errorf("transacting: %w", err)
	}
	c.countMutations(plan) // the increment of next_cfg changes no configuration
	return nextCfg(res[len(res)-1].Rows), nil
}

// nextCfg reads next_cfg from the rows of a select.
func nextCfg(rows []ovsdb.Row) int {
	if len(rows) != 1 {
		return 0
	}
	switch v := rows[0]["next_cfg"].(type) {
	case float64:
		return int(v)
	case int:
		return v
	}
	return 0
}

// converge waits until the cache reflects a transaction the plan made: a re-plan is empty. Our
// own update arrives through the monitor, usually just after the reply; waiting for it keeps the
// next plan idempotent.
func (c *Client) converge(ctx context.Context, what string, plan func(ctx context.Context, t *txn) error) error {
	deadline := time.Now().Add(convergeTimeout)
	for {
		changed := c.tableChanged(anyTable) // before the plan, so an update after it is not missed
		t := &txn{}
		err := plan(ctx, t)
		if err == nil && len(t.ops) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("cache still differs after transaction (%d operations pending)", len(t.ops))
			}
			return fmt.Errorf("%s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-changed:
		case <-time.After(5 * time.Millisecond): // in case a reconnect replaces the cache
		}
	}
}

// waitCurCfg waits until ovs-vswitchd reports configuration want (or a later one) in cur_cfg.
func (c *Client) waitCurCfg(ctx context.Context, want int) error {
	ticker := time.NewTicker(10 * time.Millisecond) // in case a reconnect replaces the cache
	defer ticker.Stop()
	for {
		changed := c.tableChanged(vswitchd.OpenvSwitchTable)
		root, err := c.rootRow(ctx)
		if err != nil {
			return fmt.Errorf("waiting for ovs-vswitchd: %w", err)
		}
		if root.CurCfg >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for ovs-vswitchd to apply configuration %d (it reports %d): %w", want, root.CurCfg, ctx.Err())
		case <-changed:
		case <-ticker.C:
		}
	}
}
