package app

import (
	"context"

	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
)

// AddCatalogVersion adds a Kubernetes version to the platform's catalog.
// It is a platform administrator's command (the gateway decides who may).
type AddCatalogVersion struct {
	Version string
}

// AddCatalogVersion appends catalog.version_added; the
// PlanPlatformRevisions event handler then raises the patch version of
// every pool on that minor.
func (a *App) AddCatalogVersion(ctx context.Context, cmd AddCatalogVersion) (CatalogRecord, error) {
	if _, err := actor(ctx); err != nil {
		return CatalogRecord{}, err
	}
	rec, _, err := execute[CatalogRecord](ctx, a, CatalogRef, 0,
		func(_ context.Context, r *CatalogRecord) ([]any, error) {
			return r.State.AddVersion(catalog.AddVersion{Version: cmd.Version})
		})
	if err != nil {
		return CatalogRecord{}, err
	}
	return *rec, nil
}
