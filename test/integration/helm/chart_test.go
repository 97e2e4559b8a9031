package helm

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/winnet-io/winnet"
	"github.com/winnet-io/winnet/test/framework"
)

func TestChartLints(t *testing.T) {
	g := NewWithT(t)
	for _, values := range []string{"", filepath.Join("testdata", "custom-values.yaml")} {
		args := []string{"lint", "--strict", chartDir()}
		if values != "" {
			abs, err := filepath.Abs(values)
			g.Expect(err).NotTo(HaveOccurred())
			args = append(args, "--values", abs)
		}
		out, stderr, err := runHelm(t, args...)
		g.Expect(err).NotTo(HaveOccurred(), "helm lint:\n%s%s", out, stderr)
		g.Expect(out).To(ContainSubstring("1 chart(s) linted, 0 chart(s) failed"))
	}
}

// TestChartVersionIsWinnetVersion: the chart's version and appVersion are winnet's release (VERSION),
// and the images default to that tag (the agent's also serves the OVS container).
func TestChartVersionIsWinnetVersion(t *testing.T) {
	g := NewWithT(t)
	b, err := os.ReadFile(filepath.Join(chartDir(), "Chart.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	g.Expect(yaml.Unmarshal(b, &chart)).To(Succeed())
	g.Expect(chart.Version).To(Equal(winnet.Version), "Chart.yaml's version is VERSION's")
	g.Expect(chart.AppVersion).To(Equal(winnet.Version), "Chart.yaml's appVersion is VERSION's")

	manifest, err := renderChart(t, writeValues(t, "ovs: {enabled: true}"))
	g.Expect(err).NotTo(HaveOccurred())
	objs := splitManifest(t, manifest)
	controller := &appsv1.Deployment{}
	find(t, objs, "Deployment", "winnet-controller", controller)
	g.Expect(controller.Spec.Template.Spec.Containers).To(HaveEach(HaveField("Image", "ghcr.io/winnet-io/winnet-controller:"+winnet.Version)))
	agent := &appsv1.DaemonSet{}
	find(t, objs, "DaemonSet", "winnet-agent", agent)
	pod := agent.Spec.Template.Spec
	g.Expect(append(pod.InitContainers, pod.Containers...)).To(HaveEach(HaveField("Image", "ghcr.io/winnet-io/winnet-windows:"+winnet.Version)))
}

// TestTemplateGolden compares helm template with testdata/*.golden; go test -update rewrites them.
func TestTemplateGolden(t *testing.T) {
	cases := map[string]string{
		"default": "",
		"custom":  filepath.Join("testdata", "custom-values.yaml"),
	}
	for name, values := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			var files []string
			if values != "" {
				files = append(files, values)
			}
			got, err := renderChart(t, files...)
			g.Expect(err).NotTo(HaveOccurred())
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				g.Expect(os.WriteFile(golden, []byte(got), 0o644)).To(Succeed())
			}
			want, err := os.ReadFile(golden)
			g.Expect(err).NotTo(HaveOccurred(), "run 'go test ./test/integration/helm/ -run TestTemplateGolden -update' to create it")
			g.Expect(got).To(Equal(string(want)), "helm template differs from %s; if intended, rerun with -update and review the diff", golden)
		})
	}
}

// TestTemplateWorkloads checks what the install depends on in the default rendering, beyond the golden
// text: HostProcess as SYSTEM on the host network, the node name from the downward API, Linux/Windows
// placement, leader election, the CNI install and the agent's options.
func TestTemplateWorkloads(t *testing.T) {
	g := NewWithT(t)
	manifest, err := renderChart(t)
	g.Expect(err).NotTo(HaveOccurred())
	objs := splitManifest(t, manifest)

	ds := &appsv1.DaemonSet{}
	find(t, objs, "DaemonSet", "winnet-agent", ds)
	pod := ds.Spec.Template.Spec
	g.Expect(pod.SecurityContext.WindowsOptions).NotTo(BeNil())
	g.Expect(*pod.SecurityContext.WindowsOptions.HostProcess).To(BeTrue())
	g.Expect(*pod.SecurityContext.WindowsOptions.RunAsUserName).To(Equal(`NT AUTHORITY\SYSTEM`))
	g.Expect(pod.HostNetwork).To(BeTrue())
	g.Expect(pod.NodeSelector).To(HaveKeyWithValue("kubernetes.io/os", "windows"))
	g.Expect(pod.ServiceAccountName).To(Equal("winnet-agent"))
	g.Expect(pod.InitContainers).To(HaveLen(1))
	g.Expect(pod.InitContainers[0].Command).To(ContainElement(ContainSubstring("install-cni.ps1")))
	g.Expect(pod.Containers).To(HaveLen(1), "the OVS container is off by default")
	agent := pod.Containers[0]
	g.Expect(agent.Env).To(ContainElement(And(
		HaveField("Name", "NODE_NAME"),
		HaveField("ValueFrom.FieldRef.FieldPath", "spec.nodeName"))))
	for _, flag := range []string{"--ovsdb=", "--ovs-rundir=", "--metrics-bind-address=", "--health-probe-bind-address=", "--zap-log-level=", "--cni-conf-dir=", "--cni-shim-path="} {
		g.Expect(agent.Args).To(ContainElement(HavePrefix(flag)))
	}
	g.Expect(agent.Args).NotTo(ContainElement(HavePrefix("--cni-bin-dir")), "the agent runs no CNI plugin")
	g.Expect(pod.InitContainers[0].Env).To(ContainElement(HaveField("Name", "WINNET_CNI_BIN_DIR")), "install-cni copies the shim there")
	// The image ships, and install-cni installs, the shim alone: no IPAM plugin.
	installCNI, err := os.ReadFile(filepath.Join(chartDir(), "..", "image", "windows", "install-cni.ps1"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(installCNI)).To(ContainSubstring("foreach ($name in @('winnet-cni.exe'))"))
	dockerfile, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "Dockerfile.windows"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(dockerfile)).To(And(ContainSubstring("bin/windows/winnet-cni.exe"), Not(ContainSubstring("host-local"))))

	cm := &corev1.ConfigMap{}
	find(t, objs, "ConfigMap", "winnet-agent-config", cm)
	g.Expect(cm.Data).To(HaveKeyWithValue("cni-bin-dir", `C:\opt\cni\bin`))
	g.Expect(cm.Data).To(HaveKeyWithValue("cni-conf-dir", `C:\etc\cni\net.d`))
	g.Expect(cm.Data).To(HaveKeyWithValue("cni-shim-path", `C:\opt\cni\bin\winnet-cni.exe`), "the agent removes the shim install-cni installed")
	// The agent writes the conflist itself once the node network is Ready: the chart installs none.
	for key := range cm.Data {
		g.Expect(key).NotTo(HaveSuffix(".conflist"))
	}
	g.Expect(agent.Args).NotTo(ContainElement(HavePrefix("--cni-socket")), "the default pipe is the shim's default")
	// Every ConfigMap key the DaemonSet references exists.
	for _, c := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				g.Expect(e.ValueFrom.ConfigMapKeyRef.Name).To(Equal(cm.Name))
				g.Expect(cm.Data).To(HaveKey(e.ValueFrom.ConfigMapKeyRef.Key), "container %s, env %s", c.Name, e.Name)
			}
		}
	}

	dep := &appsv1.Deployment{}
	find(t, objs, "Deployment", "winnet-controller", dep)
	g.Expect(dep.Spec.Template.Spec.NodeSelector).To(HaveKeyWithValue("kubernetes.io/os", "linux"))
	g.Expect(dep.Spec.Template.Spec.ServiceAccountName).To(Equal("winnet-controller"))
	g.Expect(dep.Spec.Template.Spec.Containers[0].Args).To(ContainElements(
		"--leader-elect=true", "--leader-election-namespace=winnet-system",
		"--cluster-cidrs=10.244.0.0/16", "--service-cidrs=10.96.0.0/12",
		"--windows-node-selector=kubernetes.io/os=windows"))

	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	find(t, objs, "ValidatingAdmissionPolicy", "winnet-agent-own-node", vap)
	g.Expect(vap.Spec.MatchConditions).To(ContainElement(HaveField("Expression",
		`request.userInfo.username == "system:serviceaccount:winnet-system:winnet-agent"`)))
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	find(t, objs, "ValidatingAdmissionPolicyBinding", "winnet-agent-own-node", binding)
	g.Expect(binding.Spec.PolicyName).To(Equal(vap.Name))
	g.Expect(binding.Spec.ValidationActions).To(Equal([]admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}))

	// The OVS container and the custom CNI settings appear when asked for.
	custom, err := renderChart(t, filepath.Join("testdata", "custom-values.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	objs = splitManifest(t, custom)
	ds = &appsv1.DaemonSet{}
	find(t, objs, "DaemonSet", "winnet-agent", ds)
	g.Expect(ds.Spec.Template.Spec.Containers).To(ContainElement(And(
		HaveField("Name", "openvswitch"), HaveField("Image", "registry.example.com:5000/openvswitch/windows:3.4.0"))))
	g.Expect(ds.Spec.Template.Spec.ServiceAccountName).To(Equal("winnet-node-agent"))
	g.Expect(ds.Spec.Template.Spec.Containers[0].Args).To(ContainElement(`--cni-socket=\\.\pipe\winnet-cni-custom`))
	cm = &corev1.ConfigMap{}
	find(t, objs, "ConfigMap", "winnet-agent-config", cm)
	g.Expect(cm.Data).To(HaveKeyWithValue("cni-conf-dir", `D:\cni\conf`))
	g.Expect(cm.Data).To(HaveKeyWithValue("cni-shim-path", `D:\cni\bin\winnet-cni.exe`))

	// Without cni.install winnet installed no shim: the agent is given none to remove.
	noInstall, err := renderChart(t, writeValues(t, "cni: {install: false}"))
	g.Expect(err).NotTo(HaveOccurred())
	cm = &corev1.ConfigMap{}
	find(t, splitManifest(t, noInstall), "ConfigMap", "winnet-agent-config", cm)
	g.Expect(cm.Data).To(HaveKeyWithValue("cni-shim-path", ""))
	g.Expect(agent.Env).NotTo(ContainElement(HaveField("Name", "WINNET_APISERVER")), "by default the start script uses KUBERNETES_SERVICE_HOST")

	// With agent.apiServer the start script writes the agent's kubeconfig for that server, not for the
	// kubernetes Service's ClusterIP, which winnet itself provides on the node.
	withServer, err := renderChart(t, writeValues(t, "agent: {apiServer: 'https://192.168.77.2:6443'}"))
	g.Expect(err).NotTo(HaveOccurred())
	ds = &appsv1.DaemonSet{}
	find(t, splitManifest(t, withServer), "DaemonSet", "winnet-agent", ds)
	g.Expect(ds.Spec.Template.Spec.Containers[0].Env).To(ContainElement(And(
		HaveField("Name", "WINNET_APISERVER"), HaveField("Value", "https://192.168.77.2:6443"))))
	script, err := os.ReadFile(filepath.Join(chartDir(), "..", "image", "windows", "run-agent.ps1"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(script)).To(And(ContainSubstring("$server = $env:WINNET_APISERVER"), ContainSubstring("server: $server")))
}

// TestChartRBACMatchesGenerated: the chart's ClusterRoles and the controller's Role are config/rbac's
// generated roles, and the controller may write Leases in the release namespace only.
func TestChartRBACMatchesGenerated(t *testing.T) {
	g := NewWithT(t)
	manifest, err := renderChart(t)
	g.Expect(err).NotTo(HaveOccurred())
	objs := splitManifest(t, manifest)
	// generated returns the rules of the generated role of kind in config/rbac/<component>/role.yaml.
	generated := func(component, kind string) []rbacv1.PolicyRule {
		b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "config", "rbac", component, "role.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		for _, o := range splitManifest(t, string(b)) {
			if o.Kind == kind {
				role := &rbacv1.ClusterRole{}
				g.Expect(yaml.UnmarshalStrict(o.YAML, role)).To(Succeed())
				return role.Rules
			}
		}
		t.Fatalf("config/rbac/%s/role.yaml has no %s", component, kind)
		return nil
	}
	controller := &rbacv1.ClusterRole{}
	find(t, objs, "ClusterRole", "winnet-controller", controller)
	g.Expect(controller.Rules).To(Equal(generated("controller", "ClusterRole")))
	g.Expect(controller.Rules).NotTo(ContainElement(HaveField("Resources", ContainElement("leases"))), "no Lease cluster-wide")
	controllerNS := &rbacv1.Role{}
	find(t, objs, "Role", "winnet-controller", controllerNS)
	g.Expect(controllerNS.Namespace).To(Equal("winnet-system"), "the release namespace")
	g.Expect(controllerNS.Rules).To(Equal(generated("controller", "Role")))
	binding := &rbacv1.RoleBinding{}
	find(t, objs, "RoleBinding", "winnet-controller", binding)
	g.Expect(binding.RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "winnet-controller"}))
	g.Expect(binding.Subjects).To(Equal([]rbacv1.Subject{{Kind: "ServiceAccount", Name: "winnet-controller", Namespace: "winnet-system"}}))

	agent := &rbacv1.ClusterRole{}
	find(t, objs, "ClusterRole", "winnet-agent", agent)
	g.Expect(agent.Rules).To(Equal(generated("agent", "ClusterRole")))
	g.Expect(agent.Rules).NotTo(ContainElement(HaveField("Resources", ContainElement("leases"))), "no Lease cluster-wide")
	agentNS := &rbacv1.Role{}
	find(t, objs, "Role", "winnet-agent", agentNS)
	g.Expect(agentNS.Namespace).To(Equal("winnet-system"), "the release namespace")
	g.Expect(agentNS.Rules).To(Equal(generated("agent", "Role")))
	agentBinding := &rbacv1.RoleBinding{}
	find(t, objs, "RoleBinding", "winnet-agent", agentBinding)
	g.Expect(agentBinding.RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "winnet-agent"}))
	g.Expect(agentBinding.Subjects).To(Equal([]rbacv1.Subject{{Kind: "ServiceAccount", Name: "winnet-agent", Namespace: "winnet-system"}}))

	// The metrics endpoint's reviews (config/rbac/metrics-auth) are granted to a component only when
	// its metrics are on: with the defaults (off) neither ClusterRole may create a TokenReview or a
	// SubjectAccessReview.
	reviews := generated("metrics-auth", "ClusterRole")
	g.Expect(reviews).To(ConsistOf(
		HaveField("Resources", ConsistOf("tokenreviews")), HaveField("Resources", ConsistOf("subjectaccessreviews"))))
	review := HaveField("Resources", ContainElement(BeElementOf("tokenreviews", "subjectaccessreviews")))
	g.Expect(agent.Rules).NotTo(ContainElement(review), "agent, metrics off")
	g.Expect(controller.Rules).NotTo(ContainElement(review), "controller, metrics off")
	for _, tc := range []struct{ values, agentOn, controllerOn string }{
		{"agent: {metricsPort: 9443}", "agent", ""},
		{"controller: {metricsPort: 8443}", "", "controller"},
		{"{agent: {metricsPort: 9443}, controller: {metricsPort: 8443}}", "agent", "controller"},
	} {
		manifest, err := renderChart(t, writeValues(t, tc.values))
		g.Expect(err).NotTo(HaveOccurred(), tc.values)
		objs := splitManifest(t, manifest)
		for _, c := range []struct{ component, on string }{{"agent", tc.agentOn}, {"controller", tc.controllerOn}} {
			role := &rbacv1.ClusterRole{}
			find(t, objs, "ClusterRole", "winnet-"+c.component, role)
			want := generated(c.component, "ClusterRole")
			if c.on != "" {
				want = append(want, reviews...)
			}
			g.Expect(role.Rules).To(Equal(want), "%s with %s", c.component, tc.values)
		}
	}
}

// TestSchemaRejectsInvalidValues: values.schema.json turns wrong values into an error naming the field.
func TestSchemaRejectsInvalidValues(t *testing.T) {
	cases := []struct {
		name, values, want string
	}{
		{"replicas not an integer", "controller: {replicas: two}", "/controller/replicas"},
		{"replicas zero", "controller: {replicas: 0}", "/controller/replicas"},
		{"cluster CIDR without prefix", "controller: {clusterCIDRs: [10.244.0.0]}", "/controller/clusterCIDRs/0"},
		{"cluster CIDR octet out of range", "controller: {clusterCIDRs: [10.300.0.0/16]}", "/controller/clusterCIDRs/0"},
		{"no service CIDR", "controller: {serviceCIDRs: []}", "/controller/serviceCIDRs"},
		{"service CIDR prefix too long", "controller: {serviceCIDRs: [10.96.0.0/33]}", "/controller/serviceCIDRs/0"},
		{"unknown pull policy", "agent: {image: {pullPolicy: Sometimes}}", "/agent/image/pullPolicy"},
		{"image repository with a space", "agent: {image: {repository: 'ghcr.io/winnet io/agent'}}", "/agent/image/repository"},
		{"image repository with upper case", "controller: {image: {repository: ghcr.io/Winnet/controller}}", "/controller/image/repository"},
		{"image tag with a colon", "agent: {image: {tag: 'v1:2'}}", "/agent/image/tag"},
		{"image removed", "controller: {image: null}", "image"},
		{"linux CNI bin dir", "cni: {binDir: /opt/cni/bin}", "/cni/binDir"},
		{"conflist name (the agent writes 10-winnet.conflist)", "cni: {confName: 05-winnet.conflist}", "confName"},
		{"agent socket not a named pipe", "cni: {agentSocket: /var/run/winnet/cni.sock}", "/cni/agentSocket"},
		{"health port out of range", "agent: {healthPort: 70000}", "/agent/healthPort"},
		{"unknown log level", "controller: {logLevel: verbose}", "/controller/logLevel"},
		{"misspelled key", "agent: {nodeSelecter: {a: b}}", "nodeSelecter"},
		{"unknown top-level key", "controler: {replicas: 1}", "controler"},
		{"boolean as string", "admissionPolicy: {enabled: 'yes'}", "/admissionPolicy/enabled"},
		{"empty windows node selector", "controller: {windowsNodeSelector: ''}", "/controller/windowsNodeSelector"},
		{"bad service account name", "serviceAccount: {agent: {name: Winnet_Agent}}", "/serviceAccount/agent/name"},
		{"API server without https", "agent: {apiServer: '10.0.0.10:6443'}", "/agent/apiServer"},
		{"negative GC target", "agent: {gcPercent: -1}", "/agent/gcPercent"},
		{"GC target as GOGC's off", "agent: {gcPercent: 'off'}", "/agent/gcPercent"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := renderChart(t, writeValues(t, tc.values))
			g.Expect(err).To(HaveOccurred(), "values %q must be rejected", tc.values)
			g.Expect(err.Error()).To(ContainSubstring("values don't meet the specifications of the schema"))
			g.Expect(err.Error()).To(ContainSubstring(tc.want))
		})
	}
	t.Run("valid custom values", func(t *testing.T) {
		_, err := renderChart(t, filepath.Join("testdata", "custom-values.yaml"))
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
	})
}
