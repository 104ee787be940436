// Command sleeper is the workload of test Deployments: an HTTP server that
// answers with its pod's name (for probes and for telling replicas apart)
// and stops at once on SIGTERM, so that drains do not wait for a grace
// period.
//
// Environment: PORT (default 8080); POD_NAME, else the hostname, is what "/"
// answers. "sleeper -once" prints that answer and exits (a smoke test that
// needs no network).
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	name := os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	if len(os.Args) > 1 && os.Args[1] == "-once" {
		fmt.Println(name)
		return
	}
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, name) })
	srv := &http.Server{Addr: ":" + port, Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	// Bound before saying so, so that whoever reads the line can connect.
	l, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		log.Fatalf("sleeper: %v", err)
	}
	log.Printf("sleeper %s listening on :%s", name, port)
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("sleeper: %v", err)
	}
	log.Printf("sleeper %s stopped", name)
}
