// Package services benchmarks winnet-agent's Services against the real kube-proxy in nftables mode
// on the same objects, in the same run (`make bench-services`).
//
// The Services are selectorless ClusterIP Services whose EndpointSlices the benchmark writes itself.
// Both proxies see the same API server; they run one after the other (on 2 cores, together, each
// would measure the other).
//
// How "programmed" is observed:
//   - winnet: in the switch. Cold: the Services' DNAT flows counted with ovs-ofctl dump-aggregate
//     (the agent installs a Service's group before its flow), then every group checked. Incremental
//     and churn: the agent's log line "Committed Service flows" (V(1)), written as soon as the switch
//     replied to the commit of a Service's bundle, with the EndpointSlice versions the bundle
//     carried: a change is programmed at the first line with its slice's version or a later one.
//     The flow and group messages of the incremental change are counted in ovs-vswitchd's own log
//     of the OpenFlow messages it receives (vconn at debug level, on for that step only: it makes
//     ovs-vswitchd format every message it sends, its periodic 20,000-flow dumps included, which
//     slowed the commits the churn timed when they were timed by it).
//   - kube-proxy: its rules in the kernel's nftables, never its metrics. Cold: the elements of its
//     service-ips map (nft list map, polled); incremental and churn: the kernel's nftables
//     notifications (what `nft monitor` prints, sent once a transaction is committed, read from
//     netlink without nft, whose start lists the whole ruleset: 8+ minutes at 10,000 Services): an
//     endpoint is programmed when its Service's dnat map with it is committed.
//
// Latencies run from the completion of the EndpointSlice write (its duration is printed apart).
//
// Environment: BENCH_SERVICES_SCALE (default "10000x5": Services x endpoints of the main scenario),
// BENCH_SERVICES_EXTRA (default "1000x100": another cold start, before the main one; "" skips it),
// BENCH_SERVICES_CHURN_SECONDS (default 30), BENCH_SERVICES_PROFILE=1 (the agent's CPU profiles of
// the cold start and of the churn, and a heap profile after the cold start, in
// bin/bench-services-*.pprof). Logs are in bin/bench-services-*.log.
package services
