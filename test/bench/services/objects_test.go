//go:build linux && bench

package services

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/test/bench/benchutil"
	"github.com/winnet-io/winnet/test/framework"
)

const (
	namespace = "bench"
	// servicePort is every benchmark Service's port (the kubernetes Service's is 443), targetPort
	// its endpoints'.
	servicePort = 80
	targetPort  = 8080
)

// writer writes the benchmark's Services and EndpointSlices, without client-side rate limiting.
type writer struct {
	c client.Client
	// nextEndpoint is the last endpoint address given out (as a uint32): every endpoint the
	// benchmark ever writes has an address of its own, so that a proxy's data path tells which
	// write it carries.
	nextEndpoint atomic.Uint32
}

func newWriter(t *testing.T, s *framework.APIServer) *writer {
	t.Helper()
	cfg := rest.CopyConfig(s.Config)
	cfg.QPS, cfg.Burst = -1, 0 // the API server, not the client, should bound the writes
	c, err := client.New(cfg, client.Options{Scheme: s.Client.Scheme()})
	if err != nil {
		t.Fatalf("creating the benchmark's client: %v", err)
	}
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatalf("creating namespace %s: %v", namespace, err)
	}
	w := &writer{c: c}
	w.nextEndpoint.Store(binary.BigEndian.Uint32(netip.MustParseAddr("10.128.0.0").AsSlice()))
	return w
}

// newEndpointAddr returns an address never written before.
func (w *writer) newEndpointAddr() netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], w.nextEndpoint.Add(1))
	return netip.AddrFrom4(b)
}

// scenario is a set of Services and their EndpointSlices as last written.
type scenario struct {
	scale    scale
	services []*corev1.Service
	// slices holds each Service's EndpointSlice as last written; mu[i] serialises writes to it.
	slices []*discoveryv1.EndpointSlice
	mu     []sync.Mutex
}

// clusterIP of the i-th Service of a scenario whose addresses start after base.
func clusterIP(base netip.Addr, i int) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], binary.BigEndian.Uint32(base.AsSlice())+uint32(i)+1)
	return netip.AddrFrom4(b)
}

// createScenario creates the Services (selectorless, ClusterIPs after base) and one EndpointSlice
// per Service with its endpoints, all ready and on no node of the benchmark's.
func (w *writer) createScenario(t *testing.T, sc scale, base netip.Addr) *scenario {
	t.Helper()
	start := time.Now()
	objs := &scenario{scale: sc, services: make([]*corev1.Service, sc.services), slices: make([]*discoveryv1.EndpointSlice, sc.services),
		mu: make([]sync.Mutex, sc.services)}
	prefix := fmt.Sprintf("s%d-", base.As4()[1]) // distinct names per scenario
	err := benchutil.Parallel(0, sc.services, 16, func(i int) error {
		name := fmt.Sprintf("%s%05d", prefix, i)
		ip := clusterIP(base, i).String()
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip},
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: servicePort, TargetPort: intstr.FromInt32(targetPort)}},
			},
		}
		if err := w.c.Create(context.Background(), svc); err != nil {
			return fmt.Errorf("creating Service %s: %w", name, err)
		}
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-1", Labels: map[string]string{
				discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "bench-services",
			}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](targetPort)}},
		}
		for range sc.endpoints {
			slice.Endpoints = append(slice.Endpoints, readyEndpoint(w.newEndpointAddr()))
		}
		if err := w.c.Create(context.Background(), slice); err != nil {
			return fmt.Errorf("creating EndpointSlice %s: %w", slice.Name, err)
		}
		objs.services[i], objs.slices[i] = svc, slice
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("bench-services wrote %d Services with %d endpoints each in %s\n", sc.services, sc.endpoints, time.Since(start).Round(time.Millisecond))
	return objs
}

func readyEndpoint(addr netip.Addr) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{addr.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
}

// deleteScenario deletes the scenario's Services and EndpointSlices.
func (w *writer) deleteScenario(t *testing.T, objs *scenario) {
	t.Helper()
	err := benchutil.Parallel(0, len(objs.services), 16, func(i int) error {
		if err := w.c.Delete(context.Background(), objs.slices[i]); err != nil {
			return fmt.Errorf("deleting EndpointSlice %s: %w", objs.slices[i].Name, err)
		}
		if err := w.c.Delete(context.Background(), objs.services[i]); err != nil {
			return fmt.Errorf("deleting Service %s: %w", objs.services[i].Name, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// addEndpoint adds a new endpoint to the i-th Service's slice and returns its address, when the
// write completed and how long it took.
func (w *writer) addEndpoint(ctx context.Context, objs *scenario, i int) (netip.Addr, sliceVersion, time.Time, time.Duration, error) {
	objs.mu[i].Lock()
	defer objs.mu[i].Unlock()
	s := objs.slices[i].DeepCopy()
	addr := w.newEndpointAddr()
	s.Endpoints = append(s.Endpoints, readyEndpoint(addr))
	start := time.Now()
	if err := w.c.Update(ctx, s); err != nil {
		return addr, sliceVersion{}, time.Time{}, 0, fmt.Errorf("adding endpoint %s to EndpointSlice %s: %w", addr, s.Name, err)
	}
	done := time.Now()
	objs.slices[i] = s
	v, err := versionOf(s)
	return addr, v, done, done.Sub(start), err
}

// sliceVersion identifies the version of an EndpointSlice a write made: its UID and its
// resourceVersion as a number (the API server's etcd revision, which grows with every write).
type sliceVersion struct {
	uid types.UID
	rv  uint64
}

func versionOf(s *discoveryv1.EndpointSlice) (sliceVersion, error) {
	rv, err := strconv.ParseUint(s.ResourceVersion, 10, 64)
	if err != nil {
		return sliceVersion{}, fmt.Errorf("EndpointSlice %s has resourceVersion %q: want a number: %w", s.Name, s.ResourceVersion, err)
	}
	return sliceVersion{s.UID, rv}, nil
}

// replaceEndpoint replaces the k-th endpoint (modulo their number) of the i-th Service with a new
// address and returns it, the address it replaced, the slice's version written and when the write
// completed.
func (w *writer) replaceEndpoint(ctx context.Context, objs *scenario, i, k int) (addr, old netip.Addr, v sliceVersion, done time.Time, err error) {
	objs.mu[i].Lock()
	defer objs.mu[i].Unlock()
	s := objs.slices[i].DeepCopy()
	addr = w.newEndpointAddr()
	e := &s.Endpoints[k%len(s.Endpoints)]
	old = netip.MustParseAddr(e.Addresses[0])
	*e = readyEndpoint(addr)
	if err := w.c.Update(ctx, s); err != nil {
		return addr, old, v, time.Time{}, fmt.Errorf("replacing an endpoint of EndpointSlice %s: %w", s.Name, err)
	}
	done = time.Now()
	objs.slices[i] = s
	v, err = versionOf(s)
	return addr, old, v, done, err
}
