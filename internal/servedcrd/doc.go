// Package servedcrd follows whether the API server serves a kind a CustomResourceDefinition
// defines, and caches its objects while it does: a controller started before the CRD was installed
// picks the kind up when it is, and drops it when the CRD goes, without a restart.
//
// Why a watch of the one CRD rather than polling discovery: the watch tells within the API server's
// latency, costs one idle connection per process and an RBAC rule naming that CRD alone, where a
// discovery poll costs every node a request per period and answers only at the next one. Why a
// cache of its own rather than the manager's: controller-runtime v0.25's source.Kind retries a kind
// the RESTMapper does not know every 10 s and a controller whose source has not synced fails its
// start after CacheSyncTimeout; the manager's informer of a deleted CRD would relist in back-off
// forever and could not be restarted cleanly. The controllers register one source.Func at setup
// (Kind.Source), which starts a source.Kind on each new cache, so nothing is added to a started
// controller.
package servedcrd
