//go:build linux

package netpol

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mattfenwick/cyclonus/pkg/connectivity/probe"
	"github.com/mattfenwick/cyclonus/pkg/generator"
	"github.com/mattfenwick/cyclonus/pkg/matcher"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/pipeline"
)

var (
	runAll   = flag.Bool("netpol.all", false, "run every non-SCTP cyclonus case (make conformance-netpol), not the sample (make test)")
	runUpTo  = flag.Int("netpol.upto", 0, "run only the first N of the cases chosen (0: all), to replay a failure found at case N")
	runMatch = flag.String("netpol.run", "", "run only the cases whose description matches this regular expression")
)

// minSample is the least number of cases the sample holds.
const minSample = 30

// sample is the fixed sample make test runs: the first case carrying each cyclonus tag (so that
// every feature cyclonus knows is played: each peer kind, ipBlock with and without except, named
// ports, endPort, TCP and UDP, ingress and egress, stacked and conflicting policies, every action
// from label changes to Pod and namespace creation), then, if that is fewer than minSample, every
// other case not yet taken from the start. It depends only on cyclonus v0.5.6's case list, so it is
// the same on every run.
func sample(cases []*generator.TestCase) []*generator.TestCase {
	picked := make([]bool, len(cases))
	covered := map[string]bool{}
	for i, tc := range cases {
		for _, tag := range tc.Tags.Keys() {
			if !covered[tag] {
				covered[tag] = true
				picked[i] = true
			}
		}
	}
	var out []*generator.TestCase
	for i, tc := range cases {
		if picked[i] {
			out = append(out, tc)
		}
	}
	for i := 1; len(out) < minSample && i < len(cases); i += 2 {
		if !picked[i] {
			picked[i] = true
			out = append(out, cases[i])
		}
	}
	return out
}

// TestConformance plays cyclonus's generated cases on the cluster: for each case, from the state
// cyclonus starts every case in, each step's actions are applied through the API server, the
// agents are waited for (cluster.sync), every (source Pod, destination Pod, port/protocol) cell is
// probed with real packets and compared with cyclonus's truth table for the policies, labels and
// addresses the API server holds. SCTP cases are left out (winnet refuses SCTP on Windows) and
// counted on their own line.
func TestConformance(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	gen := generator.NewTestCaseGenerator(true, c.pods["z/c"].IP.String(), namespaces, nil, nil)
	var cases []*generator.TestCase
	sctp := 0
	for _, tc := range gen.GenerateAllTestCases() {
		if tc.Tags.ContainsAny([]string{generator.TagSCTPProtocol}) {
			sctp++
			continue
		}
		cases = append(cases, tc)
	}
	all := len(cases)
	if !*runAll {
		cases = sample(cases)
	}
	if *runMatch != "" {
		re := regexp.MustCompile(*runMatch)
		cases = slices.DeleteFunc(cases, func(tc *generator.TestCase) bool { return !re.MatchString(tc.Description) })
	}
	if *runUpTo > 0 && *runUpTo < len(cases) {
		cases = cases[:*runUpTo]
	}
	t.Logf("cyclonus v0.5.6: %d cases without SCTP, %d with (left out); running %d", all, sctp, len(cases))
	tags := map[string]bool{}
	for _, tc := range cases {
		for _, tag := range tc.Tags.Keys() {
			tags[tag] = true
		}
	}
	tagList := make([]string, 0, len(tags))
	for tag := range tags {
		tagList = append(tagList, tag)
	}
	sort.Strings(tagList)
	t.Logf("tags covered (%d): %s", len(tagList), strings.Join(tagList, ", "))

	var passed, cells, disagree int
	start := time.Now()
	for i, tc := range cases {
		caseStart := time.Now()
		if err := c.reset(ctx); err != nil {
			t.Fatalf("resetting the cluster before case %d: %v", i+1, err)
		}
		ok := true
		for si, step := range tc.Steps {
			for _, a := range step.Actions {
				if err := c.apply(ctx, a); err != nil {
					t.Fatalf("case %d %q step %d: %v", i+1, tc.Description, si+1, err)
				}
			}
			c.sync()
			n, bad, table := c.judge(ctx, step.Probe)
			cells += n
			disagree += len(bad)
			fmt.Printf("case %d/%d %q step %d/%d (tags %s): %d cells, %d disagree\n%s", i+1, len(cases), tc.Description, si+1, len(tc.Steps),
				strings.Join(tc.Tags.Keys(), ","), n, len(bad), table)
			for _, b := range bad {
				t.Errorf("case %d %q step %d: %s", i+1, tc.Description, si+1, b)
			}
			if len(bad) > 0 {
				ok = false
				c.explain(ctx)
			}
		}
		if ok {
			passed++
		}
		t.Logf("case %d took %v", i+1, time.Since(caseStart).Round(time.Millisecond))
	}
	fmt.Printf("conformance-netpol sctp: %d cyclonus cases left out (winnet refuses SCTP on Windows)\n", sctp)
	fmt.Printf("conformance-netpol took %v; %d allowed cells were blocked on the first probe and were probed again (probe timeout %v)\n",
		time.Since(start).Round(time.Second), c.reprobed, probeTimeout)
	fmt.Printf("conformance-netpol cases=%d passed=%d cells=%d disagree=%d\n", len(cases), passed, cells, disagree)
	if len(cases) == 0 || cells == 0 {
		t.Fatalf("ran %d cases and %d cells: nothing was judged", len(cases), cells)
	}
}

// apply performs one cyclonus action through the API server.
func (c *cluster) apply(ctx context.Context, a *generator.Action) error {
	switch {
	case a.CreatePolicy != nil:
		return server.Client.Create(ctx, a.CreatePolicy.Policy.DeepCopy())
	case a.UpdatePolicy != nil:
		cur := &networkingv1.NetworkPolicy{}
		p := a.UpdatePolicy.Policy
		if err := server.Client.Get(ctx, client.ObjectKeyFromObject(p), cur); err != nil {
			return err
		}
		cur.Labels, cur.Spec = p.Labels, *p.Spec.DeepCopy()
		return server.Client.Update(ctx, cur)
	case a.DeletePolicy != nil:
		return server.Client.Delete(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: a.DeletePolicy.Namespace, Name: a.DeletePolicy.Name}})
	case a.CreateNamespace != nil:
		c.namespaces = append(c.namespaces, a.CreateNamespace.Namespace)
		return server.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: a.CreateNamespace.Namespace, Labels: a.CreateNamespace.Labels}})
	case a.SetNamespaceLabels != nil:
		return c.setNamespaceLabels(ctx, a.SetNamespaceLabels.Namespace, a.SetNamespaceLabels.Labels)
	case a.DeleteNamespace != nil:
		ns := a.DeleteNamespace.Namespace
		for k := range c.pods {
			if pns, name, _ := strings.Cut(k, "/"); pns == ns {
				if err := c.deletePod(ctx, pns, name); err != nil {
					return err
				}
			}
		}
		c.namespaces = slices.DeleteFunc(c.namespaces, func(s string) bool { return s == ns })
		// The namespace stays Terminating: there is no namespace controller here. Its Pods are gone.
		return server.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	case a.CreatePod != nil:
		c.addPod(a.CreatePod.Namespace, a.CreatePod.Pod, a.CreatePod.Labels)
		return nil
	case a.SetPodLabels != nil:
		return c.setPodLabels(ctx, a.SetPodLabels.Namespace, a.SetPodLabels.Pod, a.SetPodLabels.Labels)
	case a.DeletePod != nil:
		return c.deletePod(ctx, a.DeletePod.Namespace, a.DeletePod.Pod)
	default:
		return fmt.Errorf("cyclonus action %+v is not supported by this harness", a)
	}
}

// resources describes the cluster to cyclonus as the API server holds it now: the namespaces
// cyclonus knows with their labels (kubernetes.io/metadata.name included), its Pods with their
// labels and addresses, and their containers as cyclonus's default Pods have them (TCP and UDP on
// 80 and 81).
func (c *cluster) resources(ctx context.Context) (*probe.Resources, error) {
	r := &probe.Resources{Namespaces: map[string]map[string]string{}}
	for _, ns := range c.namespaces {
		obj := &corev1.Namespace{}
		if err := server.Client.Get(ctx, client.ObjectKey{Name: ns}, obj); err != nil {
			return nil, err
		}
		r.Namespaces[ns] = obj.Labels
	}
	keys := make([]string, 0, len(c.pods))
	for k := range c.pods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := c.pods[k]
		obj := &corev1.Pod{}
		if err := server.Client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Name}, obj); err != nil {
			return nil, err
		}
		pod := probe.NewDefaultPod(p.Namespace, p.Name, ports, protocols, false, "")
		pod.Labels, pod.IP = obj.Labels, p.IP.String()
		r.Pods = append(r.Pods, pod)
	}
	return r, nil
}

// judge probes one step's cells with real packets and compares them with cyclonus's truth table
// for the policies the API server holds in cyclonus's namespaces (defaulted by it, as cyclonus's
// matcher needs). It returns the number of cells compared, the disagreements, and the step's table.
func (c *cluster) judge(ctx context.Context, config *generator.ProbeConfig) (int, []string, string) {
	t := c.t
	res, err := c.resources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var policies []*networkingv1.NetworkPolicy
	for _, ns := range c.namespaces {
		list := &networkingv1.NetworkPolicyList{}
		if err := server.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			policies = append(policies, &list.Items[i])
		}
	}
	config = &generator.ProbeConfig{AllAvailable: config.AllAvailable, PortProtocol: config.PortProtocol, Mode: generator.ProbeModePodIP}
	jobs := &probe.JobBuilder{TimeoutSeconds: int(probeTimeout / time.Second)}
	truth := probe.NewSimulatedRunner(matcher.BuildNetworkPolicies(true, policies), jobs).RunProbeForConfig(config, res)
	runner := &realRunner{pods: c.pods}
	real := (&probe.Runner{JobRunner: runner, JobBuilder: jobs}).RunProbeForConfig(config, res)
	// A cell the oracle allows that the first probe found blocked is probed once more, alone with
	// the other such cells: on a loaded machine a burst of a few hundred new connections can lose a
	// packet (the userspace datapath's port sockets overflow), which a real client would send again.
	// Only that direction is probed again: a lost packet can make an allowed cell look blocked, never
	// a blocked cell look allowed, so a cell that got through where the oracle says blocked is a
	// policy leak and counts at once. The flows are the same for both probes, so a policy that is
	// realised wrong disagrees twice. The cells that needed it are counted and shown ("r").
	reprobed := map[string]bool{}
	var again []*probe.Job
	for _, from := range res.SortedPodNames() {
		for _, to := range res.SortedPodNames() {
			for k, w := range truth.Get(from, to).JobResults {
				g := real.Get(from, to).JobResults[k]
				if g != nil && g.Combined != probe.ConnectivityUnknown && w.Combined == probe.ConnectivityAllowed && g.Combined == probe.ConnectivityBlocked {
					again = append(again, g.Job)
				}
			}
		}
	}
	if len(again) > 0 {
		for _, r := range runner.RunJobs(again) {
			item := real.Get(r.Job.FromKey, r.Job.ToKey)
			key := r.Key()
			reprobed[r.Job.FromKey+" "+r.Job.ToKey+" "+key] = true
			item.JobResults[key] = r
		}
	}
	c.reprobed += len(again)

	names := res.SortedPodNames()
	var b strings.Builder
	var bad []string
	n := 0
	fmt.Fprintf(&b, "%-6s", "")
	for _, to := range names {
		fmt.Fprintf(&b, " %-9s", to)
	}
	b.WriteString("   (per destination: its ports in the order of the legend; . allowed, X blocked, both as cyclonus expects; r allowed as cyclonus expects on the second probe only; A allowed but cyclonus expects blocked (probed once), B blocked twice but cyclonus expects allowed; - not probed)\n")
	var legend []string
	for _, from := range names {
		fmt.Fprintf(&b, "%-6s", from)
		for _, to := range names {
			want, got := truth.Get(from, to).JobResults, real.Get(from, to).JobResults
			keys := make([]string, 0, len(want))
			for k := range want {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			if legend == nil {
				legend = keys
			}
			cell := ""
			for _, k := range keys {
				w, g := want[k].Combined, probe.ConnectivityUnknown
				if got[k] != nil {
					g = got[k].Combined
				}
				switch {
				case (w != probe.ConnectivityAllowed && w != probe.ConnectivityBlocked) || g == probe.ConnectivityUnknown:
					cell += "-"
				case w == g && reprobed[from+" "+to+" "+k]:
					cell += "r"
					n++
				case w == g:
					cell += g.ShortString()
					n++
				default:
					n++
					if g == probe.ConnectivityAllowed {
						cell += "A"
					} else {
						cell += "B"
					}
					bad = append(bad, fmt.Sprintf("%s -> %s %s: %s, cyclonus expects %s", from, to, k, g, w))
				}
			}
			fmt.Fprintf(&b, " %-9s", cell)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "legend: %s\n", strings.Join(legend, " "))
	return n, bad, b.String()
}

// explain prints what a disagreement is judged from: the policies the API server holds and each
// node's policy tables.
func (c *cluster) explain(ctx context.Context) {
	for _, ns := range c.namespaces {
		list := &networkingv1.NetworkPolicyList{}
		if err := server.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			c.t.Fatal(err)
		}
		for _, np := range list.Items {
			b, _ := json.Marshal(np.Spec)
			fmt.Printf("policy %s/%s: %s\n", np.Namespace, np.Name, b)
		}
	}
	for _, n := range c.nodes {
		for _, table := range []uint8{pipeline.EgressRuleTable, pipeline.EgressDefaultTable, pipeline.IngressRuleTable, pipeline.IngressDefaultTable} {
			flows, err := n.OVS.DumpFlows(networkv1alpha1.DefaultBridgeName, fmt.Sprintf("table=%d", table))
			fmt.Printf("node %s table %d (%v):\n  %s\n", n.Name, table, err, strings.Join(flows, "\n  "))
		}
	}
	for k, p := range c.pods {
		fmt.Printf("pod %s: %s on %s\n", k, p.IP, c.nodeOf[k].Name)
	}
}

// TestSampleCoversEveryTag holds the sample make test runs to what it promises: at least minSample
// cases, and every tag of the non-SCTP cases.
func TestSampleCoversEveryTag(t *testing.T) {
	var cases []*generator.TestCase
	for _, tc := range generator.NewTestCaseGenerator(true, "10.244.71.7", namespaces, nil, nil).GenerateAllTestCases() {
		if !tc.Tags.ContainsAny([]string{generator.TagSCTPProtocol}) {
			cases = append(cases, tc)
		}
	}
	all, inSample := map[string]bool{}, map[string]bool{}
	for _, tc := range cases {
		for _, tag := range tc.Tags.Keys() {
			all[tag] = true
		}
	}
	s := sample(cases)
	for _, tc := range s {
		for _, tag := range tc.Tags.Keys() {
			inSample[tag] = true
		}
	}
	if len(s) < minSample {
		t.Errorf("the sample has %d cases, want at least %d", len(s), minSample)
	}
	for tag := range all {
		if !inSample[tag] {
			t.Errorf("no case of the sample has the tag %q", tag)
		}
	}
	t.Logf("sample: %d of %d cases, %d tags", len(s), len(cases), len(inSample))
}
