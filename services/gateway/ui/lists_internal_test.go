package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"testing"
)

// listEvery follows next until it is absent, through short and empty
// pages, keeping the list's filters and page size on every request, and
// stops on an API error.
func TestListEveryFollowsNext(t *testing.T) {
	var all []int
	for i := range 25 {
		all = append(all, i)
	}
	// the API's pages: short ones and an empty one with next set, as the
	// envelope allows
	cuts := []int{0, 10, 17, 17, 25}
	var seen []string
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		seen = append(seen, q.Encode())
		if q.Get("kind") != "machine" || q.Get("limit") != "7" {
			http.Error(w, "filters lost: "+q.Encode(), http.StatusBadRequest)
			return
		}
		n := 0
		if c := q.Get("cursor"); c != "" {
			n, _ = strconv.Atoi(c)
		}
		if n == 3 && r.URL.Path == "/fails" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"status":503,"title":"Service Unavailable","detail":"the registry did not answer"}`)
			return
		}
		page := struct {
			Items []int  `json:"items"`
			Next  string `json:"next,omitempty"`
		}{Items: all[cuts[n]:cuts[n+1]]}
		if n+2 < len(cuts) {
			page.Next = strconv.Itoa(n + 1)
		}
		_ = json.NewEncoder(w).Encode(page)
	})
	c := &Console{api: api}
	q := map[string][]string{"kind": {"machine"}, "limit": {"7"}}
	got, err := listEvery[int](context.Background(), c, "tok", "/list", q)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, all) {
		t.Fatalf("items %v, want %v", got, all)
	}
	want := []string{"kind=machine&limit=7", "cursor=1&kind=machine&limit=7", "cursor=2&kind=machine&limit=7", "cursor=3&kind=machine&limit=7"}
	if !reflect.DeepEqual(seen, want) {
		t.Fatalf("requests %q, want %q", seen, want)
	}
	if len(q) != 2 {
		t.Fatalf("the caller's query was changed: %v", q)
	}
	// an error on a later page is the answer, not a partial list
	if got, err := listEvery[int](context.Background(), c, "tok", "/fails", q); err == nil || statusOf(err) != http.StatusServiceUnavailable {
		t.Fatalf("an error on page 4: %v, %v", got, err)
	}
}
