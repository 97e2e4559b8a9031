// Package servedcrd follows whether the API server serves a kind a CustomResourceDefinition
// defines, and caches its objects while it does: a controller started before the CRD was installed
// picks the kind up when it is, and drops it when the CRD goes, without a restart.
package servedcrd
