package app

import "context"

// ListCatalog lists the supported Kubernetes versions. Org is the caller's
// organization, validated like every request's, or empty for a platform
// administrator (who belongs to none); the catalog is platform-wide.
type ListCatalog struct {
	Org string
}

// ListCatalog reads the read model.
func (a *App) ListCatalog(_ context.Context, q ListCatalog) (CatalogRecord, error) {
	if q.Org != "" {
		if err := ids(q.Org); err != nil {
			return CatalogRecord{}, err
		}
	}
	return a.Model.Catalog(), nil
}
