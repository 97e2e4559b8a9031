package agent

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/preflight"
)

// TestPreflightCondition: False with the failed checks and their fixes when one failed, True with
// the warnings when one warned, True when all passed (SKIP counts for nothing).
func TestPreflightCondition(t *testing.T) {
	g := NewWithT(t)
	rep := preflight.Report{Results: []preflight.Result{
		{Name: "hns", Status: preflight.Pass, Detail: "HNS 9.2 answered"},
		{Name: "windows-build", Status: preflight.Skip, Detail: "not checked on this platform"},
	}}
	c := PreflightCondition(rep)
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.Reason).To(Equal(networkv1alpha1.PreflightPassedReason))
	g.Expect(c.Message).To(Equal("1 passed, 0 warnings, 0 failed, 1 not checked on this platform. Run `winnet-agent preflight` on the node for every check."))

	rep.Results = append(rep.Results, preflight.Result{Name: "clock", Status: preflight.Warn, Detail: "40s off", Fix: "resync"})
	c = PreflightCondition(rep)
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.Reason).To(Equal(networkv1alpha1.PreflightWarningsReason))
	g.Expect(c.Message).To(ContainSubstring("WARN clock: 40s off (fix: resync)"))

	rep.Results = append(rep.Results, preflight.Result{Name: "kube-proxy", Status: preflight.Fail, Detail: "Pod kube-system/kube-proxy-1", Fix: "nodeSelector"})
	c = PreflightCondition(rep)
	g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(c.Reason).To(Equal(networkv1alpha1.PreflightFailedReason))
	g.Expect(c.Message).To(ContainSubstring("FAIL kube-proxy: Pod kube-system/kube-proxy-1 (fix: nodeSelector)"))
}
