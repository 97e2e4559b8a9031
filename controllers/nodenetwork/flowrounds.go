package nodenetwork

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// FlowOwner names a reconciler that installs flows on the node network's bridge.
type FlowOwner string

// The owners of the bridge's flows. Each reports through State.FlowsSynced when it has installed its
// complete desired set on a bridge connection.
const (
	// NodeNetworkFlows is the base pipeline, installed by the node network reconciler.
	NodeNetworkFlows FlowOwner = "NodeNetwork"
	// RouteFlows are the remote routes' flows, installed by the full pass of the remote route
	// reconciler.
	RouteFlows FlowOwner = "RemoteSubnetRoutes"
	// PodFlows are the Pods' flows, installed by the start-up pass of the Pods (podendpoint).
	PodFlows FlowOwner = "Pods"
	// ServiceFlows are the Services' flows and groups, installed by the Service reconciler; it
	// is an owner only in agents that run it (see AddFlowOwner).
	ServiceFlows FlowOwner = "Services"
	// PolicyFlows are the NetworkPolicies' flows, installed by the NetworkPolicy reconciler; it is
	// an owner only in agents that run it.
	PolicyFlows FlowOwner = "NetworkPolicies"
)

// flowOwners must all report on a connection before its previous round is deleted.
var flowOwners = []FlowOwner{NodeNetworkFlows, RouteFlows, PodFlows}

// AddFlowOwner makes owner one of the flow owners that must report on a connection (FlowsSynced)
// before its previous round is deleted: a reconciler that installs flows of its own calls it when it
// is set up, before the manager starts.
func (s *State) AddFlowOwner(owner FlowOwner) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.extraOwners, owner) {
		s.extraOwners = append(s.extraOwners, owner)
	}
}

// owners returns the number of flow owners of the node.
func (s *State) owners() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(flowOwners) + len(s.extraOwners)
}

// previousRound tracks the removal of the previous round's flows for one bridge connection.
type previousRound struct {
	// mu is held while the round is deleted, so that it is deleted once.
	mu      sync.Mutex
	flows   *openflow.Bridge
	synced  map[FlowOwner]bool
	deleted bool
}

// FlowsSynced records that owner has installed its complete desired set of flows on the bridge
// connection flows.
//
// Every connection installs its flows in a new cookie round (see openflow.Connect); a flow it
// installs replaces the installed flow of the same match, whatever its round. What is left of the
// previous round after every owner has installed its flows — the flows of a route or a Pod deleted
// while the agent was down, of a match that changed — no owner wants. So the report that completes
// the set of owners on a connection deletes the flows of the connection's previous round, in one
// bundle: once per connection, and not at all if the bridge recorded no round before it. A report
// about a connection that is not the realised one is ignored; a new connection starts over. A failed
// deletion is logged and retried at the next report (the node network reconciler reports at every
// resync). The previous round is not the one a replay after an ovs-vswitchd restart leaves behind:
// the replay deletes that itself.
func (s *State) FlowsSynced(ctx context.Context, owner FlowOwner, flows *openflow.Bridge) {
	if rz, ok := s.Realized(); !ok || rz.Flows != flows {
		return
	}
	p := &s.previousRound
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.flows != flows {
		p.flows, p.synced, p.deleted = flows, map[FlowOwner]bool{}, false
	}
	p.synced[owner] = true
	if p.deleted || len(p.synced) < s.owners() {
		return
	}
	log := ctrl.LoggerFrom(ctx)
	round := flows.PreviousRound()
	if round == 0 {
		log.V(1).Info("Every flow owner has synced its flows; the bridge recorded no previous round", "round", flows.Round())
		p.deleted = true
		return
	}
	log.Info("Deleting the previous round's flows: every flow owner has synced its flows in the new round", "previousRound", round, "round", flows.Round())
	if err := flows.DeleteRound(ctx, round); err != nil {
		log.Error(err, "Deleting the previous round's flows failed; retrying at the next report", "previousRound", round)
		return
	}
	p.deleted = true
}

// FlowsInstalled tells whether the node's flows are whole: the node network is realised and every flow
// owner has installed its complete set on the current bridge connection (the previous round's leftovers
// are gone then). It is the agent's readiness (/readyz): a DaemonSet rollout moves to the next node only
// once the restarted agent has taken over its switch. The error says what is missing.
func (s *State) FlowsInstalled() error {
	rz, ok := s.Realized()
	if !ok {
		return errors.New("the node network is not realised")
	}
	p := &s.previousRound
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.flows != rz.Flows {
		return fmt.Errorf("no flow owner has installed its flows on the bridge connection yet (0 of %d)", s.owners())
	}
	if !p.deleted {
		return fmt.Errorf("%d of %d flow owners have installed their flows on the bridge connection", len(p.synced), s.owners())
	}
	return nil
}
