package main

import (
	"net"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on the default mux
	"os"
)

// This file is built into winnet-agent by bench-routes only, with go build -overlay, when the
// benchmark profiles the real agent binary (BENCH_ROUTES_PROFILE=1): it serves net/http/pprof on
// $WINNET_BENCH_PPROF from the start of the process.
func init() {
	addr := os.Getenv("WINNET_BENCH_PPROF")
	if addr == "" {
		return
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		panic(err)
	}
	go func() { _ = http.Serve(l, nil) }()
}
