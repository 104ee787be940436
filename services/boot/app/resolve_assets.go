package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/boot/api"
)

// AssetInfo is what the asset index knows of one file.
type AssetInfo struct {
	Name    string // api.ParseAsset's name
	Hash    string // sha512-<hex>
	Size    int64
	ModTime time.Time
}

// AssetFile is an opened asset and the info of exactly that file.
type AssetFile interface {
	io.ReadSeekCloser
	Info() AssetInfo
}

// Assets is the index of the files under the assets directory.
type Assets interface {
	// Lookup returns an asset's hash and size: errs.KindNotFound when it
	// is missing, *AssetFetchError when the mirror could not provide it,
	// *AssetPendingError when the mirror download outlasts ctx.
	Lookup(ctx context.Context, name string) (AssetInfo, error)
	// Open opens an asset for serving; the same errors as Lookup.
	Open(ctx context.Context, name string) (AssetFile, error)
}

// AssetFetchError says that fetching an asset from the mirror failed.
type AssetFetchError struct {
	Name, URL string
	Err       error
}

func (e *AssetFetchError) Error() string {
	return fmt.Sprintf("fetching %s from the sysext mirror failed: %v", e.Name, e.Err)
}

func (e *AssetFetchError) Unwrap() error { return e.Err }

// AssetPendingError says that an asset is still being fetched from the
// mirror.
type AssetPendingError struct{ Name, URL string }

func (e *AssetPendingError) Error() string {
	return fmt.Sprintf("%s is being fetched from the sysext mirror (%s)", e.Name, e.URL)
}

// ResolveWait bounds how long a resolve waits for a sysext the mirror is
// fetching before it answers "pending" (well within a caller's 10 s).
const ResolveWait = 4 * time.Second

// ResolveAssets answers cmd.boot.assets.resolve: for each name its URL,
// hash and size, or why the boot service does not have it, in words that
// say what to do.
func (a *App) ResolveAssets(ctx context.Context, q api.ResolveAssetsRequest) (api.ResolveAssetsReply, error) {
	var f errs.Fields
	if len(q.Names) == 0 || len(q.Names) > api.MaxResolveNames {
		f.Add("names", "must name 1 to %d assets", api.MaxResolveNames)
	}
	for i, n := range q.Names {
		if _, err := api.ParseAsset(n); err != nil {
			f.Add(fmt.Sprintf("names[%d]", i), "%v", err)
		}
	}
	if err := f.Err(); err != nil {
		return api.ResolveAssetsReply{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, ResolveWait)
	defer cancel()
	out := api.ResolveAssetsReply{Assets: make([]api.Asset, len(q.Names))}
	for i, n := range q.Names {
		out.Assets[i] = a.resolveAsset(wctx, n)
	}
	return out, nil
}

func (a *App) resolveAsset(ctx context.Context, name string) api.Asset {
	ref, _ := api.ParseAsset(name)
	as := api.Asset{Name: name, Path: "/" + name}
	if a.Settings.PublicURL != "" {
		as.URL = strings.TrimSuffix(a.Settings.PublicURL, "/") + as.Path
	}
	if a.Assets == nil { // not served then (ports.RegisterQueries); kept safe all the same
		as.Status, as.Reason = api.AssetMissing, a.missingReason(ref, nil)
		return as
	}
	info, err := a.Assets.Lookup(ctx, name)
	var pending *AssetPendingError
	switch {
	case err == nil:
		as.Status, as.Hash, as.Size = api.AssetReady, info.Hash, info.Size
	case errors.As(err, &pending):
		as.Status = api.AssetPending
		as.Reason = fmt.Sprintf("the boot service is fetching the Kubernetes sysext %s from its sysext mirror (%s); try again in a minute",
			path.Base(name), pending.URL)
	default:
		as.Status, as.Reason = api.AssetMissing, a.missingReason(ref, err)
		a.Log.WarnContext(ctx, "asset asked for is missing", "asset", name, "reason", as.Reason)
	}
	return as
}

// missingReason says, for a person, why an asset is missing and what to do.
func (a *App) missingReason(ref api.AssetRef, err error) string {
	file := path.Base(ref.Name)
	detail := ""
	if err != nil {
		detail = " (" + errs.As(err).Message + ")"
	}
	noDir := a.Settings.AssetsDir == ""
	switch ref.Kind {
	case api.KindAgent:
		if noDir {
			return fmt.Sprintf("the boot service has no agent binary %s: it has no assets directory; set ANVIL_BOOT_ASSETS_DIR (--assets-dir) to a directory holding %s (`make assets` builds one)", file, ref.Name)
		}
		if errs.Is(err, errs.KindNotFound) {
			detail = ""
		}
		return fmt.Sprintf("the boot service has no agent binary %s in its assets directory %s (ANVIL_BOOT_ASSETS_DIR)%s; run `make assets`, which builds it for amd64 and arm64, or put anvil-agent built for linux/%s there",
			ref.Name, a.Settings.AssetsDir, detail, ref.GoArch)
	case api.KindSysext:
		var fetch *AssetFetchError
		if errors.As(err, &fetch) {
			return fmt.Sprintf("the boot service has no Kubernetes sysext %s for this version, and fetching it from the sysext mirror failed: %v; check ANVIL_BOOT_SYSEXT_MIRROR, or build it with `make sysext KUBERNETES_VERSION=%s`",
				file, fetch.Err, ref.Version)
		}
		if noDir {
			return fmt.Sprintf("the boot service has no Kubernetes sysext %s for this version: it has no assets directory; set ANVIL_BOOT_ASSETS_DIR (--assets-dir), then build it with `make sysext KUBERNETES_VERSION=%s` or set ANVIL_BOOT_SYSEXT_MIRROR",
				file, ref.Version)
		}
		return fmt.Sprintf("the boot service has no Kubernetes sysext %s for this version; build it with `make sysext KUBERNETES_VERSION=%s` or set ANVIL_BOOT_SYSEXT_MIRROR%s",
			file, ref.Version, detail)
	default:
		if noDir {
			return fmt.Sprintf("the boot service has no Flatcar image %s: it has no assets directory (ANVIL_BOOT_ASSETS_DIR)", ref.Name)
		}
		return fmt.Sprintf("the boot service has no Flatcar image %s%s; put the Flatcar release's PXE images in %s/%s/%s/%s/ (see docs/boot.md)",
			ref.Name, detail, a.Settings.AssetsDir, api.FlatcarDir, ref.Channel, ref.Version)
	}
}

// OpenAsset opens an asset for GET /assets/…, /sysext/… and /flatcar/….
// A name that is not an asset name, or a missing file, is
// errs.KindNotFound; a mirror download that failed or is still under way
// is errs.KindUnavailable (Ignition retries those).
func (a *App) OpenAsset(ctx context.Context, name string) (AssetFile, error) {
	if _, err := api.ParseAsset(name); err != nil {
		return nil, errs.NotFound("no such asset: %v", err)
	}
	if a.Assets == nil {
		return nil, errs.NotFound("this boot service has no assets directory (ANVIL_BOOT_ASSETS_DIR)")
	}
	f, err := a.Assets.Open(ctx, name)
	var pending *AssetPendingError
	var fetch *AssetFetchError
	switch {
	case err == nil:
		assetsServed.WithLabelValues(kindOf(name)).Inc()
		return f, nil
	case errors.As(err, &pending), errors.As(err, &fetch):
		a.Log.WarnContext(ctx, "asset not served", "asset", name, "err", err)
		return nil, errs.Unavailable("%v", err)
	case errs.Is(err, errs.KindValidation):
		return nil, errs.NotFound("%v", err)
	case errs.Is(err, errs.KindNotFound):
		a.Log.WarnContext(ctx, "asset asked for is missing", "asset", name, "err", err)
	}
	return nil, err
}

func kindOf(name string) string {
	ref, err := api.ParseAsset(name)
	if err != nil {
		return "unknown"
	}
	return ref.Kind
}
