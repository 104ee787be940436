package client

import (
	"context"
	"iter"
	"net/url"
	"strconv"
)

// orgCall is call for a path of the client's organization.
func (c *Client) orgCall(ctx context.Context, method string, parts []string, query url.Values, body, out any, opts []CallOption) error {
	p, err := c.orgPath(parts...)
	if err != nil {
		return err
	}
	return c.call(ctx, request{method: method, path: p, query: query, body: body}, out, opts...)
}

func one[T any](ctx context.Context, c *Client, method string, parts []string, query url.Values, body any, opts []CallOption) (*T, error) {
	var out T
	if err := c.orgCall(ctx, method, parts, query, body, &out, opts); err != nil {
		return nil, err
	}
	return &out, nil
}

// all iterates over every item of a list, page by page, following next
// from the filter's cursor. The iteration stops at the first error, which
// it yields.
func all[T any](ctx context.Context, cursor string, page func(ctx context.Context, cursor string) (*Page[T], error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for {
			p, err := page(ctx, cursor)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range p.Items {
				if !yield(it, nil) {
					return
				}
			}
			if p.Next == "" || p.Next == cursor {
				return
			}
			cursor = p.Next
		}
	}
}

// ---- system ----

// Version is the gateway's version (GET /version; no token needed).
func (c *Client) Version(ctx context.Context) (*VersionInfo, error) {
	var v VersionInfo
	if err := c.call(ctx, request{method: "GET", path: "/version", noAuth: true}, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Healthz reports whether the gateway is alive.
func (c *Client) Healthz(ctx context.Context) error {
	return c.call(ctx, request{method: "GET", path: "/healthz", noAuth: true, accept: "text/plain"}, nil)
}

// Readyz reports whether the gateway and what it depends on answer.
func (c *Client) Readyz(ctx context.Context) error {
	return c.call(ctx, request{method: "GET", path: "/readyz", noAuth: true, accept: "text/plain"}, nil)
}

// OpenAPI is the OpenAPI document the gateway serves.
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	var b []byte
	err := c.call(ctx, request{method: "GET", path: "/openapi.json", noAuth: true}, &b)
	return b, err
}

// ---- the catalog ----

// GetCatalog is the platform-wide Kubernetes version catalog.
func (c *Client) GetCatalog(ctx context.Context) (*Catalog, error) {
	var out Catalog
	if err := c.call(ctx, request{method: "GET", path: "/api/v1/catalog"}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AddCatalogVersion adds a Kubernetes patch version (x.y.z) to the
// catalog (the bootstrap admin only).
func (c *Client) AddCatalogVersion(ctx context.Context, version string, opts ...CallOption) (*Catalog, error) {
	var out Catalog
	if err := c.call(ctx, request{method: "POST", path: "/api/v1/catalog/versions", body: map[string]string{"version": version}}, &out, opts...); err != nil {
		return nil, err
	}
	return &out, nil
}

// ---- organizations ----

// ListOrgs lists the organizations the token may see, by id.
func (c *Client) ListOrgs(ctx context.Context, o ListOptions) (*Page[Org], error) {
	var out Page[Org]
	if err := c.call(ctx, request{method: "GET", path: "/api/v1/orgs", query: queryOf(o)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AllOrgs iterates over every organization the token may see.
func (c *Client) AllOrgs(ctx context.Context, o ListOptions) iter.Seq2[Org, error] {
	return all(ctx, o.Cursor, func(ctx context.Context, cursor string) (*Page[Org], error) {
		o.Cursor = cursor
		return c.ListOrgs(ctx, o)
	})
}

// CreateOrg creates an organization (the bootstrap admin only).
func (c *Client) CreateOrg(ctx context.Context, o OrgCreate, opts ...CallOption) (*Org, error) {
	var out Org
	if err := c.call(ctx, request{method: "POST", path: "/api/v1/orgs", body: o}, &out, opts...); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetOrg reads the client's organization (At: as it was then).
func (c *Client) GetOrg(ctx context.Context, opts ...CallOption) (*Org, error) {
	return one[Org](ctx, c, "GET", nil, nil, nil, opts)
}

// RenameOrg changes the organization's display name.
func (c *Client) RenameOrg(ctx context.Context, displayName string, opts ...CallOption) (*Org, error) {
	return one[Org](ctx, c, "PATCH", nil, nil, map[string]string{"display_name": displayName}, opts)
}

// ---- tokens ----

// ListTokens lists the organization's API tokens, oldest first.
func (c *Client) ListTokens(ctx context.Context, o ListOptions) (*Page[TokenInfo], error) {
	return one[Page[TokenInfo]](ctx, c, "GET", []string{"tokens"}, queryOf(o), nil, nil)
}

// AllTokens iterates over every API token.
func (c *Client) AllTokens(ctx context.Context, o ListOptions) iter.Seq2[TokenInfo, error] {
	return all(ctx, o.Cursor, func(ctx context.Context, cursor string) (*Page[TokenInfo], error) {
		o.Cursor = cursor
		return c.ListTokens(ctx, o)
	})
}

// CreateToken issues an API token; its secret is in the answer only.
func (c *Client) CreateToken(ctx context.Context, t TokenCreate, opts ...CallOption) (*TokenIssued, error) {
	return one[TokenIssued](ctx, c, "POST", []string{"tokens"}, nil, t, opts)
}

// RevokeToken revokes an API token; it answers it, status revoked.
func (c *Client) RevokeToken(ctx context.Context, id string, opts ...CallOption) (*TokenInfo, error) {
	return one[TokenInfo](ctx, c, "DELETE", []string{"tokens", id}, nil, nil, opts)
}

// ListEnrollmentTokens lists the organization's enrollment tokens.
func (c *Client) ListEnrollmentTokens(ctx context.Context, o ListOptions) (*Page[TokenInfo], error) {
	return one[Page[TokenInfo]](ctx, c, "GET", []string{"enrollment-tokens"}, queryOf(o), nil, nil)
}

// AllEnrollmentTokens iterates over every enrollment token.
func (c *Client) AllEnrollmentTokens(ctx context.Context, o ListOptions) iter.Seq2[TokenInfo, error] {
	return all(ctx, o.Cursor, func(ctx context.Context, cursor string) (*Page[TokenInfo], error) {
		o.Cursor = cursor
		return c.ListEnrollmentTokens(ctx, o)
	})
}

// CreateEnrollmentToken issues an enrollment token.
func (c *Client) CreateEnrollmentToken(ctx context.Context, t EnrollmentTokenCreate, opts ...CallOption) (*TokenIssued, error) {
	return one[TokenIssued](ctx, c, "POST", []string{"enrollment-tokens"}, nil, t, opts)
}

// RevokeEnrollmentToken revokes an enrollment token.
func (c *Client) RevokeEnrollmentToken(ctx context.Context, id string, opts ...CallOption) (*TokenInfo, error) {
	return one[TokenInfo](ctx, c, "DELETE", []string{"enrollment-tokens", id}, nil, nil, opts)
}

// ---- machines ----

// ListMachines lists one page of machines.
func (c *Client) ListMachines(ctx context.Context, f MachineFilter) (*Page[Machine], error) {
	return one[Page[Machine]](ctx, c, "GET", []string{"machines"}, queryOf(f), nil, nil)
}

// AllMachines iterates over every machine the filter selects.
func (c *Client) AllMachines(ctx context.Context, f MachineFilter) iter.Seq2[Machine, error] {
	return all(ctx, f.Cursor, func(ctx context.Context, cursor string) (*Page[Machine], error) {
		f.Cursor = cursor
		return c.ListMachines(ctx, f)
	})
}

// PreregisterMachine registers a machine before its first boot.
func (c *Client) PreregisterMachine(ctx context.Context, m MachinePreregister, opts ...CallOption) (*Machine, error) {
	return one[Machine](ctx, c, "POST", []string{"machines"}, nil, m, opts)
}

// GetMachine reads a machine (At: as it was then).
func (c *Client) GetMachine(ctx context.Context, uuid string, opts ...CallOption) (*Machine, error) {
	return one[Machine](ctx, c, "GET", []string{"machines", uuid}, nil, nil, opts)
}

// UpdateMachine changes a machine's hostname, labels, upgrade index or
// control-plane flag.
func (c *Client) UpdateMachine(ctx context.Context, uuid string, p MachinePatch, opts ...CallOption) (*Machine, error) {
	return one[Machine](ctx, c, "PATCH", []string{"machines", uuid}, nil, p, opts)
}

// DeleteMachine deletes a machine (policy "": graceful). It answers the
// machine in status deleting while its node is drained and removed, or,
// removed at once, as it last was with Deleted set.
func (c *Client) DeleteMachine(ctx context.Context, uuid string, policy DeletionPolicy, opts ...CallOption) (*Machine, error) {
	q := url.Values{}
	if policy != "" {
		q.Set("policy", string(policy))
	}
	return one[Machine](ctx, c, "DELETE", []string{"machines", uuid}, q, nil, opts)
}

// AssignMachine assigns a machine to a pool.
func (c *Client) AssignMachine(ctx context.Context, uuid, pool string, opts ...CallOption) (*Machine, error) {
	return one[Machine](ctx, c, "POST", []string{"machines", uuid, "assign"}, nil, map[string]string{"pool": pool}, opts)
}

// UnassignMachine takes a machine out of its pool (its node is drained
// first).
func (c *Client) UnassignMachine(ctx context.Context, uuid string, opts ...CallOption) (*Machine, error) {
	return one[Machine](ctx, c, "POST", []string{"machines", uuid, "unassign"}, nil, nil, opts)
}

// ForceUnassignMachine takes a machine out of its pool without a drain.
func (c *Client) ForceUnassignMachine(ctx context.Context, uuid string, opts ...CallOption) (*Machine, error) {
	return one[Machine](ctx, c, "POST", []string{"machines", uuid, "force-unassign"}, nil, nil, opts)
}

// EnterMaintenance puts a machine into maintenance (cordon and drain).
func (c *Client) EnterMaintenance(ctx context.Context, uuid string, opts ...CallOption) (*Machine, error) {
	return one[Machine](ctx, c, "POST", []string{"machines", uuid, "maintenance", "on"}, nil, nil, opts)
}

// ExitMaintenance takes a machine out of maintenance.
func (c *Client) ExitMaintenance(ctx context.Context, uuid string, opts ...CallOption) (*Machine, error) {
	return one[Machine](ctx, c, "POST", []string{"machines", uuid, "maintenance", "off"}, nil, nil, opts)
}

// AbortDeletion aborts a graceful deletion while it is still preparing.
func (c *Client) AbortDeletion(ctx context.Context, uuid string, opts ...CallOption) (*Machine, error) {
	return one[Machine](ctx, c, "POST", []string{"machines", uuid, "abort-deletion"}, nil, nil, opts)
}

// GetMachineRevisions is what the control plane knows of a machine's pool
// revisions.
func (c *Client) GetMachineRevisions(ctx context.Context, uuid string) (*MachineRevisions, error) {
	return one[MachineRevisions](ctx, c, "GET", []string{"machines", uuid, "revisions"}, nil, nil, nil)
}

// GetMachineStartupLog is a machine's last startup log (IsNotFound while
// its agent never reported).
func (c *Client) GetMachineStartupLog(ctx context.Context, uuid string) (*StartupLog, error) {
	return one[StartupLog](ctx, c, "GET", []string{"machines", uuid, "startup-log"}, nil, nil, nil)
}

// ---- clusters ----

// ListClusters lists the organization's clusters, by name.
func (c *Client) ListClusters(ctx context.Context, o ListOptions) (*Page[Cluster], error) {
	return one[Page[Cluster]](ctx, c, "GET", []string{"clusters"}, queryOf(o), nil, nil)
}

// AllClusters iterates over every cluster.
func (c *Client) AllClusters(ctx context.Context, o ListOptions) iter.Seq2[Cluster, error] {
	return all(ctx, o.Cursor, func(ctx context.Context, cursor string) (*Page[Cluster], error) {
		o.Cursor = cursor
		return c.ListClusters(ctx, o)
	})
}

// CreateCluster creates a cluster.
func (c *Client) CreateCluster(ctx context.Context, cl ClusterCreate, opts ...CallOption) (*Cluster, error) {
	return one[Cluster](ctx, c, "POST", []string{"clusters"}, nil, cl, opts)
}

// GetCluster reads a cluster (At: as it was then).
func (c *Client) GetCluster(ctx context.Context, name string, opts ...CallOption) (*Cluster, error) {
	return one[Cluster](ctx, c, "GET", []string{"clusters", name}, nil, nil, opts)
}

// UpdateCluster changes a cluster's endpoint, control-plane version or CA
// hash.
func (c *Client) UpdateCluster(ctx context.Context, name string, p ClusterPatch, opts ...CallOption) (*ClusterChange, error) {
	return one[ClusterChange](ctx, c, "PATCH", []string{"clusters", name}, nil, p, opts)
}

// RotateClusterKubeconfig replaces the kubeconfig nodes are cordoned and
// drained with.
func (c *Client) RotateClusterKubeconfig(ctx context.Context, name, kubeconfig string, opts ...CallOption) (*Cluster, error) {
	return one[Cluster](ctx, c, "PUT", []string{"clusters", name, "kubeconfig"}, nil, map[string]string{"kubeconfig": kubeconfig}, opts)
}

// RotateClusterBootstrapToken replaces the join token.
func (c *Client) RotateClusterBootstrapToken(ctx context.Context, name, token string, opts ...CallOption) (*Cluster, error) {
	return one[Cluster](ctx, c, "PUT", []string{"clusters", name, "bootstrap-token"}, nil, map[string]string{"bootstrap_token": token}, opts)
}

// DeleteCluster deletes a cluster (refused while pools remain); it
// answers it as it was, Deleted set.
func (c *Client) DeleteCluster(ctx context.Context, name string, opts ...CallOption) (*Cluster, error) {
	return one[Cluster](ctx, c, "DELETE", []string{"clusters", name}, nil, nil, opts)
}

// ---- pools and revisions ----

// ListPools lists the organization's pools, by name.
func (c *Client) ListPools(ctx context.Context, f PoolFilter) (*Page[PoolSummary], error) {
	return one[Page[PoolSummary]](ctx, c, "GET", []string{"pools"}, queryOf(f), nil, nil)
}

// AllPools iterates over every pool the filter selects.
func (c *Client) AllPools(ctx context.Context, f PoolFilter) iter.Seq2[PoolSummary, error] {
	return all(ctx, f.Cursor, func(ctx context.Context, cursor string) (*Page[PoolSummary], error) {
		f.Cursor = cursor
		return c.ListPools(ctx, f)
	})
}

// CreatePool creates a pool (revision 1); with Apply it is rolled out.
func (c *Client) CreatePool(ctx context.Context, p PoolCreate, opts ...CallOption) (*PoolChange, error) {
	return one[PoolChange](ctx, c, "POST", []string{"pools"}, nil, p, opts)
}

// GetPool reads a pool (At: as it was then).
func (c *Client) GetPool(ctx context.Context, name string, opts ...CallOption) (*Pool, error) {
	return one[Pool](ctx, c, "GET", []string{"pools", name}, nil, nil, opts)
}

// UpdatePool changes a pool: a change that needs a reboot makes a new
// revision; with Apply it is rolled out.
func (c *Client) UpdatePool(ctx context.Context, name string, p PoolUpdate, opts ...CallOption) (*PoolChange, error) {
	return one[PoolChange](ctx, c, "PUT", []string{"pools", name}, nil, p, opts)
}

// DeletePool deletes a pool (refused while machines are assigned); it
// answers it as it was, Deleted set.
func (c *Client) DeletePool(ctx context.Context, name string, opts ...CallOption) (*Pool, error) {
	return one[Pool](ctx, c, "DELETE", []string{"pools", name}, nil, nil, opts)
}

// ListPoolRevisions lists a pool's revisions, oldest first.
func (c *Client) ListPoolRevisions(ctx context.Context, pool string, o ListOptions) (*RevisionList, error) {
	return one[RevisionList](ctx, c, "GET", []string{"pools", pool, "revisions"}, queryOf(o), nil, nil)
}

// AllPoolRevisions iterates over every revision of a pool.
func (c *Client) AllPoolRevisions(ctx context.Context, pool string, o ListOptions) iter.Seq2[RevisionSummary, error] {
	return all(ctx, o.Cursor, func(ctx context.Context, cursor string) (*Page[RevisionSummary], error) {
		o.Cursor = cursor
		l, err := c.ListPoolRevisions(ctx, pool, o)
		if err != nil {
			return nil, err
		}
		return &l.Page, nil
	})
}

// GetPoolRevision reads one revision.
func (c *Client) GetPoolRevision(ctx context.Context, pool string, n int) (*Revision, error) {
	return one[Revision](ctx, c, "GET", []string{"pools", pool, "revisions", strconv.Itoa(n)}, nil, nil, nil)
}

// DiffPoolRevisions compares revision n with revision against: the
// changed fields and a unified diff of the rendered Ignition.
func (c *Client) DiffPoolRevisions(ctx context.Context, pool string, n, against int) (*RevisionDiff, error) {
	q := url.Values{}
	if against > 0 {
		q.Set("against", strconv.Itoa(against))
	}
	return one[RevisionDiff](ctx, c, "GET", []string{"pools", pool, "revisions", strconv.Itoa(n), "diff"}, q, nil, nil)
}

// GetPoolRevisionIgnition is a revision's rendered Ignition.
func (c *Client) GetPoolRevisionIgnition(ctx context.Context, pool string, n int) (*RevisionIgnition, error) {
	return one[RevisionIgnition](ctx, c, "GET", []string{"pools", pool, "revisions", strconv.Itoa(n), "ignition"}, nil, nil, nil)
}

// ApplyPoolRevision rolls revision n out: an older one is a rollback, the
// current one reboots the machines again.
func (c *Client) ApplyPoolRevision(ctx context.Context, pool string, n int, opts ...CallOption) (*PoolChange, error) {
	return one[PoolChange](ctx, c, "POST", []string{"pools", pool, "revisions", strconv.Itoa(n), "apply"}, nil, nil, opts)
}

// ---- rollouts ----

// ListRollouts lists rollouts, newest first.
func (c *Client) ListRollouts(ctx context.Context, f RolloutFilter) (*Page[Rollout], error) {
	return one[Page[Rollout]](ctx, c, "GET", []string{"rollouts"}, queryOf(f), nil, nil)
}

// AllRollouts iterates over every rollout the filter selects.
func (c *Client) AllRollouts(ctx context.Context, f RolloutFilter) iter.Seq2[Rollout, error] {
	return all(ctx, f.Cursor, func(ctx context.Context, cursor string) (*Page[Rollout], error) {
		f.Cursor = cursor
		return c.ListRollouts(ctx, f)
	})
}

// StartRollout rolls a pool revision out by hand.
func (c *Client) StartRollout(ctx context.Context, s RolloutStart, opts ...CallOption) (*Rollout, error) {
	return one[Rollout](ctx, c, "POST", []string{"rollouts"}, nil, s, opts)
}

// GetRollout reads a rollout (At: as it was then).
func (c *Client) GetRollout(ctx context.Context, id string, opts ...CallOption) (*Rollout, error) {
	return one[Rollout](ctx, c, "GET", []string{"rollouts", id}, nil, nil, opts)
}

func (c *Client) controlRollout(ctx context.Context, id, verb, reason string, opts []CallOption) (*Rollout, error) {
	var body any
	if reason != "" {
		body = map[string]string{"reason": reason}
	}
	return one[Rollout](ctx, c, "POST", []string{"rollouts", id, verb}, nil, body, opts)
}

// PauseRollout pauses a rollout: no new machine begins.
func (c *Client) PauseRollout(ctx context.Context, id, reason string, opts ...CallOption) (*Rollout, error) {
	return c.controlRollout(ctx, id, "pause", reason, opts)
}

// ResumeRollout resumes a paused rollout.
func (c *Client) ResumeRollout(ctx context.Context, id, reason string, opts ...CallOption) (*Rollout, error) {
	return c.controlRollout(ctx, id, "resume", reason, opts)
}

// AbortRollout aborts a rollout.
func (c *Client) AbortRollout(ctx context.Context, id, reason string, opts ...CallOption) (*Rollout, error) {
	return c.controlRollout(ctx, id, "abort", reason, opts)
}

// RetryRollout retries a failed rollout from where it stopped.
func (c *Client) RetryRollout(ctx context.Context, id, reason string, opts ...CallOption) (*Rollout, error) {
	return c.controlRollout(ctx, id, "retry", reason, opts)
}

// ---- operations ----

// ListOperations lists operations (rollouts, maintenance, unassignments,
// deletions), newest first.
func (c *Client) ListOperations(ctx context.Context, f OperationFilter) (*Page[Operation], error) {
	return one[Page[Operation]](ctx, c, "GET", []string{"operations"}, queryOf(f), nil, nil)
}

// AllOperations iterates over every operation the filter selects.
func (c *Client) AllOperations(ctx context.Context, f OperationFilter) iter.Seq2[Operation, error] {
	return all(ctx, f.Cursor, func(ctx context.Context, cursor string) (*Page[Operation], error) {
		f.Cursor = cursor
		return c.ListOperations(ctx, f)
	})
}

// GetOperation reads an operation (At: as it was then).
func (c *Client) GetOperation(ctx context.Context, id string, opts ...CallOption) (*Operation, error) {
	return one[Operation](ctx, c, "GET", []string{"operations", id}, nil, nil, opts)
}

// GetOperationLog reads an operation's log from entry after (0: the
// start), at most limit entries (0: the server's default); read again
// from the page's Next until it is Final.
func (c *Client) GetOperationLog(ctx context.Context, id string, after, limit int) (*LogPage, error) {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.Itoa(after))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return one[LogPage](ctx, c, "GET", []string{"operations", id, "log"}, q, nil, nil)
}

// ---- the audit log ----

// ListEvents reads one page of the audit log, oldest first.
func (c *Client) ListEvents(ctx context.Context, f EventFilter) (*Page[Event], error) {
	return one[Page[Event]](ctx, c, "GET", []string{"events"}, queryOf(f), nil, nil)
}

// AllEvents iterates over every event the filter selects.
func (c *Client) AllEvents(ctx context.Context, f EventFilter) iter.Seq2[Event, error] {
	return all(ctx, f.Cursor, func(ctx context.Context, cursor string) (*Page[Event], error) {
		f.Cursor = cursor
		return c.ListEvents(ctx, f)
	})
}
