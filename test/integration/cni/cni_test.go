//go:build linux

package cni_test

import (
	"context"
	"fmt"
	mathrand "math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	cnitypes "github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/podendpoint"
	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/internal/cni/ipam"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

func TestPodNetwork(t *testing.T) {
	n := startNode(t, "cni-a", "192.168.20.11/24", "10.244.1.0/24")
	ctx := context.Background()

	t.Run("ADD gives a working network at once; two Pods reach each other; DEL twice", func(t *testing.T) {
		g := NewWithT(t)
		p1, p2 := n.newPod(t, "web-1", true), n.newPod(t, "web-2", true)
		r1 := n.add(t, p1)
		sent, received, err := simnode.Ping(p1.ns, n.gateway, 1)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(received).To(Equal(sent), "the gateway answers the first ping right after ADD")
		ip1 := podIP(g, r1)
		g.Expect(n.PodCIDR.Contains(ip1)).To(BeTrue())
		g.Expect(r1.IPs[0].Gateway.String()).To(Equal(n.gateway.String()))
		g.Expect(r1.Interfaces[0].Mtu).To(Equal(1450))
		g.Expect(r1.DNS.Nameservers).To(Equal([]string{"10.96.0.10"}))

		r2 := n.add(t, p2)
		ip2 := podIP(g, r2)
		sent, received, err = simnode.Ping(p2.ns, ip1, 2)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(received).To(Equal(sent), "Pod to Pod on the node")

		g.Expect(n.CNI.CheckNetworkList(ctx, n.ConfList, p1.rt)).To(Succeed())
		g.Eventually(func(g Gomega) {
			pep := podEndpoint(g, p1.name)
			g.Expect(readyStatus(pep)).To(Equal(metav1.ConditionTrue))
			g.Expect(pep.Spec.IPs).To(ConsistOf(BeEquivalentTo(r1.IPs[0].Address.String())))
			g.Expect(pep.Status.OVSPort).To(Equal(podendpoint.EndpointName(p1.sandbox)))
			g.Expect(pep.OwnerReferences).To(ContainElement(HaveField("UID", BeEquivalentTo(p1.uid))))
		}).WithTimeout(repair).Should(Succeed())

		for _, p := range []*testPod{p1, p2} {
			g.Expect(n.CNI.DelNetworkList(ctx, n.ConfList, p.rt)).To(Succeed())
			g.Expect(n.CNI.DelNetworkList(ctx, n.ConfList, p.rt)).To(Succeed(), "a second DEL succeeds")
		}
		_ = ip2
		g.Expect(n.leftovers(g)).To(BeEmpty())
	})

	t.Run("1,000 idle connections to the agent's socket do not stop a real ADD", func(t *testing.T) {
		g := NewWithT(t)
		for range 1000 {
			conn, err := cni.Dial(ctx, n.Agent.CNISocket)
			g.Expect(err).NotTo(HaveOccurred())
			t.Cleanup(func() { _ = conn.Close() })
		}
		p := n.newPod(t, "behind-idle", true)
		start := time.Now()
		r := n.add(t, p)
		t.Logf("ADD through the shim took %s behind 1,000 idle connections", time.Since(start))
		g.Expect(time.Since(start)).To(BeNumerically("<", cni.DefaultReadTimeout), "not delayed until the idle connections time out")
		g.Expect(n.PodCIDR.Contains(podIP(g, r))).To(BeTrue())
		g.Expect(n.CNI.DelNetworkList(ctx, n.ConfList, p.rt)).To(Succeed())
	})

	t.Run("20 concurrent ADDs, their vNICs appearing 0-500 ms after in random order, each Pod reaches the gateway, 20 concurrent DELs", func(t *testing.T) {
		g := NewWithT(t)
		pods := make([]*testPod, 20)
		for i := range pods {
			pods[i] = n.newPod(t, fmt.Sprintf("burst-%d", i), true)
		}
		ips := make([]netip.Addr, len(pods))
		errs := make([]error, len(pods))
		var wg sync.WaitGroup
		for i, p := range pods {
			wg.Go(func() {
				res, err := n.CNI.AddNetworkList(ctx, n.ConfList, p.rt)
				if errs[i] = err; err != nil {
					return
				}
				cur, cerr := types100FromResult(res)
				if errs[i] = cerr; cerr != nil {
					return
				}
				ips[i] = cur
				// containerd starts the sandbox once ADD returned: its vNIC appears then.
				time.Sleep(time.Duration(mathrand.IntN(500)) * time.Millisecond)
				errs[i] = hns.StartSandbox(n.Agent.SandboxDir, p.rt.NetNS)
			})
		}
		wg.Wait()
		seen := map[netip.Addr]bool{}
		var took []time.Duration
		for i, p := range pods {
			g.Expect(errs[i]).NotTo(HaveOccurred(), "ADD of %s", p.name)
			g.Expect(seen[ips[i]]).To(BeFalse(), "address %s given twice", ips[i])
			seen[ips[i]] = true
			n.waitForwarding(t, p)
			sent, received, err := simnode.Ping(p.ns, n.gateway, 1)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(received).To(Equal(sent), "%s reaches the gateway", p.name)
			g.Eventually(func(g Gomega) {
				pep := podEndpoint(g, p.name)
				g.Expect(pep.Status.VNICToForwarding).NotTo(BeNil())
				took = append(took, pep.Status.VNICToForwarding.Duration)
			}).WithTimeout(repair).Should(Succeed())
		}
		slices.Sort(took)
		t.Logf("vNIC to forwarding over %d Pods: p50 %v, p99 %v", len(took), took[len(took)/2], took[len(took)*99/100])
		for i, p := range pods {
			wg.Go(func() { errs[i] = n.CNI.DelNetworkList(ctx, n.ConfList, p.rt) })
		}
		wg.Wait()
		for i := range pods {
			g.Expect(errs[i]).NotTo(HaveOccurred())
		}
		g.Expect(n.leftovers(g)).To(BeEmpty())
	})

	t.Run("ADD returns before the vNIC exists; repeated ADD, CHECK and DEL work before and after it appears", func(t *testing.T) {
		g := NewWithT(t)
		p := n.newPod(t, "early", true)
		first := n.addOnly(t, p)
		port := podendpoint.EndpointName(p.sandbox)
		typ, err := n.OVS.Vsctl("get", "interface", port, "type", "ofport")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(strings.Fields(typ)).To(Equal([]string{`""`, "-1"}), "the port waits unbound: an internal port now would be a vNIC of OVS's own")
		g.Expect(strings.Join(n.podFlows(g), "\n")).To(ContainSubstring(podIP(g, first).String()), "the Pod's flows are in place before the vNIC")
		again := n.addOnly(t, p)
		g.Expect(again.IPs[0].Address.String()).To(Equal(first.IPs[0].Address.String()))
		g.Expect(n.CNI.CheckNetworkList(ctx, n.ConfList, p.rt)).To(Succeed(), "CHECK of a Pod waiting for its vNIC")
		g.Eventually(func(g Gomega) {
			c := meta.FindStatusCondition(podEndpoint(g, p.name).Status.Conditions, networkv1alpha1.ReadyCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(networkv1alpha1.WaitingForVNICReason))
		}).WithTimeout(repair).Should(Succeed())
		time.Sleep(1500 * time.Millisecond) // a drift-repair pass: it must leave the waiting Pod alone
		g.Expect(n.OVS.Vsctl("get", "interface", port, "type")).To(Equal(`""` + "\n"))

		n.startSandbox(t, p)
		n.waitForwarding(t, p)
		sent, received, err := simnode.Ping(p.ns, n.gateway, 1)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(received).To(Equal(sent))
		g.Expect(n.addOnly(t, p).IPs[0].Address.String()).To(Equal(first.IPs[0].Address.String()))
		g.Expect(n.CNI.CheckNetworkList(ctx, n.ConfList, p.rt)).To(Succeed())
		g.Eventually(func(g Gomega) {
			c := meta.FindStatusCondition(podEndpoint(g, p.name).Status.Conditions, networkv1alpha1.ReadyCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		}).WithTimeout(repair).Should(Succeed())
		g.Expect(n.CNI.DelNetworkList(ctx, n.ConfList, p.rt)).To(Succeed())
		g.Expect(n.leftovers(g)).To(BeEmpty())

		// DEL before the vNIC ever appeared leaves nothing either.
		q := n.newPod(t, "never-started", true)
		n.addOnly(t, q)
		g.Expect(n.CNI.DelNetworkList(ctx, n.ConfList, q.rt)).To(Succeed())
		g.Expect(n.leftovers(g)).To(BeEmpty())
	})

	t.Run("a vNIC that never appears is reported, and DEL cleans up", func(t *testing.T) {
		g := NewWithT(t)
		p := n.newPod(t, "no-vnic", true)
		n.addOnly(t, p)
		g.Eventually(func(g Gomega) {
			c := meta.FindStatusCondition(podEndpoint(g, p.name).Status.Conditions, networkv1alpha1.ReadyCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(networkv1alpha1.VNICMissingReason))
			g.Expect(c.Message).To(ContainSubstring("did not appear"))
		}).WithTimeout(framework.TestVNICTimeout + repair).Should(Succeed())
		g.Expect(n.CNI.DelNetworkList(ctx, n.ConfList, p.rt)).To(Succeed())
		g.Expect(n.leftovers(g)).To(BeEmpty())
	})

	t.Run("a hung HNS endpoint delete: DEL asks to try again, never piles up calls, and succeeds once HNS answers", func(t *testing.T) {
		g := NewWithT(t)
		p := n.newPod(t, "hung-delete", true)
		n.add(t, p)
		release := n.Agent.HNS.Hang(hns.OpDeleteEndpoint)
		defer release()
		before := n.Agent.HNS.Calls(hns.OpDeleteEndpoint)
		for range 2 {
			e := cniError(g, n.CNI.DelNetworkList(ctx, n.ConfList, p.rt))
			g.Expect(e.Code).To(BeEquivalentTo(cnitypes.ErrTryAgainLater), "%s", e.Msg)
		}
		g.Expect(n.Agent.HNS.Calls(hns.OpDeleteEndpoint)-before).To(Equal(1), "the retry joins the hung delete")
		release()
		g.Eventually(func() error { return n.CNI.DelNetworkList(ctx, n.ConfList, p.rt) }).WithTimeout(repair).Should(Succeed())
		g.Expect(n.leftovers(g)).To(BeEmpty())
	})

	t.Run("a workload container's ADD with CNI_NETNS=container:<sandbox> joins the sandbox", func(t *testing.T) {
		g := NewWithT(t)
		p := n.newPod(t, "shared-ns", true)
		first := n.add(t, p)
		work := p.runtimeConf("workload0002")
		work.NetNS = "container:" + p.sandbox
		work.Args = slices.DeleteFunc(slices.Clone(work.Args), func(kv [2]string) bool { return kv[0] == "K8S_POD_INFRA_CONTAINER_ID" })
		res, err := n.CNI.AddNetworkList(ctx, n.ConfList, work)
		g.Expect(err).NotTo(HaveOccurred())
		ip, err := types100FromResult(res)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ip.String() + "/24").To(Equal(first.IPs[0].Address.String()))
		g.Expect(n.CNI.DelNetworkList(ctx, n.ConfList, work)).To(Succeed())
		g.Expect(n.CNI.DelNetworkList(ctx, n.ConfList, p.rt)).To(Succeed())
		g.Expect(n.leftovers(g)).To(BeEmpty())
	})

	t.Run("repeated ADDs for the sandbox and a workload container are answered from what exists", func(t *testing.T) {
		g := NewWithT(t)
		p := n.newPod(t, "repeat", true)
		first := n.add(t, p)
		again := n.add(t, p)
		g.Expect(again.IPs[0].Address.String()).To(Equal(first.IPs[0].Address.String()))
		g.Expect(again.Interfaces[0].Mac).To(Equal(first.Interfaces[0].Mac))
		work := p.runtimeConf("workload0001")
		res, err := n.CNI.AddNetworkList(ctx, n.ConfList, work)
		g.Expect(err).NotTo(HaveOccurred())
		ip, err := types100FromResult(res)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ip.String() + "/24").To(Equal(first.IPs[0].Address.String()))
		g.Eventually(func(g Gomega) {
			g.Expect(podEndpoint(g, p.name).Status.AttachedContainers).To(ConsistOf(p.sandbox, "workload0001"))
		}).WithTimeout(repair).Should(Succeed())
		g.Expect(n.CNI.DelNetworkList(ctx, n.ConfList, work)).To(Succeed())
		sent, received, err := simnode.Ping(p.ns, n.gateway, 1)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(received).To(Equal(sent), "the workload container's DEL leaves the sandbox's network")
		g.Expect(n.CNI.DelNetworkList(ctx, n.ConfList, p.rt)).To(Succeed())
		g.Expect(n.leftovers(g)).To(BeEmpty())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(podEndpointErr(p.name))
		}).WithTimeout(repair).Should(BeTrue(), "the PodEndpoint goes with the attachment")
	})

	t.Run("CHECK fails after drift, and the agent repairs it", func(t *testing.T) {
		p := n.newPod(t, "drift", true)
		n.add(t, p)
		port := podendpoint.EndpointName(p.sandbox)
		for _, d := range []struct {
			name  string
			drift func(g Gomega)
			want  string
		}{
			{"OVS port deleted", func(g Gomega) { n.OVS.MustVsctl(t, "del-port", "br-int", port) }, "OVS port " + port + " is missing"},
			// The switch tells the agent at once (flow monitor), which puts them back: CHECK may
			// find them back already.
			{"Pod flows deleted", func(g Gomega) { n.OVS.MustOfctl(t, "del-flows", "br-int", "-O", "OpenFlow15", "in_port="+port) }, "flows are missing from the switch"},
			{"HNS endpoint deleted", func(g Gomega) {
				ep, err := n.Agent.HNS.GetEndpointByName(ctx, port)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(n.Agent.HNS.DeleteEndpoint(ctx, ep.ID)).To(Succeed())
			}, "HNS endpoint " + port + " is missing"},
		} {
			t.Run(d.name, func(t *testing.T) {
				g := NewWithT(t)
				g.Expect(n.CNI.CheckNetworkList(ctx, n.ConfList, p.rt)).To(Succeed())
				d.drift(g)
				if err := n.CNI.CheckNetworkList(ctx, n.ConfList, p.rt); err != nil || d.name != "Pod flows deleted" {
					e := cniError(g, err)
					g.Expect(e.Code).To(BeEquivalentTo(cnitypes.ErrInternal))
					g.Expect(e.Msg).To(ContainSubstring(d.want))
				}
				g.Eventually(func() error { return n.CNI.CheckNetworkList(ctx, n.ConfList, p.rt) }).WithTimeout(repair).Should(Succeed(), "repaired")
				sent, received, err := simnode.Ping(p.ns, n.gateway, 2)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(received).To(BeNumerically(">", 0), "the repaired Pod reaches the gateway (of %d)", sent)
			})
		}
		g := NewWithT(t)
		g.Expect(n.CNI.DelNetworkList(ctx, n.ConfList, p.rt)).To(Succeed())
		g.Expect(n.leftovers(g)).To(BeEmpty())
	})

	t.Run("GC detaches what the runtime no longer lists", func(t *testing.T) {
		g := NewWithT(t)
		keep, stale := n.newPod(t, "gc-keep", true), n.newPod(t, "gc-stale", true)
		n.add(t, keep)
		// The stale Pod was added by a runtime whose cache is gone: only the plugin's GC can find it.
		other := libcni.NewCNIConfigWithCacheDir(n.CNI.Path, t.TempDir(), nil)
		_, err := other.AddNetworkList(ctx, n.ConfList, stale.rt)
		g.Expect(err).NotTo(HaveOccurred())
		valid := []cnitypes.GCAttachment{{ContainerID: keep.sandbox, IfName: "eth0"}}
		g.Expect(n.CNI.GCNetworkList(ctx, n.ConfList, &libcni.GCArgs{ValidAttachments: valid})).To(Succeed())
		left := n.leftovers(g)
		g.Expect(left).To(ContainElement("attachment " + keep.sandbox))
		g.Expect(left).NotTo(ContainElement(ContainSubstring(stale.sandbox)), "no attachment or allocation of the stale Pod")
		g.Expect(left).NotTo(ContainElement(ContainSubstring(podendpoint.EndpointName(stale.sandbox))), "no endpoint or port of the stale Pod")
		// A Pod's flows: 5, and 7 that check its connections' incarnation (pipeline.PodFlows).
		g.Expect(n.podFlows(g)).To(HaveLen(12), "only the kept Pod's flows")

		// Orphans of an agent that crashed half-way: an endpoint, an OVS port and an allocation with
		// winnet's marks but no attachment. GC removes them too.
		w := &networkv1alpha1.WindowsNodeNetwork{}
		g.Expect(server.Client.Get(ctx, client.ObjectKey{Name: n.Name}, w)).To(Succeed())
		_, err = n.Agent.HNS.CreateEndpoint(ctx, hns.EndpointSpec{Name: "winnet-deadbeef", NetworkID: w.Status.HNSNetworkID, IP: n.PodCIDR.Addr().Next().Next()})
		g.Expect(err).NotTo(HaveOccurred())
		n.OVS.MustVsctl(t, "add-port", "br-int", "winnet-0badf00d", "--", "set", "interface", "winnet-0badf00d", "type=internal",
			"--", "set", "port", "winnet-0badf00d", "external_ids:winnet-owner=winnet")
		_, err = n.Agent.Pods.IPAM.Allocate(ctx, ipam.Request{ContainerID: "orphan", IfName: "eth0", Subnet: n.PodCIDR})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.leftovers(g)).To(ContainElements("HNS endpoint winnet-deadbeef", "OVS port winnet-0badf00d", ContainSubstring("for orphan")))
		g.Expect(n.CNI.GCNetworkList(ctx, n.ConfList, &libcni.GCArgs{ValidAttachments: valid})).To(Succeed())
		g.Expect(n.leftovers(g)).NotTo(ContainElements(ContainSubstring("winnet-deadbeef"), ContainSubstring("winnet-0badf00d"), ContainSubstring("orphan")))

		g.Expect(n.CNI.DelNetworkList(ctx, n.ConfList, keep.rt)).To(Succeed())
		g.Expect(n.leftovers(g)).To(BeEmpty())
	})

	t.Run("HNS failing: ADD is rolled back; a DEL that fails half-way is finished by the agent", func(t *testing.T) {
		g := NewWithT(t)
		p := n.newPod(t, "hns-fails", true)
		n.Agent.HNS.FailNext(hns.OpAttachEndpoint, 1, nil)
		e := cniError(g, func() error { _, err := n.CNI.AddNetworkList(ctx, n.ConfList, p.rt); return err }())
		g.Expect(e.Code).To(BeEquivalentTo(cnitypes.ErrInternal))
		g.Expect(e.Msg).To(ContainSubstring("attaching HNS endpoint"))
		g.Expect(n.leftovers(g)).To(BeEmpty(), "address, endpoint, port and flows rolled back")

		n.add(t, p)
		g.Eventually(func(g Gomega) { podEndpoint(g, p.name) }).WithTimeout(repair).Should(Succeed())
		n.Agent.HNS.FailNext(hns.OpDeleteEndpoint, 1, nil)
		e = cniError(g, n.CNI.DelNetworkList(ctx, n.ConfList, p.rt))
		g.Expect(e.Msg).To(ContainSubstring("deleting HNS endpoint"))
		g.Eventually(n.leftovers).WithTimeout(repair).Should(BeEmpty(), "the agent finishes the DEL")
		g.Eventually(func() bool {
			return apierrors.IsNotFound(podEndpointErr(p.name))
		}).WithTimeout(repair).Should(BeTrue())
		g.Expect(n.CNI.DelNetworkList(ctx, n.ConfList, p.rt)).To(Succeed(), "the runtime's retry finds nothing left")
	})

	t.Run("Pods keep their network through an ovs-vswitchd restart", func(t *testing.T) {
		g := NewWithT(t)
		p := n.newPod(t, "ovs-restart", true)
		n.add(t, p)
		g.Expect(n.OVS.RestartVswitchd()).To(Succeed())
		g.Eventually(func(g Gomega) {
			sent, received, err := simnode.Ping(p.ns, n.gateway, 1)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(received).To(Equal(sent))
		}).WithTimeout(converge).Should(Succeed(), "the Pod reaches the gateway again")
		g.Eventually(func() error { return n.CNI.CheckNetworkList(ctx, n.ConfList, p.rt) }).WithTimeout(repair).Should(Succeed())
		g.Expect(n.CNI.DelNetworkList(ctx, n.ConfList, p.rt)).To(Succeed())
		g.Expect(n.leftovers(g)).To(BeEmpty())
	})

	t.Run("ADD succeeds at once while the API server is stopped; the PodEndpoint is written when it is back", func(t *testing.T) {
		g := NewWithT(t)
		p := n.newPod(t, "offline", true)
		resume := stopAPIServer(t)
		start := time.Now()
		res := n.add(t, p)
		took := time.Since(start)
		sent, received, err := simnode.Ping(p.ns, n.gateway, 1)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(received).To(Equal(sent))
		g.Expect(took).To(BeNumerically("<", 5*time.Second), "ADD does not wait for the API server")
		resume()
		g.Eventually(func(g Gomega) {
			pep := podEndpoint(g, p.name)
			g.Expect(pep.Spec.IPs).To(ConsistOf(BeEquivalentTo(res.IPs[0].Address.String())))
			g.Expect(readyStatus(pep)).To(Equal(metav1.ConditionTrue))
		}).WithTimeout(converge).Should(Succeed())
		g.Expect(n.CNI.DelNetworkList(ctx, n.ConfList, p.rt)).To(Succeed())
		g.Expect(n.leftovers(g)).To(BeEmpty())
	})

	t.Run("a deleted Pod's network is torn down without DEL", func(t *testing.T) {
		g := NewWithT(t)
		p := n.newPod(t, "vanish", true)
		n.add(t, p)
		g.Eventually(func(g Gomega) { podEndpoint(g, p.name) }).WithTimeout(repair).Should(Succeed())
		g.Expect(server.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: p.name}}, client.GracePeriodSeconds(0))).To(Succeed())
		g.Eventually(n.leftovers).WithTimeout(repair).Should(BeEmpty(), "address released, endpoint, port and flows removed")
		g.Eventually(func() bool {
			return apierrors.IsNotFound(podEndpointErr(p.name))
		}).WithTimeout(repair).Should(BeTrue())
		g.Expect(n.CNI.DelNetworkList(ctx, n.ConfList, p.rt)).To(Succeed(), "the late DEL finds nothing and succeeds")
	})

	// Agents before "<node>.<Pod UID>" named PodEndpoints after their Pod. After an upgrade the agent
	// adopts such a record: it keeps its own, removes the old one (finalizer first), and leaves the
	// Pod's network alone. One whose Pod is gone is removed too: no finalizer stays behind to hang a
	// namespace's deletion.
	t.Run("PodEndpoints named after their Pod by an earlier agent are adopted without re-plumbing", func(t *testing.T) {
		g := NewWithT(t)
		p := n.newPod(t, "legacy", true)
		n.add(t, p)
		var current *networkv1alpha1.PodEndpoint
		g.Eventually(func(g Gomega) {
			current = podEndpoint(g, p.name)
			g.Expect(readyStatus(current)).To(Equal(metav1.ConditionTrue))
		}).WithTimeout(repair).Should(Succeed())
		g.Expect(current.Name).To(Equal(n.Name+"."+p.uid), "named <node>.<Pod UID>")
		attached, ok := n.Agent.Pods.Pods.Store().Get(p.sandbox)
		g.Expect(ok).To(BeTrue())

		legacy := func(namespace, pod string) *networkv1alpha1.PodEndpoint {
			old := &networkv1alpha1.PodEndpoint{
				ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: namespace, Finalizers: []string{podendpoint.Finalizer}},
				Spec:       *current.Spec.DeepCopy(),
			}
			old.Spec.PodName = pod
			g.Expect(server.Client.Create(ctx, old)).To(Succeed())
			return old
		}
		old := legacy("default", p.name)
		orphan := legacy("default", "legacy-gone") // its Pod went while no agent ran
		for _, o := range []*networkv1alpha1.PodEndpoint{old, orphan} {
			g.Eventually(func() bool {
				return apierrors.IsNotFound(server.Client.Get(ctx, client.ObjectKeyFromObject(o), &networkv1alpha1.PodEndpoint{}))
			}).WithTimeout(repair).Should(BeTrue(), "the agent removes %s, finalizer and all", o.Name)
		}

		after := podEndpoint(g, p.name)
		g.Expect(after.UID).To(Equal(current.UID), "the agent's own record stays")
		g.Expect(after.Status.OFPort).To(Equal(current.Status.OFPort))
		g.Expect(after.Status.HNSEndpointID).To(Equal(current.Status.HNSEndpointID))
		now, ok := n.Agent.Pods.Pods.Store().Get(p.sandbox)
		g.Expect(ok).To(BeTrue())
		g.Expect(now.Created).To(Equal(attached.Created), "the attachment was not made again")
		g.Expect(now.IP).To(Equal(attached.IP))
		sent, received, err := simnode.Ping(p.ns, n.gateway, 1)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(received).To(Equal(sent), "the Pod's network never went")
		g.Expect(n.CNI.DelNetworkList(ctx, n.ConfList, p.rt)).To(Succeed())
		g.Expect(n.leftovers(g)).To(BeEmpty())
	})
}

// types100FromResult returns the address of a CNI result.
func types100FromResult(res cnitypes.Result) (netip.Addr, error) {
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(cur.IPs) != 1 {
		return netip.Addr{}, fmt.Errorf("result has %d addresses", len(cur.IPs))
	}
	ip, _ := netip.AddrFromSlice(cur.IPs[0].Address.IP.To4())
	return ip, nil
}
