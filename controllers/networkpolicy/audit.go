package networkpolicy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/auditlog"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// The audit log of policy decisions (docs/operations.md, "Audit logs"). A Namespace or a
// ClusterNetworkPolicy annotated AuditLogAnnotation "true" has its rules' decision flows send the
// first packet of each new connection they decide to the agent (pipeline.AuditAction), which
// names the rule from the flow's cookie and the last full pass's index (nodenetwork.PolicyIndex)
// and hands a record to the node's audit log (internal/auditlog), which deduplicates, limits and
// writes it. Only new connections reach the rule tables, so an established connection is never
// logged again; a dropped connection is new at each retransmission (nothing is committed for it),
// each one a packet-in, folded into one line by the log's window when they fall inside it.

// auditValue reads an object's AuditLogAnnotation: on for "true"; off for "false" or none; off
// and not valid for any other value.
func auditValue(annotations map[string]string) (on, valid bool) {
	v, ok := annotations[networkv1alpha1.AuditLogAnnotation]
	switch {
	case !ok || v == networkv1alpha1.AuditLogOff:
		return false, true
	case v == networkv1alpha1.AuditLogOn:
		return true, true
	}
	return false, false
}

// auditAnnotationChanged tells whether the AuditLogAnnotation differs between two versions of an
// object.
func auditAnnotationChanged(old, now client.Object) bool {
	a, aok := old.GetAnnotations()[networkv1alpha1.AuditLogAnnotation]
	b, bok := now.GetAnnotations()[networkv1alpha1.AuditLogAnnotation]
	return a != b || aok != bok
}

// warnAuditValue emits one Warning Event per object and value of an AuditLogAnnotation that is
// neither "true" nor "false": the object is not audited, and the Event says what is accepted.
func (r *Reconciler) warnAuditValue(ctx context.Context, obj client.Object) {
	v := obj.GetAnnotations()[networkv1alpha1.AuditLogAnnotation]
	if r.auditWarned == nil {
		r.auditWarned = map[types.UID]string{}
	}
	if r.auditWarned[obj.GetUID()] == v {
		return
	}
	r.auditWarned[obj.GetUID()] = v
	ctrl.LoggerFrom(ctx).Info("Audit log annotation with a value that is neither true nor false: not audited", "object", obj.GetName(), "value", v)
	if r.Recorder != nil {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, networkv1alpha1.AuditLogValueReason, "Audit",
			"On node %s: annotation %s=%q is not audited: the value must be %q (log the decisions of its policies) or %q",
			r.NodeName, networkv1alpha1.AuditLogAnnotation, truncateValue(v), networkv1alpha1.AuditLogOn, networkv1alpha1.AuditLogOff)
	}
}

func truncateValue(v string) string {
	if len(v) > 64 {
		return v[:64] + "..."
	}
	return v
}

// Reasons of the Events on the node's WindowsNodeNetwork when the audit log of some owners (the
// namespaces and ClusterNetworkPolicies whose rules decide) is suspended, and when it resumes.
const (
	AuditLogSuspendedReason = "AuditLogSuspended"
	AuditLogResumedReason   = "AuditLogResumed"
)

// auditEventOwners is how many owners one Event names; the others are counted.
const auditEventOwners = 3

// auditing tells whether this pass audits (the node has an audit log and it is not suspended as a
// whole) and what is suspended. An owner's suspension (its decisions were dropped beyond its rate
// for a sustained period) takes the packet-ins out of its audited flows only, for its cooldown, so
// that its flood of new connections stops costing the switch an upcall and the agent a packet-in
// each while every other owner's decisions are logged as before; each change is logged, and an
// Event on the node's WindowsNodeNetwork names the owners.
func (r *Reconciler) auditing(ctx context.Context) (bool, auditlog.Suspensions) {
	if r.Audit == nil {
		return false, auditlog.Suspensions{}
	}
	s := r.Audit.Suspensions()
	r.reportSuspensions(ctx, r.auditSuspended, s)
	r.auditSuspended = s
	return s.All == nil, s
}

// reportSuspensions logs the owners suspended and resumed from before to now, and says so in at
// most one Event of each kind.
func (r *Reconciler) reportSuspensions(ctx context.Context, before, now auditlog.Suspensions) {
	log := ctrl.LoggerFrom(ctx)
	var suspended []auditlog.Suspension
	var resumed []auditlog.Owner
	for o, s := range now.Owners {
		if b, ok := before.Owners[o]; !ok || !b.At.Equal(s.At) {
			suspended = append(suspended, s)
		}
	}
	for o := range before.Owners {
		if _, ok := now.Owners[o]; !ok {
			resumed = append(resumed, o)
		}
	}
	allStarted := now.All != nil && (before.All == nil || !before.All.At.Equal(now.All.At))
	allEnded := now.All == nil && before.All != nil
	if len(suspended)+len(resumed) == 0 && !allStarted && !allEnded {
		return
	}
	slices.SortFunc(suspended, func(a, b auditlog.Suspension) int { return compareOwners(a.Owner, b.Owner) })
	slices.SortFunc(resumed, compareOwners)
	for _, s := range suspended {
		log.Info("Audit log suspended for an owner: its decisions were dropped beyond its rate", "owner", s.Owner.String(), "reason", s.Reason,
			"since", s.Since, "until", s.Until, "dropped", s.Dropped)
	}
	for _, o := range resumed {
		log.Info("Audit log resumed for an owner", "owner", o.String())
	}
	if allStarted {
		log.Info("Audit log suspended for every owner: it tracks as many as it can, all suspended", "until", now.All.Until)
	}
	if allEnded {
		log.Info("Audit log resumed for every owner")
	}
	wnn := &networkv1alpha1.WindowsNodeNetwork{}
	if r.Recorder == nil || r.Client.Get(ctx, client.ObjectKey{Name: r.NodeName}, wnn) != nil {
		return
	}
	if len(suspended) > 0 {
		var parts []string
		for _, s := range suspended[:min(len(suspended), auditEventOwners)] {
			why := fmt.Sprintf("%d decisions dropped beyond its rate since %s", s.Dropped, s.Since.UTC().Format(time.RFC3339))
			if s.Reason == auditlog.SuspendedCeiling {
				why = fmt.Sprintf("%d decisions of all owners dropped beyond the node's ceiling since %s, and it sent at least its share", s.Dropped, s.Since.UTC().Format(time.RFC3339))
			}
			parts = append(parts, fmt.Sprintf("%s until %s (%s)", truncateValue(s.Owner.String()), s.Until.UTC().Format(time.RFC3339), why))
		}
		if n := len(suspended) - auditEventOwners; n > 0 {
			parts = append(parts, fmt.Sprintf("and %d more", n))
		}
		r.Recorder.Eventf(wnn, nil, corev1.EventTypeWarning, AuditLogSuspendedReason, "Audit",
			"Audit log suspended for %s: their audited flows send nothing to the agent and their decisions are not logged meanwhile (a summary line follows); other namespaces and ClusterNetworkPolicies are logged as before",
			strings.Join(parts, "; "))
	}
	if allStarted {
		r.Recorder.Eventf(wnn, nil, corev1.EventTypeWarning, AuditLogSuspendedReason, "Audit",
			"Audit log suspended for every owner until %s: a decision came from a namespace or ClusterNetworkPolicy beyond the %d the log tracks, all suspended; no audited flow sends anything to the agent meanwhile",
			now.All.Until.UTC().Format(time.RFC3339), len(now.Owners))
	}
	if len(resumed) > 0 {
		var names []string
		for _, o := range resumed[:min(len(resumed), auditEventOwners)] {
			names = append(names, truncateValue(o.String()))
		}
		if n := len(resumed) - auditEventOwners; n > 0 {
			names = append(names, fmt.Sprintf("and %d more", n))
		}
		r.Recorder.Eventf(wnn, nil, corev1.EventTypeNormal, AuditLogResumedReason, "Audit",
			"Audit log resumed for %s: the cooldown is over, their audited flows send their decisions again", strings.Join(names, ", "))
	}
	if allEnded {
		r.Recorder.Eventf(wnn, nil, corev1.EventTypeNormal, AuditLogResumedReason, "Audit", "Audit log resumed for every owner: the audited flows send their decisions again")
	}
}

func compareOwners(a, b auditlog.Owner) int {
	if c := strings.Compare(a.Kind, b.Kind); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// auditIsolation is what a default drop's line says of the policies that isolate a Pod in one
// direction: their namespace, the first auditlog.MaxIsolatedBy of their names in order and how
// many others. It is computed once per full pass (newAuditIsolations), not per packet-in, and
// shared by the lines (never changed).
type auditIsolation struct {
	namespace string
	names     []string
	more      int
}

// auditIsolations are the isolations of a pass by Pod port, per direction.
type auditIsolations struct {
	ingress, egress map[uint32]auditIsolation
}

// newAuditIsolations computes the isolations of the index's Pod ports.
func newAuditIsolations(idx nodenetwork.PolicyIndex) *auditIsolations {
	of := func(in map[uint32][]types.NamespacedName) map[uint32]auditIsolation {
		out := make(map[uint32]auditIsolation, len(in))
		for port, by := range in {
			if len(by) == 0 {
				continue
			}
			names := make([]string, len(by))
			for i, n := range by {
				names[i] = n.Name
			}
			slices.Sort(names)
			n := min(len(names), auditlog.MaxIsolatedBy)
			out[port] = auditIsolation{namespace: by[0].Namespace, names: slices.Clip(names[:n]), more: len(names) - n}
		}
		return out
	}
	return &auditIsolations{ingress: of(idx.IngressIsolation), egress: of(idx.EgressIsolation)}
}

// handleAudit has the bridge's policy packet-ins go to the audit log, once per bridge.
func (r *Reconciler) handleAudit(b *openflow.Bridge) {
	if r.Audit == nil || r.auditBridge == b {
		return
	}
	r.auditBridge = b
	b.SetPacketInHandler(pipeline.CategoryPolicy, r.auditPacketIn)
}

// auditPacketIn names the decision of one audited flow's packet-in and queues it for the log. It
// runs on the OpenFlow connection's reader: it reads the headers and the index, and does not block.
func (r *Reconciler) auditPacketIn(p openflow.PacketIn) {
	rec, err := r.auditRecord(p, time.Now())
	if err != nil {
		r.Audit.Unnamed()
		return
	}
	r.Audit.Submit(rec)
}

// auditRecord is the record of a packet-in at time now: its 5-tuple and the rule its flow's cookie
// names.
func (r *Reconciler) auditRecord(p openflow.PacketIn, now time.Time) (auditlog.Record, error) {
	h, err := auditHeaders(p.Frame)
	if err != nil {
		return auditlog.Record{}, err
	}
	rec := auditlog.Record{Time: now, SrcIP: h.src.String(), DstIP: h.dst.String(), Protocol: protocolName(h.proto), SrcPort: h.srcPort, DstPort: h.dstPort}
	_, dir, _, drop := pipeline.AuditObject(p.Cookie)
	if drop {
		isolations := r.auditIsolations.Load()
		if isolations == nil {
			return rec, errUnnamed
		}
		port, isolation := p.Regs[pipeline.TargetOFPortField.Reg], isolations.ingress
		rec.Direction = "ingress"
		if dir == pipeline.PolicyEgress {
			port, isolation, rec.Direction = p.InPort, isolations.egress, "egress"
		}
		by, ok := isolation[port]
		if !ok {
			return rec, errUnnamed
		}
		rec.PolicyKind, rec.Namespace, rec.Rule, rec.Action = string(nodenetwork.KindNetworkPolicy), by.namespace, auditlog.DefaultDenyRule, auditlog.ActionDrop
		rec.IsolatedBy, rec.IsolatedByMore = by.names, by.more
		return rec, nil
	}
	n, ok := r.State.PolicyIndex().RuleOfCookie(p.Cookie)
	if !ok {
		return rec, errUnnamed
	}
	rec.PolicyKind, rec.Namespace, rec.Name, rec.Tier = string(n.Kind), n.Policy.Namespace, n.Policy.Name, n.Tier
	rec.Rule, rec.Direction, rec.Action = n.Rule(), n.Direction(), n.Action
	return rec, nil
}

var errUnnamed = errors.New("a policy packet-in whose rule the index does not name")

type headers struct {
	src, dst         netip.Addr
	proto            uint8
	srcPort, dstPort uint16
}

// auditHeaders reads the IPv4 addresses, protocol and TCP or UDP ports of a frame (no ports for a
// fragment after the first, or for other protocols). It reads the headers only.
func auditHeaders(frame []byte) (headers, error) {
	const eth = 14
	if len(frame) < eth+20 || binary.BigEndian.Uint16(frame[12:14]) != 0x0800 {
		return headers{}, errors.New("not an IPv4 frame")
	}
	ip := frame[eth:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[0]>>4 != 4 || ihl < 20 || len(ip) < ihl {
		return headers{}, errors.New("not an IPv4 frame")
	}
	h := headers{src: netip.AddrFrom4([4]byte(ip[12:16])), dst: netip.AddrFrom4([4]byte(ip[16:20])), proto: ip[9]}
	fragOffset := binary.BigEndian.Uint16(ip[6:8]) & 0x1fff
	if (h.proto == openflow.ProtoTCP || h.proto == openflow.ProtoUDP) && fragOffset == 0 && len(ip) >= ihl+4 {
		h.srcPort = binary.BigEndian.Uint16(ip[ihl : ihl+2])
		h.dstPort = binary.BigEndian.Uint16(ip[ihl+2 : ihl+4])
	}
	return h, nil
}

func protocolName(p uint8) string {
	switch p {
	case openflow.ProtoTCP:
		return "TCP"
	case openflow.ProtoUDP:
		return "UDP"
	case openflow.ProtoICMP:
		return "ICMP"
	}
	return strings.ToUpper(strconv.Itoa(int(p)))
}
