package ports

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/gateway/adapters"
)

// idempotent replays the first answer to a POST retried with the same
// Idempotency-Key by the same token. A reuse of the key for a different
// request is refused, as is a retry while the first is still running.
func (h *handler) idempotent(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			next.ServeHTTP(w, r)
			return
		}
		if len(key) > 255 {
			writeProblem(w, problemOf(errs.Invalid("Idempotency-Key", "must be at most 255 characters"), r.URL.Path))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, h.BodyLimit))
		if err != nil {
			writeProblem(w, problemOf(errTooLarge, r.URL.Path))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		p := principalOf(r.Context())
		k := sha256.Sum256([]byte(p.TokenID + "\x00" + r.Method + "\x00" + r.URL.Path + "\x00" + key))
		kvKey := hex.EncodeToString(k[:])
		reqHash := sha256.Sum256(append([]byte(r.URL.RawQuery+"\x00"), body...))
		rh := hex.EncodeToString(reqHash[:])

		stored, err := h.Idempotency.Claim(r.Context(), kvKey, rh)
		switch {
		case errors.Is(err, adapters.ErrExists):
			switch {
			case stored.RequestHash != rh:
				writeProblem(w, problemOf(errs.Invalid("Idempotency-Key", "was used for a different request"), r.URL.Path))
			case stored.Pending:
				writeProblem(w, problemOf(errs.Conflict("a request with this Idempotency-Key is still running"), r.URL.Path))
			default:
				for k, v := range stored.Header {
					w.Header().Set(k, v)
				}
				w.Header().Set("Idempotent-Replayed", "true")
				w.WriteHeader(stored.Status)
				_, _ = w.Write(stored.Body)
			}
			return
		case err != nil:
			writeProblem(w, problemOf(errs.Unavailable("idempotency store: %v", err), r.URL.Path))
			return
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		res := rec.Result()
		hdr := map[string]string{}
		for _, k := range []string{"Content-Type", "ETag", "Location"} {
			if v := res.Header.Get(k); v != "" {
				hdr[k] = v
			}
		}
		if res.StatusCode >= 500 {
			h.Idempotency.Release(r.Context(), kvKey) // a failure is not an answer worth replaying
		} else if err := h.Idempotency.Complete(r.Context(), kvKey, adapters.Stored{RequestHash: rh, Status: res.StatusCode, Header: hdr, Body: rec.Body.Bytes()}); err != nil {
			h.log.WarnContext(r.Context(), "idempotency answer not stored", "err", err)
		}
		for k, vs := range res.Header {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		w.WriteHeader(res.StatusCode)
		_, _ = w.Write(rec.Body.Bytes())
	})
}
