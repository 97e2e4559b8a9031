//go:build !windows

package helm

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/winnet-io/winnet/controllers/cluster"
	"github.com/winnet-io/winnet/test/framework"
)

// nodePolicy is the chart's admission policy that limits winnet-controller's and the uninstall hook's
// Node writes to the flannel record.
const nodePolicy = "winnet-node-flannel-record"

// installUninstallIdentity creates the uninstall hook's ServiceAccount and RBAC as the chart renders them
// (helm creates them only when `helm uninstall` runs the hook; the Job itself is not created) and returns
// a token of that ServiceAccount.
func installUninstallIdentity(ctx context.Context, t *testing.T, server *framework.APIServer) string {
	t.Helper()
	manifest, stderr, err := runHelm(t, "template", "winnet", chartDir(), "--namespace", ns, "--show-only", "templates/uninstall-hook.yaml")
	if err != nil {
		t.Fatalf("helm template --show-only templates/uninstall-hook.yaml: %v\n%s", err, stderr)
	}
	var kinds []string
	for _, o := range splitManifest(t, manifest) {
		if o.Kind == "Job" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(o.YAML, &u.Object); err != nil {
			t.Fatalf("decoding the chart's %s %s: %v", o.Kind, o.Name, err)
		}
		if err := server.Client.Create(ctx, u); err != nil {
			t.Fatalf("creating the chart's %s %s: %v", o.Kind, o.Name, err)
		}
		kinds = append(kinds, o.Kind)
	}
	if len(kinds) != 5 {
		t.Fatalf("the uninstall hook renders %v, want its ServiceAccount, ClusterRole, ClusterRoleBinding, Role and RoleBinding", kinds)
	}
	return requestToken(ctx, t, server, "winnet-uninstall", nil)
}

// testNodeAndLeaseRefusals proves, each case on its own, that identity (a client with the token of a
// winnet ServiceAccount other than the agent's) can change nothing on a Node but the flannel record's
// annotations, and no Lease outside the release namespace. node is a Node the test may write.
func testNodeAndLeaseRefusals(ctx context.Context, t *testing.T, admin, identity client.Client, user, node string) {
	// forbidden matches a refusal by RBAC (the API server's authorizer) or by the chart's Node policy.
	forbidden := func(err error) error {
		switch {
		case err == nil:
			return errors.New("allowed")
		case !apierrors.IsForbidden(err):
			return fmt.Errorf("not refused as Forbidden: %w", err)
		}
		return nil
	}
	// unchanged fails when the Node differs from before in anything but its resourceVersion and
	// managedFields: a refused write changes nothing.
	unchanged := func(g Gomega, before *corev1.Node) {
		after := &corev1.Node{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: node}, after)).To(Succeed())
		g.Expect(after.Labels).To(Equal(before.Labels))
		g.Expect(after.Annotations).To(Equal(before.Annotations))
		g.Expect(after.Spec).To(Equal(before.Spec))
		g.Expect(after.Status).To(Equal(before.Status))
	}
	get := func(g Gomega) *corev1.Node {
		n := &corev1.Node{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
		return n
	}
	merge := func(patch string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(patch)) }

	// Leases outside the release namespace: kube-controller-manager's leader election in kube-system
	// and a node heartbeat in kube-node-lease.
	for _, lease := range []client.ObjectKey{{Namespace: "kube-system", Name: "kube-controller-manager"}, {Namespace: "kube-node-lease", Name: node}} {
		t.Run("no Lease "+lease.String(), func(t *testing.T) {
			g := NewWithT(t)
			existing := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lease.Namespace, Name: lease.Name},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("the-real-holder")}}
			if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lease.Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			if err := admin.Create(ctx, existing); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			g.Expect(forbidden(identity.Get(ctx, lease, &coordinationv1.Lease{}))).To(Succeed(), "get")
			g.Expect(forbidden(identity.Patch(ctx, existing.DeepCopy(), merge(`{"spec":{"holderIdentity":"`+user+`"}}`)))).To(Succeed(), "patch")
			taken := existing.DeepCopy()
			g.Expect(admin.Get(ctx, lease, taken)).To(Succeed())
			taken.Spec.HolderIdentity = ptr.To(user)
			g.Expect(forbidden(identity.Update(ctx, taken))).To(Succeed(), "update")
			g.Expect(forbidden(identity.Delete(ctx, existing.DeepCopy()))).To(Succeed(), "delete")
			g.Expect(forbidden(identity.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lease.Namespace, Name: "forged-" + lease.Name}}))).
				To(Succeed(), "create")
			g.Expect(admin.Get(ctx, lease, taken)).To(Succeed())
			g.Expect(*taken.Spec.HolderIdentity).To(Equal("the-real-holder"))
		})
	}

	// The Node itself: labels, taints, unschedulable, other annotations, status, creation and deletion,
	// through the Node and through nodes/status.
	writes := []struct {
		name, patch string
		// spec: the patch changes the spec, which the status subresource ignores.
		spec bool
	}{
		{name: "labels", patch: `{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`},
		{name: "a label removed", patch: `{"metadata":{"labels":{"kubernetes.io/os":null}}}`},
		{name: "taints", patch: `{"spec":{"taints":[{"key":"evil","effect":"NoExecute"}]}}`, spec: true},
		{name: "unschedulable", patch: `{"spec":{"unschedulable":true}}`, spec: true},
		{name: "the Pod CIDR", patch: `{"spec":{"podCIDR":"10.99.0.0/24","podCIDRs":["10.99.0.0/24"]}}`, spec: true},
		{name: "an annotation outside the flannel prefix", patch: `{"metadata":{"annotations":{"node.alpha.kubernetes.io/ttl":"0"}}}`},
		{name: "an annotation of another prefix", patch: `{"metadata":{"annotations":{"flannel.example.com/public-ip":"203.0.113.1"}}}`},
		{name: "the flannel record's prefix", patch: `{"metadata":{"annotations":{"network.winnet.io/flannel-record":"kubernetes.io"}}}`},
		{name: "finalizers", patch: `{"metadata":{"finalizers":["example.com/keep"]}}`},
		{name: "the addresses", patch: `{"status":{"addresses":[{"type":"InternalIP","address":"203.0.113.66"}]}}`},
	}
	for _, w := range writes {
		t.Run("Node "+w.name+" through the Node", func(t *testing.T) {
			g := NewWithT(t)
			before := get(g)
			g.Expect(forbidden(identity.Patch(ctx, before.DeepCopy(), merge(w.patch)))).To(Succeed())
			unchanged(g, before)
		})
		t.Run("Node "+w.name+" through nodes/status", func(t *testing.T) {
			g := NewWithT(t)
			before := get(g)
			err := identity.Status().Patch(ctx, before.DeepCopy(), merge(w.patch))
			if w.spec {
				// The status subresource keeps the spec as it is (the API server's Node status strategy)
				// before admission: the policy sees no change, and nothing changes.
				g.Expect(err == nil || apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
			} else {
				g.Expect(forbidden(err)).To(Succeed())
				g.Expect(err.Error()).To(ContainSubstring("ValidatingAdmissionPolicy '" + nodePolicy + "'"))
			}
			unchanged(g, before)
		})
	}
	t.Run("no Node created or deleted", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(forbidden(identity.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "forged-node"}}))).To(Succeed(), "create")
		g.Expect(forbidden(identity.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}))).To(Succeed(), "delete")
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: node}, &corev1.Node{})).To(Succeed())
	})
}

// testFlannelRecordWrites proves that identity may write (publish, or remove) a flannel record under
// the default prefix through nodes/status, and that the API server keeps the annotations it writes there.
func testFlannelRecordWrites(ctx context.Context, t *testing.T, admin, identity client.Client, node string) {
	g := NewWithT(t)
	k := &corev1.Node{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Name: node}, k)).To(Succeed())
	record := `{"metadata":{"annotations":{"flannel.alpha.coreos.com/public-ip":"192.0.2.7","` + cluster.FlannelRecordAnnotation + `":"flannel.alpha.coreos.com"}}}`
	// What the API server stored is read from each patch's response, not from a later GET: the running
	// winnet-controller withdraws a record it finds on a Node that should not carry one, and may do so
	// between the patch and the GET.
	patched := k.DeepCopy()
	g.Eventually(func() error {
		return identity.Status().Patch(ctx, patched, client.RawPatch(types.MergePatchType, []byte(record)))
	}, 10*time.Second, 200*time.Millisecond).Should(Succeed(), "the admission policy may take a moment to become active")
	g.Expect(patched.Annotations).To(HaveKeyWithValue("flannel.alpha.coreos.com/public-ip", "192.0.2.7"))
	g.Expect(patched.Annotations).To(HaveKeyWithValue(cluster.FlannelRecordAnnotation, "flannel.alpha.coreos.com"))
	withdraw := `{"metadata":{"annotations":{"flannel.alpha.coreos.com/public-ip":null,"` + cluster.FlannelRecordAnnotation + `":null}}}`
	withdrawn := patched.DeepCopy()
	g.Expect(identity.Status().Patch(ctx, withdrawn, client.RawPatch(types.MergePatchType, []byte(withdraw)))).To(Succeed())
	g.Expect(withdrawn.Annotations).NotTo(HaveKey("flannel.alpha.coreos.com/public-ip"))
	g.Expect(withdrawn.Annotations).NotTo(HaveKey(cluster.FlannelRecordAnnotation))
	g.Expect(admin.Get(ctx, client.ObjectKey{Name: node}, k)).To(Succeed())
	g.Expect(k.Annotations).NotTo(HaveKey("flannel.alpha.coreos.com/public-ip"))
}
