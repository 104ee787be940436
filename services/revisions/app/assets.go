package app

import (
	"context"
	"strings"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
	"github.com/anvil-fleet/anvil/services/revisions/domain/render"
)

// Assets resolves the files a rendered config makes machines fetch: for
// each asset name (bootapi.AgentAsset, bootapi.SysextAsset) its URL, hash
// and size, or why it is missing. In production it is the boot service's
// cmd.boot.assets.resolve, which serves those files.
type Assets interface {
	ResolveAssets(ctx context.Context, names []string) ([]bootapi.Asset, error)
}

// AssetSettings are how the revisions service points machines at files.
type AssetSettings struct {
	// BootURL is the boot service's public URL as this service knows it: a
	// resolved asset without a URL of its own is put under it.
	BootURL string
	// AgentURL and AgentHash, when set, pin the agent binary somewhere
	// else than the boot service (both are required together); the agent
	// is then not resolved.
	AgentURL, AgentHash string
	// GoArch is the machines' architecture: amd64 (default) or arm64.
	GoArch string
}

// renderOptions resolves the files a machine booting rev fetches (the
// agent binary and the Kubernetes sysext of rev's version) and returns the
// render options with their URLs and hashes. A file the boot service does
// not have is an error naming what to do: a missing sysext is a validation
// error on kubernetes.version, a missing agent a conflict (the platform is
// not set up), a sysext still being fetched from the mirror or the boot
// service not answering is unavailable (retry).
func (a *App) renderOptions(ctx context.Context, rev pool.Revision) (render.Options, error) {
	o := a.RenderOptions
	s := a.AssetSettings
	goarch := s.GoArch
	if goarch == "" {
		goarch = "amd64"
	}
	arch, err := bootapi.SysextArch(goarch)
	if err != nil {
		return render.Options{}, errs.Internal("assets: %v", err)
	}
	o.Arch = arch
	sysext, err := bootapi.SysextAsset(rev.Config.Kubernetes.Version, arch)
	if err != nil {
		return render.Options{}, errs.Invalid("kubernetes.version", "%v", err)
	}
	names := []string{sysext}
	agent := ""
	if s.AgentURL != "" {
		o.AgentURL, o.AgentHash = s.AgentURL, s.AgentHash
	} else {
		if agent, err = bootapi.AgentAsset(goarch); err != nil {
			return render.Options{}, errs.Internal("assets: %v", err)
		}
		names = append(names, agent)
	}
	if a.Assets == nil {
		return render.Options{}, errs.Internal("assets: no asset resolver is configured")
	}
	got, err := a.Assets.ResolveAssets(ctx, names)
	if err != nil {
		if errs.Is(err, errs.KindUnavailable) {
			return render.Options{}, errs.Unavailable("no boot service answered which files it serves (%v); a revision is checked against them before it is saved or rendered. A boot service answers when it runs with an assets directory (ANVIL_BOOT_ASSETS_DIR; `make assets` builds one): try again once one does", errs.As(err).Message)
		}
		return render.Options{}, errs.Internal("asking the boot service for %v: %v", names, err)
	}
	if len(got) != len(names) {
		return render.Options{}, errs.Internal("the boot service answered %d assets for %d names", len(got), len(names))
	}
	for i, asset := range got {
		if asset.Name != names[i] {
			return render.Options{}, errs.Internal("the boot service answered asset %q for %q", asset.Name, names[i])
		}
		switch asset.Status {
		case bootapi.AssetReady:
		case bootapi.AssetPending:
			return render.Options{}, errs.Unavailable("%s", asset.Reason)
		default:
			if asset.Name == sysext {
				return render.Options{}, errs.Invalid("kubernetes.version", "%s", asset.Reason)
			}
			return render.Options{}, errs.Conflict("%s", asset.Reason)
		}
		u := asset.URL
		if u == "" {
			u = strings.TrimSuffix(s.BootURL, "/") + asset.Path
		}
		switch asset.Name {
		case sysext:
			o.SysextURL, o.SysextHash = u, asset.Hash
		case agent:
			o.AgentURL, o.AgentHash = u, asset.Hash
		}
	}
	return o, nil
}

// checkAssets makes sure the boot service can serve the files of every
// revision that payloads create or ask to apply, before they are appended:
// a revision a machine cannot boot is refused when it is saved, not when a
// machine fails to boot it. p is the pool as it was before payloads.
func (a *App) checkAssets(ctx context.Context, p *pool.Pool, payloads []any) error {
	created := map[int]pool.Revision{}
	checked := map[int]bool{}
	check := func(rev pool.Revision) error {
		if checked[rev.Number] {
			return nil
		}
		checked[rev.Number] = true
		_, err := a.renderOptions(ctx, rev)
		return err
	}
	for _, pl := range payloads {
		switch e := pl.(type) {
		case pool.RevisionCreated:
			created[e.Revision.Number] = e.Revision
			if err := check(e.Revision); err != nil {
				return err
			}
		case pool.ApplyRequested:
			rev, ok := created[e.Revision]
			if !ok {
				var err error
				if rev, err = p.Revision(e.Revision); err != nil {
					return err
				}
			}
			if err := check(rev); err != nil {
				return err
			}
		}
	}
	return nil
}
