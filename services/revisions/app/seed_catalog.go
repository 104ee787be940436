package app

import "context"

// SeedCatalog seeds the Kubernetes version catalog with the
// configured versions on the service's first start; once the catalog
// exists it changes nothing (administrators add versions with
// AddCatalogVersion). Replicas starting together race harmlessly: one
// append wins, the others re-decide and find the catalog seeded. It
// returns the catalog and whether this call seeded it.
func (a *App) SeedCatalog(ctx context.Context, versions []string) (CatalogRecord, bool, error) {
	rec, payloads, err := execute[CatalogRecord](ctx, a, CatalogRef, 0,
		func(_ context.Context, r *CatalogRecord) ([]any, error) {
			return r.State.Seed(versions)
		})
	if err != nil {
		return CatalogRecord{}, false, err
	}
	return *rec, len(payloads) > 0, nil
}
