package ports

import (
	"net/http"
	"strconv"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// Every list answers one envelope, {"items": [...], "next": "<cursor>"},
// and takes ?cursor= (the next of the previous page; absent: the first
// page) and ?limit=. next is absent on the last page; a page may be short
// (even empty) while next is set. See docs/api.md, "Lists".

// pageLimits is a list's ?limit=: its default and its maximum.
type pageLimits struct{ Default, Max int }

var (
	// listPage bounds most lists (the registry's machine pages use the
	// same bounds).
	listPage = pageLimits{Default: 100, Max: 1000}
	// rolloutPage bounds the rollout service's lists (rollouts,
	// operations), as that service does.
	rolloutPage = pageLimits{Default: 50, Max: 500}
)

// read reads ?limit=.
func (l pageLimits) read(r *http.Request) (int, error) {
	return queryInt(r, "limit", l.Default, l.Max)
}

// pageQuery is a list request's ?cursor= and ?limit=.
type pageQuery struct {
	cursor string
	limit  int
}

// readPage reads ?cursor= and ?limit=, every error naming its parameter.
func readPage(r *http.Request, l pageLimits) (pageQuery, error) {
	limit, err := l.read(r)
	return pageQuery{cursor: r.URL.Query().Get("cursor"), limit: limit}, err
}

func errCursor() error {
	return errs.Invalid("cursor", "is not the next of a previous page of this list")
}

// pageByKey cuts one page out of a whole list whose items are ordered by
// key (names, ids): the items whose key sorts after the cursor (the key
// of the previous page's last item), so an item removed between two pages
// moves nothing. less orders two keys.
func pageByKey[T any](all []T, q pageQuery, key func(T) string, less func(a, b string) bool) (items []T, next string) {
	start := 0
	if q.cursor != "" {
		for start < len(all) && !less(q.cursor, key(all[start])) {
			start++
		}
	}
	return cut(all, start, q.limit, key)
}

// pageAfterItem cuts one page out of a whole list in a stable order whose
// items are never removed (tokens: a revoked one stays listed): the items
// after the one whose key is the cursor.
func pageAfterItem[T any](all []T, q pageQuery, key func(T) string) (items []T, next string, err error) {
	start := 0
	if q.cursor != "" {
		start = -1
		for i, it := range all {
			if key(it) == q.cursor {
				start = i + 1
				break
			}
		}
		if start < 0 {
			return nil, "", errCursor()
		}
	}
	items, next = cut(all, start, q.limit, key)
	return items, next, nil
}

func cut[T any](all []T, start, limit int, key func(T) string) ([]T, string) {
	rest := all[start:]
	if len(rest) <= limit {
		return append(make([]T, 0, len(rest)), rest...), ""
	}
	page := append(make([]T, 0, limit), rest[:limit]...)
	return page, key(page[len(page)-1])
}

func lessString(a, b string) bool { return a < b }

// lessNumber orders decimal keys (revision numbers) by value.
func lessNumber(a, b string) bool {
	x, _ := strconv.Atoi(a)
	y, _ := strconv.Atoi(b)
	return x < y
}

// checkNumberCursor validates a cursor that must be a number.
func checkNumberCursor(q pageQuery) error {
	if q.cursor == "" {
		return nil
	}
	if n, err := strconv.Atoi(q.cursor); err != nil || n < 0 {
		return errCursor()
	}
	return nil
}
