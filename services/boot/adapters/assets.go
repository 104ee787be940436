package adapters

import (
	"context"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/sync/singleflight"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/app"
)

var (
	assetHashes = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_boot_asset_hashes_total",
		Help: "Asset files hashed (sha512), by kind: once when first seen, again when their size or mtime changed.",
	}, []string{"kind"})
	assetChanges = promauto.NewCounter(prometheus.CounterOpts{
		Name: "anvil_boot_asset_changes_total",
		Help: "Asset files whose contents changed while indexed (the Ignition cache is dropped on each).",
	})
)

// AssetIndex knows the files under the assets directory that machines
// fetch (api.ParseAsset names them) and their sha512. A file is hashed once,
// when first asked for (or by Scan), and again only when its size or mtime
// changed: a lookup costs a stat, never a read of the file. Concurrent
// lookups of a file being hashed share the work. A Kubernetes sysext that
// is missing is fetched from the mirror, if one is configured.
type AssetIndex struct {
	dir    string
	mirror *SysextMirror
	log    *slog.Logger
	// onChange is called (outside the lock) when a file the index had
	// hashed changed its contents.
	onChange func(name string)

	group singleflight.Group
	mu    sync.Mutex
	files map[string]assetEntry
}

type assetEntry struct {
	size    int64
	modTime time.Time
	hash    string // sha512-<hex>
}

// maxRehash bounds how often a lookup hashes a file that keeps changing
// under it before it gives up.
const maxRehash = 3

// NewAssetIndex indexes dir (which may be "": then every asset is missing).
// mirror may be nil.
func NewAssetIndex(dir string, mirror *SysextMirror, log *slog.Logger, onChange func(name string)) *AssetIndex {
	if log == nil {
		log = slog.Default()
	}
	return &AssetIndex{dir: dir, mirror: mirror, log: log, onChange: onChange, files: map[string]assetEntry{}}
}

// Dir is the indexed directory.
func (x *AssetIndex) Dir() string { return x.dir }

// path is where name lives. name has passed api.ParseAsset, so it cannot
// leave the directory.
func (x *AssetIndex) path(name string) string {
	return filepath.Join(x.dir, filepath.FromSlash(name))
}

// Lookup returns the asset's size and hash. A missing asset is
// errs.KindNotFound (its message says where it was looked for), a bad name
// errs.KindValidation, a sysext still being fetched from the mirror when
// ctx ends errs.KindUnavailable.
func (x *AssetIndex) Lookup(ctx context.Context, name string) (app.AssetInfo, error) {
	ref, err := bootapi.ParseAsset(name)
	if err != nil {
		return app.AssetInfo{}, errs.Invalid("name", "%v", err)
	}
	if x.dir == "" {
		return app.AssetInfo{}, errs.NotFound("the boot service has no assets directory (--assets-dir / ANVIL_BOOT_ASSETS_DIR)")
	}
	st, err := x.stat(name)
	if errs.Is(err, errs.KindNotFound) && ref.Kind == bootapi.KindSysext && x.mirror != nil {
		if err := x.mirror.Fetch(ctx, ref); err != nil {
			return app.AssetInfo{}, err
		}
		st, err = x.stat(name)
	}
	if err != nil {
		return app.AssetInfo{}, err
	}
	return x.info(ref, st)
}

// stat returns the file's info; a missing or non-regular file is
// errs.KindNotFound.
func (x *AssetIndex) stat(name string) (fs.FileInfo, error) {
	p := x.path(name)
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, errs.NotFound("no file %s", p)
	case err != nil:
		return nil, errs.Internal("reading %s: %v", p, err)
	case !st.Mode().IsRegular():
		return nil, errs.NotFound("%s is not a regular file", p)
	}
	return st, nil
}

// info returns the indexed info of the file as st describes it, hashing it
// if the index has not seen it so.
func (x *AssetIndex) info(ref bootapi.AssetRef, st fs.FileInfo) (app.AssetInfo, error) {
	for range maxRehash {
		if e, ok := x.current(ref.Name, st); ok {
			return app.AssetInfo{Name: ref.Name, Hash: e.hash, Size: e.size, ModTime: e.modTime}, nil
		}
		key := fmt.Sprintf("%s\x00%d\x00%d", ref.Name, st.Size(), st.ModTime().UnixNano())
		v, err, _ := x.group.Do(key, func() (any, error) { return x.hash(ref, st) })
		if err != nil {
			return app.AssetInfo{}, err
		}
		if e := v.(assetEntry); e.size >= 0 {
			return app.AssetInfo{Name: ref.Name, Hash: e.hash, Size: e.size, ModTime: e.modTime}, nil
		}
		// It changed while it was hashed: look again.
		var serr error
		if st, serr = x.stat(ref.Name); serr != nil {
			return app.AssetInfo{}, serr
		}
	}
	return app.AssetInfo{}, errs.Unavailable("%s keeps changing while it is hashed; try again when it is written", x.path(ref.Name))
}

func (x *AssetIndex) current(name string, st fs.FileInfo) (assetEntry, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.files[name]
	return e, ok && e.size == st.Size() && e.modTime.Equal(st.ModTime())
}

// hash reads the file and records its sha512, unless it changed while it
// was read (then the entry returned has size -1).
func (x *AssetIndex) hash(ref bootapi.AssetRef, st fs.FileInfo) (assetEntry, error) {
	p := x.path(ref.Name)
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return assetEntry{}, errs.NotFound("no file %s", p)
	}
	if err != nil {
		return assetEntry{}, errs.Internal("opening %s: %v", p, err)
	}
	defer f.Close()
	h := sha512.New()
	if _, err := io.Copy(h, f); err != nil {
		return assetEntry{}, errs.Internal("reading %s: %v", p, err)
	}
	after, err := f.Stat()
	if err != nil {
		return assetEntry{}, errs.Internal("reading %s: %v", p, err)
	}
	assetHashes.WithLabelValues(ref.Kind).Inc()
	if after.Size() != st.Size() || !after.ModTime().Equal(st.ModTime()) {
		return assetEntry{size: -1}, nil
	}
	e := assetEntry{size: st.Size(), modTime: st.ModTime(), hash: "sha512-" + hex.EncodeToString(h.Sum(nil))}
	x.mu.Lock()
	old, had := x.files[ref.Name]
	x.files[ref.Name] = e
	x.mu.Unlock()
	if had && old.hash != e.hash {
		assetChanges.Inc()
		x.log.Info("asset changed", "asset", ref.Name, "size", e.size, "hash", e.hash, "was", old.hash)
		if x.onChange != nil {
			x.onChange(ref.Name)
		}
	} else if !had {
		x.log.Debug("asset indexed", "asset", ref.Name, "size", e.size, "hash", e.hash)
	}
	return e, nil
}

// Open opens an asset for serving, with the info of exactly the file
// opened (a file replaced between the lookup and the open is looked up
// again). The caller closes it.
func (x *AssetIndex) Open(ctx context.Context, name string) (app.AssetFile, error) {
	for range maxRehash {
		info, err := x.Lookup(ctx, name)
		if err != nil {
			return nil, err
		}
		f, err := os.Open(x.path(name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the lookup
		}
		if err != nil {
			return nil, errs.Internal("opening %s: %v", x.path(name), err)
		}
		st, err := f.Stat()
		if err == nil && st.Size() == info.Size && st.ModTime().Equal(info.ModTime) {
			return assetFile{File: f, info: info}, nil
		}
		f.Close()
	}
	return nil, errs.Unavailable("%s keeps changing while it is served; try again when it is written", x.path(name))
}

type assetFile struct {
	*os.File
	info app.AssetInfo
}

func (f assetFile) Info() app.AssetInfo { return f.info }

// Scan indexes (hashes) every asset file under the directory, so that
// the first machines do not wait for it, and rehashes those that changed.
// It returns what it found, by name; files whose names are not asset
// names are skipped (and listed in ignored).
func (x *AssetIndex) Scan(ctx context.Context) (found []app.AssetInfo, ignored []string, err error) {
	if x.dir == "" {
		return nil, nil, nil
	}
	for _, sub := range []string{bootapi.AgentDir, bootapi.SysextDir, bootapi.FlatcarDir} {
		root := filepath.Join(x.dir, sub)
		werr := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) && p == root {
					return nil
				}
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if d.IsDir() {
				return nil
			}
			rel, _ := filepath.Rel(x.dir, p)
			name := filepath.ToSlash(rel)
			if strings.HasPrefix(d.Name(), ".") {
				return nil // a download or write in progress
			}
			if _, perr := bootapi.ParseAsset(name); perr != nil {
				ignored = append(ignored, name)
				return nil
			}
			info, lerr := x.Lookup(ctx, name)
			if lerr != nil {
				x.log.Warn("asset not indexed", "asset", name, "err", lerr)
				return nil
			}
			found = append(found, info)
			return nil
		})
		if werr != nil {
			return found, ignored, werr
		}
	}
	sort.Slice(found, func(i, j int) bool { return found[i].Name < found[j].Name })
	return found, ignored, nil
}

// Watch rescans the directory every interval until ctx ends, so that a file
// replaced in place is rehashed (and the Ignition cache dropped) even if
// nothing asks for it.
func (x *AssetIndex) Watch(ctx context.Context, interval time.Duration) {
	if x.dir == "" || interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, _, err := x.Scan(ctx); err != nil && ctx.Err() == nil {
				x.log.Warn("rescanning the assets directory failed", "dir", x.dir, "err", err)
			}
		}
	}
}
