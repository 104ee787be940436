package sim

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
)

// Requests to any address go to the in-memory listener, many at once,
// without a socket; after Close they fail.
func TestMemNetworkCarriesHTTP(t *testing.T) {
	n := NewMemNetwork()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.URL.Path)
	})}
	go func() { _ = srv.Serve(n.Listener()) }()
	t.Cleanup(func() { _ = srv.Close() })
	client := n.HTTPClient()
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			path := "/ipxe/" + string(rune('a'+i%26))
			resp, err := client.Get("http://127.0.0.1:1" + path) // no one listens there
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			if b, _ := io.ReadAll(resp.Body); string(b) != path {
				t.Errorf("got %q, want %q", b, path)
			}
		})
	}
	wg.Wait()
	client.CloseIdleConnections()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://127.0.0.1:1/", nil)
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("a request went through a closed network")
	}
}
