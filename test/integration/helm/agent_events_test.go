//go:build !windows

package helm

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/agent"
	winnetscheme "github.com/winnet-io/winnet/internal/scheme"
	"github.com/winnet-io/winnet/test/framework"
)

// testAgentEvents: the admission policy winnet-agent-events admits the Events winnet-agent's recorder
// writes with agent A's token, and refuses the Events that token could otherwise forge: for another
// node, about a kind the agent does not report on, in another namespace than its object's, with an
// oversized note, a patch of another node's Event, and any Event of a token without a node.
func testAgentEvents(ctx context.Context, t *testing.T, server *framework.APIServer, admin client.Client, agentA, agentB tokenClientSet) {
	g := NewWithT(t)
	refused := func(message string) OmegaMatcher { return beDeniedBy("winnet-agent-events", message) }

	// The agent's own recorder (internal/agent NewEventRecorder's broadcaster) with agent A's token.
	scheme, err := winnetscheme.New()
	g.Expect(err).NotTo(HaveOccurred())
	broadcaster := agent.NewEventBroadcaster(eventsv1client.NewForConfigOrDie(agentA.cfg), "win-a")
	g.Expect(broadcaster.StartRecordingToSinkWithContext(ctx)).To(Succeed())
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme, agent.EventComponent)
	wnn := &networkv1alpha1.WindowsNodeNetwork{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Name: "win-a"}, wnn)).To(Succeed())
	pod := &corev1.Pod{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "winnet-agent-win-a"}, pod)).To(Succeed())
	recorder.Eventf(wnn, nil, corev1.EventTypeNormal, "AdmissionTest", "Converge", "The node network of %s converged", "win-a")
	recorder.Eventf(pod, nil, corev1.EventTypeWarning, "AdmissionTest", "Repair", "Repaired the network of sandbox %s", "4b9d2f0c7e1a3b5d")
	recorded := func(g Gomega) map[string]*eventsv1.Event {
		list := &eventsv1.EventList{}
		g.Expect(admin.List(ctx, list)).To(Succeed())
		got := map[string]*eventsv1.Event{}
		for i, e := range list.Items {
			if e.Reason == "AdmissionTest" {
				got[e.Namespace+"/"+e.Regarding.Kind+"/"+e.Regarding.Name+" by "+e.ReportingController+"/"+e.ReportingInstance] = &list.Items[i]
			}
		}
		return got
	}
	g.Eventually(func(g Gomega) {
		g.Expect(recorded(g)).To(HaveLen(2))
		g.Expect(recorded(g)).To(HaveKey("default/WindowsNodeNetwork/win-a by winnet-agent/win-a"))
		g.Expect(recorded(g)).To(HaveKey(ns + "/Pod/winnet-agent-win-a by winnet-agent/win-a"))
	}, 20*time.Second, 200*time.Millisecond).Should(Succeed(), "the agent's recorder reports its node as reportingInstance, and its Events are admitted")
	// The same Event again is a series: the recorder patches the first (an UPDATE), admitted too.
	recorder.Eventf(wnn, nil, corev1.EventTypeNormal, "AdmissionTest", "Converge", "The node network of %s converged", "win-a")
	g.Eventually(func(g Gomega) {
		e := recorded(g)["default/WindowsNodeNetwork/win-a by winnet-agent/win-a"]
		g.Expect(e).NotTo(BeNil())
		g.Expect(e.Series).NotTo(BeNil())
		g.Expect(e.Series.Count).To(BeNumerically(">=", 2))
	}, 20*time.Second, 200*time.Millisecond).Should(Succeed(), "the recorder's patch of a series is admitted")

	core := func(namespace, apiVersion, kind, name, host, message string) *corev1.Event {
		objectNamespace := ""
		if kind == "Pod" || kind == "Secret" {
			objectNamespace = namespace
		}
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "forged-", Namespace: namespace},
			InvolvedObject: corev1.ObjectReference{APIVersion: apiVersion, Kind: kind, Name: name, Namespace: objectNamespace},
			Source:         corev1.EventSource{Component: agent.EventComponent, Host: host},
			Reason:         "Forged", Message: message, Type: corev1.EventTypeWarning}
	}
	events := func(namespace string, regarding corev1.ObjectReference, instance string) *eventsv1.Event {
		return &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "forged-", Namespace: namespace},
			EventTime: metav1.NowMicro(), ReportingController: agent.EventComponent, ReportingInstance: instance,
			Action: "Repair", Reason: "Forged", Regarding: regarding, Note: "forged", Type: corev1.EventTypeWarning}
	}
	podRef := corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: "winnet-agent-win-b"}
	for _, tc := range []struct {
		name  string
		event client.Object
		want  string
	}{
		{"core, reported as node B", core("default", "v1", "Node", "win-b", "win-b", "forged"),
			"winnet-agent of node win-a may record only Events reported by node win-a (reportingInstance or source.host), not by \"\"/\"win-b\""},
		{"events.k8s.io, reported as node B", events(ns, podRef, "win-b"),
			"winnet-agent of node win-a may record only Events reported by node win-a"},
		{"core, reported as both nodes", func() client.Object {
			e := core("default", "v1", "Node", "win-a", "win-a", "forged")
			e.ReportingController, e.ReportingInstance = agent.EventComponent, "win-b"
			return e
		}(), "winnet-agent of node win-a may record only Events reported by node win-a"},
		{"about node B's Node", core("default", "v1", "Node", "win-b", "win-a", "forged"),
			"winnet-agent of node win-a may record Events only about its Node and WindowsNodeNetwork, Pods, PodEndpoints, Services, NetworkPolicies, Namespaces and ClusterNetworkPolicies, not about v1 Node win-b"},
		{"about node B's WindowsNodeNetwork", events("default", corev1.ObjectReference{APIVersion: "network.winnet.io/v1alpha1", Kind: "WindowsNodeNetwork", Name: "win-b"}, "win-a"),
			"not about network.winnet.io/v1alpha1 WindowsNodeNetwork win-b"},
		{"about a Secret", core("default", "v1", "Secret", "db-password", "win-a", "forged"),
			"not about v1 Secret db-password"},
		{"about a kind of the list in another group", events("default", corev1.ObjectReference{APIVersion: "example.com/v1", Kind: "Pod", Namespace: "default", Name: "web"}, "win-a"),
			"not about example.com/v1 Pod web"},
		{"in another namespace than its object's", events("default", podRef, "win-a"),
			"winnet-agent of node win-a records an Event in the namespace of its object (\"default\" for a cluster-scoped one), not in default"},
		{"with a note of 1025 characters", core("default", "v1", "Node", "win-a", "win-a", strings.Repeat("x", 1025)),
			"winnet-agent of node win-a may record Events with a note of at most 1024 characters, not 1025"},
	} {
		g.Expect(agentA.c.Create(ctx, tc.event)).To(refused(tc.want), tc.name)
	}
	// At the bound, on its own Node, as the agent writes it: admitted.
	g.Expect(agentA.c.Create(ctx, core("default", "v1", "Node", "win-a", "win-a", strings.Repeat("x", 1024)))).To(Succeed())

	// Node B's Event: B may patch it, A may not.
	theirs := core("default", "v1", "Node", "win-b", "win-b", "node B's")
	g.Expect(agentB.c.Create(ctx, theirs)).To(Succeed())
	g.Expect(agentB.c.Patch(ctx, theirs, client.RawPatch(types.MergePatchType, []byte(`{"count":2}`)))).To(Succeed())
	g.Expect(agentA.c.Patch(ctx, theirs, client.RawPatch(types.MergePatchType, []byte(`{"message":"forged"}`)))).
		To(refused("winnet-agent of node win-a may record only Events reported by node win-a"))
	g.Expect(agentA.c.Patch(ctx, theirs, client.RawPatch(types.MergePatchType, []byte(`{"source":{"host":"win-a"},"involvedObject":{"name":"win-a"}}`)))).
		To(refused("winnet-agent of node win-a may change only Events reported by node win-a, not default/" + theirs.Name))

	// Another component's Event (no node reported it) cannot be made the agent's.
	kubelets := core(ns, "v1", "Pod", "winnet-agent-win-a", "", "Started container winnet-agent")
	kubelets.Source = corev1.EventSource{Component: "kubelet"}
	g.Expect(admin.Create(ctx, kubelets)).To(Succeed())
	g.Expect(agentA.c.Patch(ctx, kubelets, client.RawPatch(types.MergePatchType, []byte(`{"source":{"host":"win-a"},"message":"forged"}`)))).
		To(refused("winnet-agent of node win-a may change only Events reported by node win-a, not " + ns + "/" + kubelets.Name))

	// A token without a node records nothing.
	unbound := tokenClient(t, server, requestToken(ctx, t, server, "winnet-agent", nil))
	g.Expect(unbound.Create(ctx, core("default", "v1", "Node", "win-a", "win-a", "forged"))).
		To(refused("no authentication.kubernetes.io/node-name claim"))
}

// testPodEndpointNames: with nodes named win and win.corp, the agent of win cannot create a
// PodEndpoint under a name win.corp's agent needs (through the CRD's legacy branch, name ==
// spec.podName), nor under its own prefix with a name that is not "win.<spec.podUID>" or a podUID
// that is not a UID; win.corp's agent creates its own. The legacy branch still serves a record that
// exists (an earlier release's): its agent updates and deletes it.
func testPodEndpointNames(ctx context.Context, t *testing.T, server *framework.APIServer, admin client.Client) {
	g := NewWithT(t)
	for _, name := range []string{"win", "win.corp"} {
		g.Expect(admin.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
		g.Expect(admin.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "winnet-agent-" + name, Namespace: ns},
			Spec: corev1.PodSpec{NodeName: name, ServiceAccountName: "winnet-agent",
				Containers: []corev1.Container{{Name: "winnet-agent", Image: "ghcr.io/winnet-io/winnet-windows:test"}}}})).To(Succeed())
	}
	win := agentClient(ctx, t, server, "win")
	corp := agentClient(ctx, t, server, "win.corp")

	const other = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	record := func(name, pod, uid, node string) *networkv1alpha1.PodEndpoint {
		pe := podEndpoint("default", pod, node)
		pe.Name, pe.Spec.PodUID = name, uid
		return pe
	}
	byName := func(name string) OmegaMatcher {
		return beDenied("winnet-agent of node win may create only PodEndpoints named win.<spec.podUID>, not default/" + name)
	}
	byUID := func(name string) OmegaMatcher {
		return beDenied("winnet-agent of node win may create only PodEndpoints whose spec.podUID is a Pod UID (lower-case 8-4-4-4-12 hexadecimal), not default/" + name)
	}
	// The CRD admits each of these (metadata.name == spec.podName, or "<node>.<podUID>" with a
	// podUID that is no UID); the policy refuses them.
	corpName := networkv1alpha1.PodEndpointName("win.corp", podUID)
	g.Expect(win.c.Create(ctx, record(corpName, corpName, podUID, "win"))).To(byName(corpName), "win.corp's name")
	g.Expect(win.c.Create(ctx, record("win."+other, "win."+other, podUID, "win"))).To(byName("win."+other), "a UID not its podUID")
	g.Expect(win.c.Create(ctx, record("web-new", "web-new", podUID, "win"))).To(byName("web-new"), "the legacy name of a new record")
	g.Expect(win.c.Create(ctx, record("win.not-a-pod-uid", "web", "not-a-pod-uid", "win"))).To(byUID("win.not-a-pod-uid"), "a podUID that is no UID")
	g.Expect(win.c.Create(ctx, record("web-upper", "web-upper", strings.ToUpper(podUID), "win"))).To(byUID("web-upper"), "an upper-case UID")

	// win.corp's agent records its Pod under its name (nobody took it first), win's under its own.
	theirs := record(corpName, "web", podUID, "win.corp")
	g.Expect(corp.c.Create(ctx, theirs)).To(Succeed())
	own := record(networkv1alpha1.PodEndpointName("win", podUID), "web", podUID, "win")
	g.Expect(win.c.Create(ctx, own)).To(Succeed())

	// A record of an earlier release, named after its Pod: its agent still updates and deletes it.
	legacy := record("web-legacy", "web-legacy", other, "win")
	g.Expect(admin.Create(ctx, legacy)).To(Succeed())
	g.Expect(win.c.Status().Patch(ctx, legacy, client.RawPatch(types.MergePatchType, []byte(`{"status":{"hnsEndpointID":"ep-legacy"}}`)))).To(Succeed())
	g.Expect(win.c.Delete(ctx, legacy)).To(Succeed())
	g.Expect(win.c.Delete(ctx, own)).To(Succeed())
	g.Expect(corp.c.Delete(ctx, theirs)).To(Succeed())
}
