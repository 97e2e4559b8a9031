package agent

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
	"github.com/winnet-io/winnet/internal/preflight"
	"github.com/winnet-io/winnet/internal/securefs"
)

// BundleOptions configure SupportBundle.
type BundleOptions struct {
	// NodeName names the node whose winnet objects the bundle holds.
	NodeName string
	// Bridge is the OVS bridge whose flows and groups the bundle holds (default br-int).
	Bridge string
	// HNSNetwork is winnet's HNS network (default DefaultHNSNetwork).
	HNSNetwork string
	// Logs are the agent's log files; the bundle holds the last LogBytes of each (default 8 MiB).
	Logs     []string
	LogBytes int64
	// Client reads the node's winnet objects; nil leaves them out (no API server).
	Client client.Client
	// Now stamps the bundle (default time.Now).
	Now func() time.Time
	// ServerTime asks the API server its time, for the preflight's clock check (nil: not checked).
	ServerTime func(ctx context.Context) (preflight.ClockInfo, error)
}

// bundleMaxStateEntries bounds the state directory's listing.
const bundleMaxStateEntries = 20000

// SupportBundle writes a gzipped tar of what a maintainer asks for first about this node to w: the
// bridge's flows and groups (a read-only OpenFlow connection of its own: the running agent's flows
// are left alone), OVSDB's bridges, ports and interfaces, HNS's network and endpoints (the
// simulator's state on Linux), the host's links, addresses and routes, the state directory's
// listing (names, sizes, modes: no contents), the preflight's report (preflight.txt), the tail of the agent's logs and the node's
// WindowsNodeNetwork, PodEndpoints and the RemoteSubnetRoutes, with their status. Every member
// goes through Redact, and the OVSDB rows' maps through redactMaps first. Files (the logs) are
// opened without following links (securefs.OpenNoFollow). A source that cannot be read is named
// with the reason in errors.txt and the rest is still collected; it returns the names of the
// members it wrote.
func SupportBundle(ctx context.Context, host HostOptions, opts BundleOptions, w io.Writer) ([]string, error) {
	host = host.withDefaults()
	if opts.Bridge == "" {
		opts.Bridge = networkv1alpha1.DefaultBridgeName
	}
	if opts.HNSNetwork == "" {
		opts.HNSNetwork = DefaultHNSNetwork
	}
	if opts.LogBytes <= 0 {
		opts.LogBytes = 8 << 20
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	b := &bundle{gz: gzip.NewWriter(w), now: opts.Now()}
	b.tw = tar.NewWriter(b.gz)

	b.add("README.txt", []byte(fmt.Sprintf("winnet support bundle of node %s, %s\n"+
		"Every member is redacted (tokens, keys, certificates, credentials). errors.txt names what could not be collected.\n",
		opts.NodeName, b.now.UTC().Format(time.RFC3339))))

	b.collect("ovs/openflow.txt", func() ([]byte, error) {
		address := openflow.DefaultAddress(opts.Bridge)
		if host.OVSRunDir != "" {
			address = openFlowAddress(host.OVSRunDir, opts.Bridge)
		}
		d, err := openflow.DumpSwitch(ctx, address)
		var out bytes.Buffer
		fmt.Fprintf(&out, "# bridge %s (%s): %d flows, %d groups\n\n## groups\n", opts.Bridge, address, len(d.Flows), len(d.Groups))
		for _, g := range d.Groups {
			out.WriteString(g + "\n")
		}
		out.WriteString("\n## flows\n")
		for _, f := range d.Flows {
			out.WriteString(f + "\n")
		}
		return out.Bytes(), err
	})
	b.collect("ovs/ovsdb.json", func() ([]byte, error) {
		db, err := ovsdb.New(ctx, ovsdb.Options{Address: host.OVSDBAddress, SocketDir: filepath.Join(host.StateDir, "run"), Timeout: 10 * time.Second})
		if err != nil {
			return nil, err
		}
		defer db.Close()
		s, err := db.Snapshot(ctx)
		if err != nil {
			return nil, err
		}
		return ovsdbJSON(s)
	})
	b.collect("hns/"+hnsMemberName, func() ([]byte, error) { return hnsSnapshot(ctx, host, opts.HNSNetwork) })
	b.collect("host/network.json", func() ([]byte, error) { return hostNetworkSnapshot(ctx, host) })
	b.collect("state/listing.txt", func() ([]byte, error) { return stateListing(host.StateDir) })
	b.collect("preflight.txt", func() ([]byte, error) {
		popts := PreflightOptions(opts.NodeName, host)
		popts.HNSNetwork, popts.Bridge, popts.ServerTime, popts.Now = opts.HNSNetwork, opts.Bridge, opts.ServerTime, opts.Now
		if opts.Client != nil {
			popts.Reader = opts.Client
		}
		var out bytes.Buffer
		err := preflight.Run(ctx, preflight.Checks(), preflight.Gather(ctx, popts)).WriteText(&out)
		return out.Bytes(), err
	})
	for i, path := range opts.Logs {
		b.collect(fmt.Sprintf("logs/%d-%s", i, filepath.Base(path)), func() ([]byte, error) { return tail(path, opts.LogBytes) })
	}
	if opts.Client != nil {
		b.collect("objects/windowsnodenetwork.json", func() ([]byte, error) {
			wnn := &networkv1alpha1.WindowsNodeNetwork{}
			if err := opts.Client.Get(ctx, client.ObjectKey{Name: opts.NodeName}, wnn); err != nil {
				return nil, err
			}
			return objectJSON(wnn)
		})
		b.collect("objects/podendpoints.json", func() ([]byte, error) {
			list := &networkv1alpha1.PodEndpointList{}
			if err := opts.Client.List(ctx, list); err != nil {
				return nil, err
			}
			var mine []client.Object
			for i := range list.Items {
				if list.Items[i].Spec.NodeName == opts.NodeName {
					mine = append(mine, &list.Items[i])
				}
			}
			return objectJSON(mine...)
		})
		b.collect("objects/remotesubnetroutes.json", func() ([]byte, error) {
			list := &networkv1alpha1.RemoteSubnetRouteList{}
			if err := opts.Client.List(ctx, list); err != nil {
				return nil, err
			}
			objs := make([]client.Object, 0, len(list.Items))
			for i := range list.Items {
				objs = append(objs, &list.Items[i])
			}
			return objectJSON(objs...)
		})
	} else {
		b.errs = append(b.errs, "objects: no API server configured (--kubeconfig): the node's winnet objects are not in the bundle")
	}
	if len(b.errs) > 0 {
		b.add("errors.txt", []byte(strings.Join(b.errs, "\n")+"\n"))
	}
	if b.err != nil {
		return b.names, b.err
	}
	if err := b.tw.Close(); err != nil {
		return b.names, fmt.Errorf("writing the bundle: %w", err)
	}
	if err := b.gz.Close(); err != nil {
		return b.names, fmt.Errorf("writing the bundle: %w", err)
	}
	return b.names, nil
}

type bundle struct {
	gz    *gzip.Writer
	tw    *tar.Writer
	now   time.Time
	names []string
	errs  []string
	err   error // writing failed: nothing more is written
}

// collect adds the member name from read; what read returned with its error is kept, the error
// goes to errors.txt.
func (b *bundle) collect(name string, read func() ([]byte, error)) {
	data, err := read()
	if err != nil {
		b.errs = append(b.errs, fmt.Sprintf("%s: %v", name, err))
	}
	if len(data) > 0 {
		b.add(name, data)
	}
}

func (b *bundle) add(name string, data []byte) {
	if b.err != nil {
		return
	}
	data = Redact(data)
	hdr := &tar.Header{Name: name, Mode: 0o600, Size: int64(len(data)), ModTime: b.now, Typeflag: tar.TypeReg}
	if err := b.tw.WriteHeader(hdr); err != nil {
		b.err = fmt.Errorf("writing %s into the bundle: %w", name, err)
		return
	}
	if _, err := b.tw.Write(data); err != nil {
		b.err = fmt.Errorf("writing %s into the bundle: %w", name, err)
		return
	}
	b.names = append(b.names, name)
}

// stateListing lists the state directory: each entry's mode, size and path, no contents, links
// not followed.
func stateListing(dir string) ([]byte, error) {
	var out bytes.Buffer
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			fmt.Fprintf(&out, "! %s: %v\n", p, err)
			return nil
		}
		if n++; n > bundleMaxStateEntries {
			return fmt.Errorf("more than %d entries: listing cut", bundleMaxStateEntries)
		}
		fi, err := d.Info()
		if err != nil {
			fmt.Fprintf(&out, "! %s: %v\n", p, err)
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&out, "%s %10d %s %s\n", fi.Mode(), fi.Size(), fi.ModTime().UTC().Format(time.RFC3339), rel)
		return nil
	})
	return out.Bytes(), err
}

// tail returns the last max bytes of the regular file at path, opened without following a link at
// path and checked once open (securefs.OpenNoFollow): a link, a reparse point, a directory or a
// device is refused, also when it is swapped in between.
func tail(path string, max int64) ([]byte, error) {
	f, fi, err := securefs.OpenNoFollow(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > max {
		if _, err := f.Seek(fi.Size()-max, io.SeekStart); err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, max))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return b, nil
}

// objectJSON renders objects with their status, without managedFields.
func objectJSON(objs ...client.Object) ([]byte, error) {
	for _, o := range objs {
		o.SetManagedFields(nil)
	}
	return json.MarshalIndent(objs, "", "  ")
}

// hostNetworkSnapshot lists the host's links with their addresses, and its routes.
func hostNetworkSnapshot(ctx context.Context, host HostOptions) ([]byte, error) {
	h, err := hostnet.New(hostnet.Options{NetNSPath: host.NetNSPath})
	if err != nil {
		return nil, fmt.Errorf("opening the host network stack: %w", err)
	}
	type linkInfo struct {
		hostnet.Link
		Addresses []string `json:"addresses"`
	}
	var out struct {
		Links  []linkInfo      `json:"links"`
		Routes []hostnet.Route `json:"routes"`
	}
	var errs []error
	if l, ok := h.(hostnet.LinkLister); ok {
		links, err := l.Links(ctx)
		errs = append(errs, err)
		sort.Slice(links, func(i, j int) bool { return links[i].Index < links[j].Index })
		for _, link := range links {
			li := linkInfo{Link: link}
			addrs, err := h.Addresses(ctx, link.Index)
			errs = append(errs, err)
			for _, a := range addrs {
				li.Addresses = append(li.Addresses, a.String())
			}
			out.Links = append(out.Links, li)
		}
	}
	routes, err := h.Routes(ctx, hostnet.RouteFilter{})
	errs = append(errs, err)
	out.Routes = routes
	data, err := json.MarshalIndent(out, "", "  ")
	return data, errors.Join(append(errs, err)...)
}
