// Package openflow keeps per-bridge OpenFlow 1.5 connections and installs desired flow sets in atomic bundles with cookie rounds.
package openflow
