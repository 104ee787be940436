package adapters

import (
	"bufio"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/sync/singleflight"

	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/app"
)

var mirrorFetches = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "anvil_boot_sysext_mirror_fetches_total",
	Help: "Kubernetes sysext downloads from the sysext mirror, by outcome: ok, verified (a published sha512 matched), failed.",
}, []string{"outcome"})

// Sysext mirror limits.
const (
	// MaxSysextBytes bounds a downloaded sysext image (Flatcar's
	// sysext-bakery Kubernetes images are about 100 MB).
	MaxSysextBytes = 4 << 30
	// maxChecksumBytes bounds a checksum file.
	maxChecksumBytes = 1 << 20
	// DefaultMirrorTimeout bounds one download.
	DefaultMirrorTimeout = 15 * time.Minute
)

// SysextMirror fetches Kubernetes sysext images that the assets directory
// lacks from a mirror, once: concurrent asks for one image share one
// download, written to a temporary file in the sysext directory, verified
// against the sha512 the mirror publishes beside it (<url>.sha512, or a
// SHA512SUMS file in the same directory) when it publishes one, and renamed
// into place. The index then hashes and serves it like any other file.
type SysextMirror struct {
	// Template is the image's URL with {version} (x.y.z) and {arch}
	// (x86-64, arm64), e.g.
	// https://github.com/flatcar/sysext-bakery/releases/download/kubernetes-v{version}/kubernetes-v{version}-{arch}.raw
	Template string
	// Dir is the sysext directory (<assets-dir>/sysext); it is created if
	// missing.
	Dir     string
	Client  *http.Client
	Timeout time.Duration // of one download; 0 means DefaultMirrorTimeout
	Log     *slog.Logger

	group singleflight.Group
}

// URL is the image's URL on the mirror.
func (m *SysextMirror) URL(ref bootapi.AssetRef) string {
	return strings.NewReplacer("{version}", ref.Version, "{arch}", ref.Arch).Replace(m.Template)
}

// CheckMirrorTemplate checks a --sysext-mirror value.
func CheckMirrorTemplate(t string) error {
	if !strings.Contains(t, "{version}") || !strings.Contains(t, "{arch}") {
		return errors.New("must contain {version} and {arch}, e.g. https://mirror.example/sysext/kubernetes-v{version}-{arch}.raw")
	}
	u, err := url.Parse(strings.NewReplacer("{version}", "1.33.4", "{arch}", "x86-64").Replace(t))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Fragment != "" {
		return errors.New("must be an absolute http(s) URL template")
	}
	return nil
}

// Fetch makes sure the sysext ref is in Dir, downloading it if it is not.
// It waits for the download while ctx lasts: if ctx ends first, the
// download goes on and Fetch returns an *app.AssetPendingError.
func (m *SysextMirror) Fetch(ctx context.Context, ref bootapi.AssetRef) error {
	if ref.Kind != bootapi.KindSysext {
		return fmt.Errorf("%s is not a sysext", ref.Name)
	}
	src := m.URL(ref)
	ch := m.group.DoChan(ref.Name, func() (any, error) {
		timeout := m.Timeout
		if timeout <= 0 {
			timeout = DefaultMirrorTimeout
		}
		// Detached: the download outlives the request that started it.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		return nil, m.download(dctx, ref, src)
	})
	select {
	case r := <-ch:
		return r.Err
	case <-ctx.Done():
		return &app.AssetPendingError{Name: ref.Name, URL: src}
	}
}

func (m *SysextMirror) log() *slog.Logger {
	if m.Log == nil {
		return slog.Default()
	}
	return m.Log
}

func (m *SysextMirror) client() *http.Client {
	if m.Client == nil {
		return http.DefaultClient
	}
	return m.Client
}

// download fetches src into Dir/<file>, verified when the mirror
// publishes a checksum.
func (m *SysextMirror) download(ctx context.Context, ref bootapi.AssetRef, src string) (err error) {
	began := time.Now()
	file := path.Base(ref.Name)
	dst := filepath.Join(m.Dir, file)
	if _, err := os.Stat(dst); err == nil {
		return nil // another replica or an earlier call put it there
	}
	defer func() {
		if err != nil {
			mirrorFetches.WithLabelValues("failed").Inc()
			m.log().Warn("sysext mirror download failed", "asset", ref.Name, "url", src, "err", err)
			err = &app.AssetFetchError{Name: ref.Name, URL: src, Err: err}
		}
	}()
	// The image's response first (its status says whether the mirror has
	// it at all), then the checksum, then the image's body.
	body, err := m.get(ctx, src, MaxSysextBytes)
	if err != nil {
		return err
	}
	defer body.Close()
	want, sumFrom, err := m.publishedSum(ctx, src, file)
	if err != nil {
		return err
	}
	m.log().Info("fetching a Kubernetes sysext from the mirror", "asset", ref.Name, "url", src)
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(m.Dir, "."+file+".download-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	defer tmp.Close()
	h := sha512.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(body, MaxSysextBytes+1))
	if err != nil {
		return fmt.Errorf("GET %s: %v", src, err)
	}
	if n > MaxSysextBytes {
		return fmt.Errorf("GET %s: larger than %d bytes", src, int64(MaxSysextBytes))
	}
	got := hex.EncodeToString(h.Sum(nil))
	if want != "" && got != want {
		return fmt.Errorf("GET %s: its sha512 is %s, but %s says %s: the download is corrupt or the mirror is inconsistent", src, got, sumFrom, want)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return err
	}
	outcome := "ok"
	if want != "" {
		outcome = "verified"
	} else {
		m.log().Warn("the sysext mirror publishes no sha512 for this image (neither <url>.sha512 nor SHA512SUMS beside it): it was not verified against the mirror; machines verify it against the hash computed here",
			"asset", ref.Name, "url", src)
	}
	mirrorFetches.WithLabelValues(outcome).Inc()
	m.log().Info("Kubernetes sysext fetched from the mirror", "asset", ref.Name, "bytes", n, "verified", want != "",
		"took", time.Since(began).Round(time.Millisecond))
	return nil
}

// publishedSum returns the sha512 the mirror publishes for src: from
// <src>.sha512, else from SHA512SUMS in src's directory; "" when it
// publishes neither (both 404). Any other failure is an error: a checksum
// that cannot be read is not skipped silently.
func (m *SysextMirror) publishedSum(ctx context.Context, src, file string) (sum, from string, err error) {
	candidates := []string{src + ".sha512"}
	if u, err := url.Parse(src); err == nil {
		u.Path = path.Join(path.Dir(u.Path), "SHA512SUMS")
		u.RawPath, u.RawQuery = "", ""
		candidates = append(candidates, u.String())
	}
	for _, c := range candidates {
		body, err := m.get(ctx, c, maxChecksumBytes)
		if errors.As(err, new(notFoundError)) {
			continue
		}
		if err != nil {
			return "", "", err
		}
		sum, perr := parseSums(io.LimitReader(body, maxChecksumBytes), file, strings.HasSuffix(c, ".sha512"))
		body.Close()
		if perr != nil {
			return "", "", fmt.Errorf("%s: %v", c, perr)
		}
		return sum, c, nil
	}
	return "", "", nil
}

// parseSums finds file's sha512 in sha512sum output ("<hex>  <name>" per
// line); a .sha512 file may hold the hex alone.
func parseSums(r io.Reader, file string, single bool) (string, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		hexSum := strings.ToLower(f[0])
		name := ""
		if len(f) > 1 {
			name = strings.TrimPrefix(f[1], "*") // sha512sum's binary marker
		}
		if (single && len(f) == 1) || path.Base(name) == file {
			if len(hexSum) != 128 || strings.Trim(hexSum, "0123456789abcdef") != "" {
				return "", fmt.Errorf("the sha512 of %s is not 128 hex digits", file)
			}
			return hexSum, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("lists no sha512 for %s", file)
}

// notFoundError is a 404 or 410 from the mirror.
type notFoundError struct{ msg string }

func (e notFoundError) Error() string { return e.msg }

// get starts a GET; 404 and 410 are notFoundError, other statuses errors.
func (m *SysextMirror) get(ctx context.Context, u string, limit int64) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "anvil-boot (sysext mirror)")
	resp, err := m.client().Do(req)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		if resp.ContentLength > limit {
			resp.Body.Close()
			return nil, fmt.Errorf("GET %s: %d bytes, more than the %d allowed", u, resp.ContentLength, limit)
		}
		return resp.Body, nil
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		resp.Body.Close()
		return nil, notFoundError{fmt.Sprintf("GET %s: %s", u, resp.Status)}
	default:
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
}
