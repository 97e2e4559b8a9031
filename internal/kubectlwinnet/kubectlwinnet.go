package kubectlwinnet

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet"
	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/cmdline"
	"github.com/winnet-io/winnet/internal/scheme"
)

const usage = `kubectl winnet: see what winnet's network does.

  kubectl winnet trace SRC DST [--port P] [--protocol tcp|udp|icmp] [-n NAMESPACE]
      Trace one packet from Pod SRC to DST (a Pod name, svc/NAME for a Service, or an IPv4
      address): creates a PacketTrace, waits for it and prints what each node decided.
  kubectl winnet status
      Summarise every winnet node: its conditions, counts and last errors.
  kubectl winnet --version
      Print the plugin's version.`

// Run runs the plugin with args (without the program name), printing to out.
func Run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(out, usage)
		return errors.New("a command is needed: trace or status")
	}
	switch args[0] {
	case "trace":
		return trace(ctx, args[1:], out)
	case "status":
		return status(ctx, args[1:], out)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(out, usage)
		return nil
	case "--version", "-version":
		fmt.Fprintln(out, winnet.Build().String("kubectl-winnet"))
		return nil
	}
	return fmt.Errorf("unknown command %q: trace or status", args[0])
}

// kubeconfigFile is the kubeconfig as kubectl picks it: --kubeconfig, else $KUBECONFIG, else
// ~/.kube/config.
func kubeconfigFile(path string) clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
}

// contextNamespace is the namespace of the kubeconfig's current context; "default" when the context
// names none.
func contextNamespace(kubeconfig clientcmd.ClientConfig) (string, error) {
	ns, _, err := kubeconfig.Namespace()
	if err != nil {
		return "", fmt.Errorf("reading the kubeconfig context's namespace: %w", err)
	}
	return ns, nil
}

func newClient(kubeconfig string) (client.Client, error) {
	cfg, err := cmdline.RESTConfig(kubeconfig, "")
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	s, err := scheme.New()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: s})
}

// interleaved parses flags that may come before, between or after the positional arguments, as
// kubectl's do.
func interleaved(fs *flag.FlagSet, args []string) ([]string, bool, error) {
	var pos []string
	for {
		help, err := cmdline.Parse(fs, args)
		if help || err != nil {
			return nil, help, err
		}
		if fs.NArg() == 0 {
			return pos, false, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func trace(ctx context.Context, args []string, out io.Writer) error {
	fs := cmdline.FlagSet("trace", usage)
	fs.SetOutput(out)
	kubeconfig := cmdline.KubeconfigFlag(fs)
	namespace := fs.String("n", "", "namespace of the trace and of SRC and DST (default: the kubeconfig context's namespace)")
	port := fs.Int("port", 0, "destination port (TCP, UDP)")
	protocol := fs.String("protocol", "tcp", "tcp, udp or icmp")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the trace")
	keep := fs.Bool("keep", false, "keep the PacketTrace (winnet-controller deletes finished traces after an hour)")
	pos, help, err := interleaved(fs, args)
	if help || err != nil {
		return err
	}
	if len(pos) != 2 {
		return fmt.Errorf("trace takes SRC and DST, got %q", pos)
	}
	if *namespace == "" {
		if *namespace, err = contextNamespace(kubeconfigFile(*kubeconfig)); err != nil {
			return err
		}
	}
	tr, err := newTrace(*namespace, pos[0], pos[1], *protocol, *port, *timeout)
	if err != nil {
		return err
	}
	c, err := newClient(*kubeconfig)
	if err != nil {
		return err
	}
	if err := c.Create(ctx, tr); err != nil {
		return fmt.Errorf("creating PacketTrace: %w", err)
	}
	if !*keep {
		defer func() { _ = c.Delete(context.WithoutCancel(ctx), tr) }()
	}
	fmt.Fprintf(out, "PacketTrace %s/%s created\n", tr.Namespace, tr.Name)
	deadline := time.Now().Add(*timeout + 5*time.Second)
	for {
		if err := c.Get(ctx, client.ObjectKeyFromObject(tr), tr); err != nil {
			return fmt.Errorf("reading PacketTrace %s: %w", tr.Name, err)
		}
		if tr.Status.Phase == networkv1alpha1.PacketTraceSucceeded || tr.Status.Phase == networkv1alpha1.PacketTraceFailed {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("PacketTrace %s did not finish within %v (phase %q: %s)", tr.Name, *timeout, tr.Status.Phase, tr.Status.Message)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	PrintTrace(out, tr)
	if tr.Status.Phase == networkv1alpha1.PacketTraceFailed {
		return fmt.Errorf("trace failed: %s: %s", tr.Status.Reason, tr.Status.Message)
	}
	return nil
}

// newTrace builds the PacketTrace of `trace SRC DST`.
func newTrace(namespace, src, dst, protocol string, port int, timeout time.Duration) (*networkv1alpha1.PacketTrace, error) {
	tr := &networkv1alpha1.PacketTrace{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "kubectl-" + rand.String(8)}}
	tr.Spec.Source.Pod.Name = src
	switch {
	case strings.HasPrefix(dst, "svc/") || strings.HasPrefix(dst, "service/"):
		_, name, _ := strings.Cut(dst, "/")
		tr.Spec.Destination.Service = &networkv1alpha1.ObjectReference{Name: name}
	default:
		if ip, err := netip.ParseAddr(dst); err == nil {
			if !ip.Is4() {
				return nil, fmt.Errorf("destination %s: only IPv4 is traced", dst)
			}
			tr.Spec.Destination.IP = networkv1alpha1.IPv4Address(ip.String())
		} else {
			tr.Spec.Destination.Pod = &networkv1alpha1.ObjectReference{Name: strings.TrimPrefix(dst, "pod/")}
		}
	}
	switch strings.ToLower(protocol) {
	case "tcp":
		tr.Spec.Packet.Protocol = networkv1alpha1.PacketTraceTCP
	case "udp":
		tr.Spec.Packet.Protocol = networkv1alpha1.PacketTraceUDP
	case "icmp":
		tr.Spec.Packet.Protocol = networkv1alpha1.PacketTraceICMP
	default:
		return nil, fmt.Errorf("--protocol %q: tcp, udp or icmp", protocol)
	}
	if tr.Spec.Packet.Protocol != networkv1alpha1.PacketTraceICMP {
		if port < 1 || port > 65535 {
			return nil, fmt.Errorf("--port is needed for %s (1-65535), got %d", protocol, port)
		}
		tr.Spec.Packet.DstPort = int32(port)
	}
	secs := int32(timeout / time.Second)
	tr.Spec.TimeoutSeconds = min(max(secs, 1), 300)
	return tr, nil
}

// PrintTrace prints a finished trace: its verdict, then its hops as a table, the source node first
// and then the nodes in the order the packet reached them.
func PrintTrace(out io.Writer, tr *networkv1alpha1.PacketTrace) {
	fmt.Fprintf(out, "Phase: %s", clean(string(tr.Status.Phase)))
	if tr.Status.Verdict != "" {
		fmt.Fprintf(out, "  Verdict: %s", clean(string(tr.Status.Verdict)))
	}
	if d := tr.Status.DroppedBy; d != nil {
		fmt.Fprintf(out, "  Dropped by: %s", clean(policyText(d)))
	}
	fmt.Fprintln(out)
	if tr.Status.Phase == networkv1alpha1.PacketTraceFailed {
		fmt.Fprintf(out, "Reason: %s: %s\n", clean(tr.Status.Reason), clean(tr.Status.Message))
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tCOMPONENT\tACTION\tDETAIL")
	for _, h := range orderedHops(tr) {
		for _, o := range h.Observations {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", clean(h.Node), clean(o.Component), clean(o.Action), clean(o.Detail))
		}
	}
	_ = w.Flush()
}

// policyText names the policy rule that dropped the packet: a ClusterNetworkPolicy has no namespace;
// a policy the trace's disclosure does not name has no name.
func policyText(d *networkv1alpha1.PolicyRuleReference) string {
	switch {
	case d.Name == "" && d.Namespace != "":
		return fmt.Sprintf("a %s of namespace %s %s", d.Kind, d.Namespace, d.Rule)
	case d.Name == "":
		return fmt.Sprintf("a %s (not named: the trace's disclosure is Namespace) %s", d.Kind, d.Rule)
	case d.Namespace != "":
		return fmt.Sprintf("%s %s/%s %s", d.Kind, d.Namespace, d.Name, d.Rule)
	}
	return fmt.Sprintf("%s %s %s", d.Kind, d.Name, d.Rule)
}

// clean replaces the control characters of text the API server returned (written by agents and
// controllers, or by anyone who could write the object) with '?': a terminal must not take them for
// commands (escape sequences that move the cursor, retitle the window or hide lines).
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}

// orderedHops puts the source node first, then each node a "Forwarded ... (node X)" observation
// names, then the rest; hops with no observation (nodes that were ready but not on the path) are
// left out.
func orderedHops(tr *networkv1alpha1.PacketTrace) []networkv1alpha1.PacketTraceHop {
	byNode := map[string]networkv1alpha1.PacketTraceHop{}
	for _, h := range tr.Status.Hops {
		if len(h.Observations) > 0 {
			byNode[h.Node] = h
		}
	}
	var out []networkv1alpha1.PacketTraceHop
	next := tr.Status.SourceNode
	for next != "" {
		h, ok := byNode[next]
		if !ok {
			break
		}
		out = append(out, h)
		delete(byNode, next)
		next = ""
		for _, o := range h.Observations {
			if _, rest, ok := strings.Cut(o.Detail, "(node "); ok && o.Action == networkv1alpha1.PacketTraceActionForwarded {
				next = strings.TrimSuffix(rest, ")")
			}
		}
	}
	rest := make([]string, 0, len(byNode))
	for n := range byNode {
		rest = append(rest, n)
	}
	slices.Sort(rest)
	for _, n := range rest {
		out = append(out, byNode[n])
	}
	return out
}

func status(ctx context.Context, args []string, out io.Writer) error {
	fs := cmdline.FlagSet("status", usage)
	fs.SetOutput(out)
	kubeconfig := cmdline.KubeconfigFlag(fs)
	if help, err := cmdline.Parse(fs, args); help || err != nil {
		return err
	}
	if err := cmdline.NoArgs(fs); err != nil {
		return err
	}
	c, err := newClient(*kubeconfig)
	if err != nil {
		return err
	}
	list := &networkv1alpha1.WindowsNodeNetworkList{}
	if err := c.List(ctx, list); err != nil {
		return fmt.Errorf("listing WindowsNodeNetworks: %w", err)
	}
	PrintStatus(out, list.Items)
	return nil
}

// PrintStatus prints one line per node (its conditions, flows, routes, Services and policies) and,
// below, the message of every condition that is not as it should be.
func PrintStatus(out io.Writer, nodes []networkv1alpha1.WindowsNodeNetwork) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tREADY\tCONDITIONS\tFLOWS\tROUTES\tSERVICES\tPOLICIES")
	var problems []string
	for _, n := range nodes {
		ready := "Unknown"
		var conds []string
		for _, c := range n.Status.Conditions {
			conds = append(conds, c.Type+"="+string(c.Status))
			if c.Type == networkv1alpha1.ReadyCondition {
				ready = string(c.Status)
			}
			if bad(c) {
				problems = append(problems, clean(fmt.Sprintf("%s: %s=%s %s: %s", n.Name, c.Type, c.Status, c.Reason, c.Message)))
			}
		}
		s := n.Status
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d/%d (%d failed)\t%d (%d ports)\t%d (%d rules)\n", clean(n.Name), clean(ready), clean(strings.Join(conds, ",")),
			s.FlowCount, s.RemoteRoutes.Installed, s.RemoteRoutes.Desired, s.RemoteRoutes.Failed, s.Services.Services, s.Services.Ports,
			s.NetworkPolicies.Policies, s.NetworkPolicies.Rules)
	}
	_ = w.Flush()
	if len(problems) > 0 {
		fmt.Fprintln(out, "\nLast errors:")
		for _, p := range problems {
			fmt.Fprintln(out, "  "+p)
		}
	}
}

// bad: a readiness condition (Ready, BridgeReady, ...) that is not True, or a failed preflight
// (its message names the failed checks and their fixes).
func bad(c metav1.Condition) bool {
	if c.Type == networkv1alpha1.PreflightCondition {
		return c.Status == metav1.ConditionFalse
	}
	return strings.HasSuffix(c.Type, networkv1alpha1.ReadyCondition) && c.Status != metav1.ConditionTrue
}
