// Package routes benchmarks winnet-agent's remote routes at cluster scale (`make bench-routes`).
package routes
