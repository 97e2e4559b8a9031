// Package scale benchmarks what winnet costs as the cluster grows (`make bench-scale`, issue 37):
// the real kube-apiserver and etcd, kube-controller-manager, winnet-controller and 1-3 real
// winnet-agent processes on simulated nodes with 30 local Pods each (the e2e harness,
// test/e2e/cluster), in a cluster written to the API server in parallel, with protobuf: Nodes that
// exist only as objects (with heartbeats), their Pods (created, then their status written as
// kubelet does), Namespaces, Services with EndpointSlices and NetworkPolicies. The cluster grows
// 10,000 -> 30,000 -> 60,000 Pods (BENCH_SCALE_150K=1 adds 150,000: 5,000 Nodes, 2,500
// Namespaces, Kubernetes' thresholds) with one Service and one policy per six Pods, at most
// 10,000 of each (10,000 from 60,000 Pods on, the goals' proportions) and 30 Pods per Node, and
// at each size the benchmark prints two lines, the agents' and winnet-controller's, the largest
// size last:
//
//	bench-scale pods=N services=S policies=P agent_heap_mb=.. agent_rss_mb=.. agent_idle_rss_mb=..
//	agent_idle_cpu_pct=.. idle_writes_per_min=.. writes_per_endpoint_change=.. watch_kb_s_per_agent=..
//	kubeproxy_watch_kb_s=.. full_pass_ms=.. burst_converge_ms=.. unnamed_pod_update_events=..
//	only_pods_grow=0|1 agent_writes_per_object_added=..
//	bench-scale-controller pods=N nodes=M controller_heap_mb=.. controller_rss_mb=..
//	controller_grow_cpu_pct=.. controller_idle_cpu_pct=.. controller_idle_writes_per_min=..
//	controller_writes_per_node_added=.. controller_queue_max_growing=.. controller_queue_idle=..
//	route_converge_ms=..
//
// What each number of the agents' line is:
//   - agent_heap_mb: the agents' largest live heap after a GC (HeapAlloc of the agent's
//     /debug/pprof/heap?gc=1, its loopback-only profiler); agent_rss_mb: the largest VmRSS, read
//     right after (the agents just settled from the size's growth); agent_idle_rss_mb: the largest
//     VmRSS at the end of the idle 60 s below, once the runtime has returned to the system what the
//     growth no longer needs (at rest: what a node's agent holds between changes).
//   - agent_idle_cpu_pct: the agents' mean CPU (of one core, /proc/<pid>/stat) over 60 s in which
//     only the Nodes' heartbeats are written.
//   - idle_writes_per_min: the writes (create, update, patch, delete; empty patches included) of the
//     agents' user (winnet-agent's ServiceAccount) in those 60 s, all agents together, counted in
//     the API server's audit log (an audit policy that records only that user's writes).
//   - writes_per_endpoint_change: the agents' writes in the 3 s after each of 5 changes of one
//     endpoint of one EndpointSlice, per change.
//   - watch_kb_s_per_agent and kubeproxy_watch_kb_s: the bytes a watch client receives, per
//     second, during 30 s of churn (10 Pods created and 10 deleted per second, 5 EndpointSlice
//     changes per second, the heartbeats): one with the measured agent's watches and selectors
//     (its node's Pods and the peer Pod watches of its local policies, networkpolicy.PeerWatches;
//     every NetworkPolicy, Namespace and RemoteSubnetRoute, the Services and EndpointSlices
//     kube-proxy would serve, its Node), one with the reference's (main before issue 38: every
//     Pod instead of the node's and the peers'), one with kube-proxy's (those Services and
//     EndpointSlices, its Node), all with protobuf as the agent and kube-proxy use; each stands
//     for one node of many.
//   - unnamed_pod_update_events: the events those watch models receive per status write (a Ready
//     condition flipped, as kubelet writes it) of a Pod no local policy names, over 5 writes.
//   - full_pass_ms: the agent's full NetworkPolicy pass (reading its inputs, compiling, the bundle)
//     after a policy selecting local Pods is created, from the agent's log, median of 3.
//   - agent_writes_per_object_added: the agents' writes (the audit log) from the start of the
//     size's writing until they settled, per agent and per Node, Service and NetworkPolicy added
//     (-1 when none was): status writes that follow the cluster's size (a count in the node's
//     status) show here.
//   - burst_converge_ms: from the start of a burst of 100 Pods created in parallel (with their
//     status), peers of a policy on the first agent's Pods, until the first agent's switch has a
//     peer flow for each of their addresses.
//   - With BENCH_SCALE_AGENT_MEMORY_LIMIT (or BENCH_SCALE_AGENT_GOGC), agent_heap_mb and
//     agent_rss_mb are the largest of the agents without the limit (the build's defaults), and the
//     fields added at the end are the limited (last) agent's: agent_memory_limit_mb, the limit in MiB
//     (agent_gogc, its GOGC); limited_agent_heap_mb, limited_agent_rss_mb and
//     limited_agent_idle_rss_mb, its heap and RSS measured as the others'; limited_agent_cpu_ratio,
//     its CPU time since its start over the mean of the other agents' (the same build's), read at one
//     moment at the end of the size's measurements. full_pass_ms and burst_converge_ms stay the
//     first agent's, which has no limit; agent_idle_cpu_pct is the mean of all of them.
//
// What each number of winnet-controller's line is (it runs with the chart's ServiceAccount and
// roles, cluster.Options.ControllerServiceAccount, its profiler and metrics on the loopback):
//   - controller_heap_mb: HeapAlloc after a GC from its --pprof-bind-address, once the size is built
//     and the agents settled; controller_rss_mb: its VmRSS then.
//   - controller_grow_cpu_pct: its CPU (of one core) while the size's objects were written;
//     controller_idle_cpu_pct: over the agents' idle window (heartbeats only).
//   - controller_idle_writes_per_min: its writes in that window, counted in the audit log (which
//     records the agents' and its user's writes; the TokenReviews and SubjectAccessReviews of the
//     benchmark's scrapes of its metrics are not counted).
//   - controller_writes_per_node_added: its writes from the start of the size's build until the
//     agents settled and its queues were empty (the measurements start then; at most 10 minutes
//     each), per Node the size added (-1 when it added none, BENCH_SCALE_FIXED=1).
//   - controller_queue_max_growing: the largest sum of controller-runtime's workqueue_depth over
//     its queues (its metrics endpoint, every 5 s) while the size was built; controller_queue_idle:
//     the sum at the end of the idle window. The deepest queue is named on an info line.
//   - route_converge_ms: from the creation of a new Node (Pod CIDR, then InternalIP and Ready, as
//     kubelet registers one) until the flow of its route (L3 forwarding, nw_dst its Pod CIDR) is
//     in every agent's switch, seen by an OpenFlow monitor per switch; the Node is deleted after.
//     The goal is under 2 s.
//
// Each size's build prints bench-scale-info lines: the objects written per second of each kind
// (namespaces_per_s, nodes_per_s, pods_per_s, services_per_s, policies_per_s; a Pod is its
// creation and its status write, a Node the same, a Service its creation and its EndpointSlice's),
// the cores each of the benchmark's processes used while writing (all of it and each kind; the
// test process's writers and watches are "bench"; "others" is what the rest of the machine used),
// and how long the objects took and the agents then took to settle. The audit log, the agents'
// and winnet-controller's logs are kept in bin/bench-scale/.
//
// Environment: BENCH_SCALE_SIZES (comma-separated Pod counts, default 10000,30000,60000),
// BENCH_SCALE_150K=1 (adds 150,000), BENCH_SCALE_AGENTS (1-3, default 3), BENCH_SCALE_BIN (the
// directory of the winnet binaries to measure, default bin/linux), BENCH_SCALE_REF_BIN (the
// directory of a reference build, such as main's: as many agents of it run beside the measured ones
// in the same cluster, at the same moments, and print bench-scale-ref lines; the watch numbers are
// each build's own model), BENCH_SCALE_FIXED=1 (only the Pods grow: see below),
// BENCH_SCALE_AGENT_MEMORY_LIMIT (a Kubernetes quantity such as 352Mi, with 2 or more agents: the
// measured build's last agent gets it in bytes as WINNET_MEMORY_LIMIT, as the chart gives the
// container's limit, so that its Go soft limit is 85% of it; the build's other agents run with the
// runtime's defaults beside it, and its line ends with agent_memory_limit_mb=..
// limited_agent_heap_mb=.. limited_agent_rss_mb=.. limited_agent_cpu_ratio=..: see above),
// BENCH_SCALE_AGENT_GOGC (a garbage collection target such as 25, with 2 or more agents: the
// measured build's last agent runs with GOGC set to it, and is measured apart as the limited agent
// is, its line ending with agent_gogc=.. limited_agent_heap_mb=.. limited_agent_rss_mb=..
// limited_agent_cpu_ratio=..; with BENCH_SCALE_AGENT_MEMORY_LIMIT too, that agent has both),
// BENCH_SCALE_PROFILE_DIR (an existing directory: each agent's heap profile after a GC, taken when
// its heap is measured, is written there as heap-<build>-<node>-<pods>.pb.gz; read it with
// go tool pprof -sample_index=inuse_space; what it allocated over the idle window, the last 5 s
// but, as idle-allocs-<build>-<node>-<pods>.pb.gz, read with -sample_index=alloc_space: what lifts
// its RSS at rest; and the runtime's MemStats at the window's end, idle-memstats-...txt).
//
// The two 150,000-Pod runs (issue 64; 45 minutes or more each on an idle 2-core machine):
//
//	BENCH_SCALE_150K=1 make bench-scale                    # the full shape: 10k, 30k, 60k, 150k
//	BENCH_SCALE_150K=1 BENCH_SCALE_FIXED=1 make bench-scale  # only Pods grow: 30k, 60k, 150k
//
// With BENCH_SCALE_FIXED=1 and no BENCH_SCALE_SIZES, the sizes start at the first default size
// whose Nodes hold the largest size's Pods: 30,000 with BENCH_SCALE_150K=1 (1,000 Nodes, 150
// Pods each at 150,000; 10,000 holds at most 84,502). etcd runs with an 8 GiB quota (its default
// 2 GiB comes near at 150,000 Pods with their revisions).
//
// The policies' peers (role=peer) are one Pod in ten of the first 3,000 object Pods, the same at
// every size, and from 3,000 Pods on the local namespaces hold about 1,800 object Pods at every
// size: the sizes differ in Pods no local policy names (issue 38's heap goal). With
// BENCH_SCALE_FIXED=1 the sizes differ in nothing else (only_pods_grow=1): the Nodes (so the
// routes), Namespaces, Services and policies are the first size's at every size, the larger sizes'
// Pods are spread over those Nodes (at most 253 each, so 60,000 Pods need a first size of 10,000
// and 150,000 one of 17,790) and go to the namespaces without local Pods, so that the local
// namespaces and the peers stay as the first size left them: what an agent needs is the same at
// every size, and its heap should be too.
package scale
