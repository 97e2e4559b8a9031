package service

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/winnet-io/winnet/internal/securefs"
)

// The numbers a reconciler gives out (group ids to Service ports, cookie objects to Services, conntrack
// zones to UDP ports) name what is in the switch, and the switch outlives the agent. An agent that started
// again and gave them out afresh, in the order its cache lists Services, would give the previous agent's
// group 1 (say the DNS Service's) to another Service: until its first pass lands, the previous agent's flows
// would send new DNS connections to that Service's endpoints. And it would have to flush every UDP zone, not
// knowing whose connections a zone holds. So the numbers are kept in IDsFile, written after each pass that
// changed them, and taken back when the agent starts: a restart installs the groups, cookies and zones the
// switch has, and flushes nothing. A file of a release that did not keep it (0.1.0), or one that cannot be
// read, is ignored: the numbers are given out afresh, as before.

// IDsFileName is the file in the agent's state directory that keeps the numbers.
const IDsFileName = "service-ids.json"

// idsFileVersion is the version of the file's format; a file of another version is ignored.
const idsFileVersion = 1

// maxIDsFileSize bounds what is read: 10,000 Services of 5 ports, at about 150 bytes a number, fit 8 times.
const maxIDsFileSize = 64 << 20

type idsFile struct {
	Version  int            `json:"version"`
	Groups   []groupEntry   `json:"groups"`
	Objects  []objectEntry  `json:"objects"`
	UDPZones []udpZoneEntry `json:"udpZones"`
}

type groupEntry struct {
	Port     portKey `json:"port"`
	External bool    `json:"external,omitempty"`
	Host     bool    `json:"host,omitempty"`
	ID       uint32  `json:"id"`
}

type objectEntry struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	ID        uint32 `json:"id"`
}

type udpZoneEntry struct {
	Port portKey `json:"port"`
	ID   uint32  `json:"id"`
	// Endpoints are those the port's flows balanced over: the first pass flushes the zone when one of
	// them went while no agent ran (udpZones.carriedGone).
	Endpoints []netip.AddrPort `json:"endpoints,omitempty"`
}

// loadIDs takes the numbers back from IDsFile, once, before the first pass gives any out. Call with mu held.
func (r *Reconciler) loadIDs(ctx context.Context) {
	if r.idsLoaded || r.IDsFile == "" {
		return
	}
	r.idsLoaded = true
	log := ctrl.LoggerFrom(ctx)
	f, err := readIDsFile(r.IDsFile)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		log.Error(err, "Ignoring the Service numbers of the previous agent: they are given out afresh (UDP zones flushed)", "file", r.IDsFile)
		return
	}
	groups := make(map[groupKey]uint32, len(f.Groups))
	for _, g := range f.Groups {
		groups[groupKey{port: g.Port, external: g.External, host: g.Host}] = g.ID
	}
	objects := make(map[types.NamespacedName]uint32, len(f.Objects))
	for _, o := range f.Objects {
		objects[types.NamespacedName{Namespace: o.Namespace, Name: o.Name}] = o.ID
	}
	zones := make(map[portKey]uint32, len(f.UDPZones))
	r.udp.carried = make(map[portKey][]netip.AddrPort, len(f.UDPZones))
	for _, z := range f.UDPZones {
		zones[z.Port] = z.ID
		r.udp.carried[z.Port] = z.Endpoints
	}
	r.groups.seed(groups)
	r.objects.seed(objects)
	r.udp.ids.seed(zones)
	log.Info("Took back the Service numbers of the previous agent", "groups", len(groups), "objects", len(objects), "udpZones", len(zones))
}

// readIDsFile reads and checks the file: every number once per kind, from 1, UDP zones within the budget.
func readIDsFile(path string) (*idsFile, error) {
	fh, _, err := securefs.OpenNoFollow(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxIDsFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxIDsFileSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxIDsFileSize)
	}
	f := &idsFile{}
	if err := json.Unmarshal(b, f); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if f.Version != idsFileVersion {
		return nil, fmt.Errorf("%s is of version %d, not %d", path, f.Version, idsFileVersion)
	}
	check := func(kind string, ids []uint32, limit uint32) error {
		seen := make(map[uint32]bool, len(ids))
		for _, id := range ids {
			if id == 0 || id > limit || seen[id] {
				return fmt.Errorf("%s: %s number %d is 0, above %d or given twice", path, kind, id, limit)
			}
			seen[id] = true
		}
		return nil
	}
	var groups, objects, zones []uint32
	for _, g := range f.Groups {
		groups = append(groups, g.ID)
	}
	for _, o := range f.Objects {
		objects = append(objects, o.ID)
	}
	for _, z := range f.UDPZones {
		zones = append(zones, z.ID)
	}
	if err := errors.Join(check("group", groups, 1<<31), check("cookie object", objects, 1<<31),
		check("UDP zone", zones, uint32(udpZoneBudget))); err != nil {
		return nil, err
	}
	return f, nil
}

// saveIDs writes the numbers to IDsFile when a pass changed them. A failure is logged and the write tried
// again after the next pass: the numbers in the switch are right meanwhile, only a restart would give them
// out afresh. Call with mu held.
func (r *Reconciler) saveIDs(ctx context.Context) {
	if r.IDsFile == "" || !(r.groups.dirty || r.objects.dirty || r.udp.ids.dirty) {
		return
	}
	f := idsFile{Version: idsFileVersion}
	for k, id := range r.groups.byKey {
		f.Groups = append(f.Groups, groupEntry{Port: k.port, External: k.external, Host: k.host, ID: id})
	}
	for k, id := range r.objects.byKey {
		f.Objects = append(f.Objects, objectEntry{Namespace: k.Namespace, Name: k.Name, ID: id})
	}
	for k, id := range r.udp.ids.byKey {
		e := udpZoneEntry{Port: k, ID: id}
		if rs := r.realised[types.NamespacedName{Namespace: k.Namespace, Name: k.Name}]; rs != nil {
			e.Endpoints = rs.udp[k].endpoints
		}
		f.UDPZones = append(f.UDPZones, e)
	}
	// Sorted by number: the file of the same numbers is the same bytes.
	slices.SortFunc(f.Groups, func(a, b groupEntry) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(f.Objects, func(a, b objectEntry) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(f.UDPZones, func(a, b udpZoneEntry) int { return cmp.Compare(a.ID, b.ID) })
	b, err := json.Marshal(f)
	if err == nil {
		err = securefs.WriteFile(r.IDsFile, b, securefs.Private)
	}
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Writing the Service numbers; tried again after the next pass", "file", r.IDsFile)
		return
	}
	r.groups.dirty, r.objects.dirty, r.udp.ids.dirty = false, false, false
}
