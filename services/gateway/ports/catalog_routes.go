package ports

import (
	"context"
	"net/http"

	"github.com/anvil-fleet/anvil/services/gateway/domain"
	rev "github.com/anvil-fleet/anvil/services/revisions/api"
)

// catalogRoutes are the platform-wide Kubernetes version catalog: every
// token may read it (it is what pools choose their minor from), and only
// the platform administrator (the bootstrap admin token) may add to it,
// because a version added there raises the patch version of every pool of
// every organization on its minor.
func (h *handler) catalogRoutes() []route {
	const catalog = "/api/v1/catalog"
	return []route{
		{Method: "GET", Path: catalog, Min: domain.RoleViewer, Status: http.StatusOK, Response: rev.Catalog{},
			Summary: "List the Kubernetes versions pools can run, by minor (the catalog is platform-wide)",
			Decode: func(ctx context.Context, _ *http.Request) (any, error) {
				// The bootstrap admin belongs to no organization.
				return rev.ListCatalogRequest{Org: principalOf(ctx).Org}, nil
			},
			Endpoint: func(ctx context.Context, req any) (any, error) {
				return rev.ListCatalog(ctx, h.NC, req.(rev.ListCatalogRequest))
			}},
		{Method: "POST", Path: catalog + "/versions", Min: domain.RolePlatform, Status: http.StatusCreated,
			Request: rev.AddCatalogVersionRequest{}, Response: rev.Catalog{},
			Summary: "Add a Kubernetes patch version (x.y.z) to the catalog (bootstrap admin). Every pool on its minor gets a " +
				"platform-made revision to it, applied at once by pools with auto_apply_platform_revisions (in their " +
				"maintenance windows); pools whose control plane is older are held back. 409 if it is listed already.",
			Decode: func(_ context.Context, r *http.Request) (any, error) {
				var req rev.AddCatalogVersionRequest
				if err := readJSON(r, h.BodyLimit, &req); err != nil {
					return nil, err
				}
				return req, nil
			},
			Endpoint: func(ctx context.Context, req any) (any, error) {
				return rev.AddCatalogVersion(ctx, h.NC, req.(rev.AddCatalogVersionRequest))
			}},
	}
}
