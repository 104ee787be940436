// Package api is the revisions service's contract over NATS: the subjects it
// serves, their request and response types, and one small typed client
// function per subject. The gateway, boot and rollout services import it.
//
// It depends only on libs/events, libs/fields, nats.go and the standard library: the
// types are plain DTOs whose JSON is the wire format, so importing them
// pulls in none of the service's domain (Butane, Ignition, YAML).
//
// Conventions:
//   - Every request names its organization in Org (an RFC 1123 label);
//     nothing of another organization is ever read or changed. The catalog
//     is platform-wide (see AddCatalogVersionRequest).
//   - Errors are *errs.Error (libs/events/errs) with their kind and, for
//     validation errors, every offending field as a JSON path.
//   - Responses to commands that change state carry the aggregate's new
//     Version: the stream sequence of its last event. Use it as an ETag,
//     as ExpectedVersion in a later command (If-Match), and as MinVersion
//     in a later query to read your own write from any replica.
//   - The author of a change is the actor the command bus carries
//     (events.WithActor on the caller's context), never a request field.
package api

import (
	"github.com/anvil-fleet/anvil/libs/fields/values"

	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// QueueGroup is the NATS queue group the service's replicas share.
const QueueGroup = "revisions"

// Subjects the revisions service serves (request/reply, queue group
// "revisions").
const (
	SubjectClusterCreate               = "cmd.revisions.cluster.create"
	SubjectClusterUpdate               = "cmd.revisions.cluster.update"
	SubjectClusterRotateKubeconfig     = "cmd.revisions.cluster.rotate_kubeconfig"
	SubjectClusterRotateBootstrapToken = "cmd.revisions.cluster.rotate_bootstrap_token"
	SubjectClusterDelete               = "cmd.revisions.cluster.delete"
	SubjectClusterGet                  = "cmd.revisions.cluster.get"
	SubjectClusterList                 = "cmd.revisions.cluster.list"
	// SubjectClusterCredentials answers with a cluster's decrypted
	// kubeconfig. Only the rollout service's NATS user may publish on it.
	SubjectClusterCredentials = "cmd.revisions.cluster.credentials"

	SubjectPoolCreate        = "cmd.revisions.pool.create"
	SubjectPoolUpdate        = "cmd.revisions.pool.update"
	SubjectPoolApplyRevision = "cmd.revisions.pool.apply_revision"
	SubjectPoolDelete        = "cmd.revisions.pool.delete"
	SubjectPoolGet           = "cmd.revisions.pool.get"
	SubjectPoolList          = "cmd.revisions.pool.list"

	SubjectRevisionList     = "cmd.revisions.revision.list"
	SubjectRevisionGet      = "cmd.revisions.revision.get"
	SubjectRevisionDiff     = "cmd.revisions.revision.diff"
	SubjectRevisionIgnition = "cmd.revisions.revision.ignition"

	SubjectCatalogList       = "cmd.revisions.catalog.list"
	SubjectCatalogAddVersion = "cmd.revisions.catalog.add_version"
	SubjectCatalogCheckSkew  = "cmd.revisions.catalog.check_skew"

	// SubjectMachineRender renders a machine revision's Ignition for the
	// boot service.
	SubjectMachineRender = "cmd.revisions.machine.render"
)

// Subjects lists every subject, for NATS permissions and tests.
var Subjects = []string{
	SubjectClusterCreate, SubjectClusterUpdate, SubjectClusterRotateKubeconfig, SubjectClusterRotateBootstrapToken,
	SubjectClusterDelete, SubjectClusterGet, SubjectClusterList, SubjectClusterCredentials,
	SubjectPoolCreate, SubjectPoolUpdate, SubjectPoolApplyRevision, SubjectPoolDelete, SubjectPoolGet, SubjectPoolList,
	SubjectRevisionList, SubjectRevisionGet, SubjectRevisionDiff, SubjectRevisionIgnition,
	SubjectCatalogList, SubjectCatalogAddVersion, SubjectCatalogCheckSkew,
	SubjectMachineRender,
}

// AgentCredentialPlaceholder occurs exactly once in every rendered
// Ignition config; the boot service replaces it byte for byte with the
// machine's agent credential ([A-Za-z0-9_-]{20,128}) on each request.
const AgentCredentialPlaceholder = "ANVIL_AGENT_CREDENTIAL_PLACEHOLDER_0F6C1B9E2D7A4853_REPLACED_BY_THE_BOOT_SERVICE"

// Secret is a credential in a request or response. It marshals to JSON as
// its value but prints as "[redacted]" under every fmt verb and in slog, so
// logging a request never leaks it.
type Secret string

const redacted = "[redacted]"

func (s Secret) Reveal() string             { return string(s) }
func (s Secret) String() string             { return redacted }
func (s Secret) GoString() string           { return redacted }
func (s Secret) LogValue() slog.Value       { return slog.StringValue(redacted) }
func (s Secret) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, redacted) }

// ---- clusters ----

// Cluster is a Kubernetes cluster that machines join. Its credentials are
// never shown here: only the bootstrap token's public id.
type Cluster struct {
	Org               string    `json:"org"`
	Name              string    `json:"name"`
	APIEndpoint       string    `json:"api_endpoint"`
	KubernetesVersion string    `json:"kubernetes_version"` // the control plane's
	BootstrapTokenID  string    `json:"bootstrap_token_id"`
	CACertHash        string    `json:"ca_cert_hash"`
	Pools             int       `json:"pools"` // live pools of this cluster (live reads only)
	Deleted           bool      `json:"deleted,omitempty"`
	CreatedAt         time.Time `json:"created_at"`
	UpdatedAt         time.Time `json:"updated_at"`
	Version           uint64    `json:"version"`
}

// CreateClusterRequest registers a cluster. The kubeconfig (for cordon and
// drain) and the bootstrap token are sealed before they reach the log.
type CreateClusterRequest struct {
	Org               string `json:"org"`
	Name              string `json:"name"`
	APIEndpoint       string `json:"api_endpoint"`
	KubernetesVersion string `json:"kubernetes_version"`
	Kubeconfig        Secret `json:"kubeconfig"`
	BootstrapToken    Secret `json:"bootstrap_token"`
	CACertHash        string `json:"ca_cert_hash"`
}

// UpdateClusterRequest changes the plain settings; a nil field keeps its
// value. A control plane version that would break the skew policy for any
// of the cluster's pools is refused, naming the pool.
type UpdateClusterRequest struct {
	Org               string  `json:"org"`
	Name              string  `json:"name"`
	APIEndpoint       *string `json:"api_endpoint,omitempty"`
	KubernetesVersion *string `json:"kubernetes_version,omitempty"`
	CACertHash        *string `json:"ca_cert_hash,omitempty"`
	// ExpectedVersion, if set, is the version the caller read (If-Match):
	// a mismatch is precondition_failed, without retry.
	ExpectedVersion uint64 `json:"expected_version,omitempty"`
}

// UpdateClusterResponse is the cluster after the update; Changed is false
// when the request changed nothing (and nothing was appended).
type UpdateClusterResponse struct {
	Cluster Cluster `json:"cluster"`
	Changed bool    `json:"changed"`
}

// RotateKubeconfigRequest replaces the cordon/drain credentials.
type RotateKubeconfigRequest struct {
	Org             string `json:"org"`
	Name            string `json:"name"`
	Kubeconfig      Secret `json:"kubeconfig"`
	ExpectedVersion uint64 `json:"expected_version,omitempty"`
}

// RotateBootstrapTokenRequest replaces the join token; the next render of
// every machine of the cluster carries the new one.
type RotateBootstrapTokenRequest struct {
	Org             string `json:"org"`
	Name            string `json:"name"`
	BootstrapToken  Secret `json:"bootstrap_token"`
	ExpectedVersion uint64 `json:"expected_version,omitempty"`
}

// DeleteClusterRequest deletes a cluster that has no pools left.
type DeleteClusterRequest struct {
	Org             string `json:"org"`
	Name            string `json:"name"`
	ExpectedVersion uint64 `json:"expected_version,omitempty"`
}

// Deleted answers a delete with the aggregate's final version.
type Deleted struct {
	Version uint64 `json:"version"`
}

// GetClusterRequest reads one cluster. With At, the cluster as it was at
// that point of the log, rebuilt from its events: a stream sequence
// ("1234") or an RFC 3339 time ("2025-06-02T09:00:00Z"). MinVersion makes
// a live read wait (briefly) until this replica has applied that version.
type GetClusterRequest struct {
	Org        string `json:"org"`
	Name       string `json:"name"`
	At         string `json:"at,omitempty"`
	MinVersion uint64 `json:"min_version,omitempty"`
}

// ListClustersRequest lists an organization's clusters.
type ListClustersRequest struct {
	Org        string `json:"org"`
	MinVersion uint64 `json:"min_version,omitempty"`
}

// ClusterList is the organization's live clusters, by name.
type ClusterList struct {
	Clusters []Cluster `json:"clusters"`
}

// ClusterCredentialsRequest asks for a cluster's kubeconfig.
type ClusterCredentialsRequest struct {
	Org     string `json:"org"`
	Cluster string `json:"cluster"`
}

// ClusterCredentials is the decrypted kubeconfig the rollout service
// cordons and drains with.
type ClusterCredentials struct {
	Org         string `json:"org"`
	Cluster     string `json:"cluster"`
	APIEndpoint string `json:"api_endpoint"`
	Kubeconfig  Secret `json:"kubeconfig"`
	Version     uint64 `json:"version"`
}

// ---- pools ----

// PoolConfig is the part of a pool that needs a reboot; a revision is an
// immutable snapshot of it. See docs/pool-fields.md.
type PoolConfig struct {
	Kubernetes       Kubernetes        `json:"kubernetes"`
	Flatcar          Flatcar           `json:"flatcar"`
	Network          Network           `json:"network"`
	CacheDisk        *CacheDisk        `json:"cache_disk,omitempty"`
	NodeLabels       map[string]string `json:"node_labels,omitempty"`
	Taints           []Taint           `json:"taints,omitempty"`
	KubeletExtraArgs map[string]string `json:"kubelet_extra_args,omitempty"`
	SSHKeys          []string          `json:"ssh_keys,omitempty"`
}

// Kubernetes: the user sets Minor; Version is the platform's resolution and
// is ignored on input.
type Kubernetes struct {
	Minor   string `json:"minor"`
	Version string `json:"version,omitempty"`
}

// Flatcar selects the OS image.
type Flatcar struct {
	Channel string `json:"channel"`
	Version string `json:"version"`
}

// Network is the pool's network profile.
type Network struct {
	Bonds      []Bond      `json:"bonds,omitempty"`
	VLANs      []VLAN      `json:"vlans,omitempty"`
	Bridges    []Bridge    `json:"bridges,omitempty"`
	Interfaces []Interface `json:"interfaces,omitempty"`
}

type Bond struct {
	Name    string   `json:"name"`
	Mode    string   `json:"mode"`
	Members []string `json:"members"`
}

type VLAN struct {
	ID     int    `json:"id"`
	Parent string `json:"parent"`
	Name   string `json:"name,omitempty"`
}

type Bridge struct {
	Name    string   `json:"name"`
	Members []string `json:"members"`
}

type Interface struct {
	Name      string   `json:"name"`
	DHCP      string   `json:"dhcp,omitempty"`
	Addresses []string `json:"addresses,omitempty"`
	Gateways  []string `json:"gateways,omitempty"`
	DNS       []string `json:"dns,omitempty"`
	MTU       int      `json:"mtu,omitempty"`
}

type CacheDisk struct {
	Device     string `json:"device"`
	Filesystem string `json:"filesystem"`
	Wipe       bool   `json:"wipe"`
}

type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// Rollout is how a pool's revisions are rolled out; no reboot needed.
// Durations are Go duration strings ("90s", "15m").
type Rollout struct {
	MaxUnavailable     IntOrPercent        `json:"max_unavailable,omitempty"`
	Pause              string              `json:"pause,omitempty"`
	DrainTimeout       string              `json:"drain_timeout,omitempty"`
	DrainGracePeriod   *string             `json:"drain_grace_period,omitempty"`
	NodeReadyTimeout   string              `json:"node_ready_timeout,omitempty"`
	MaintenanceWindows []MaintenanceWindow `json:"maintenance_windows,omitempty"`
	// Remediation: absent leaves it to the rollout service's default
	// (--remediation-max-in-flight).
	Remediation *Remediation `json:"remediation,omitempty"`
}

// Remediation gives a machine that booted but never came back (wait_boot
// or wait_ready timed out) one more reboot into the revision, at most
// MaxInFlight machines of a rollout at a time; 0 turns it off.
type Remediation struct {
	MaxInFlight int `json:"max_in_flight"`
}

// MaintenanceWindow is a recurring wall-clock window in an IANA zone.
type MaintenanceWindow struct {
	Days     []string `json:"days"`
	Start    string   `json:"start"`
	End      string   `json:"end"`
	TimeZone string   `json:"time_zone"`
}

// IntOrPercent is a count ("3") or a percentage ("25%"); in JSON a number
// or a string.
type IntOrPercent string

func (v IntOrPercent) MarshalJSON() ([]byte, error) {
	s := string(v)
	if s != "" && len(s) <= 9 && strings.TrimLeft(s, "0123456789") == "" {
		n, _ := strconv.Atoi(s)
		return []byte(strconv.Itoa(n)), nil
	}
	return json.Marshal(s)
}

func (v *IntOrPercent) UnmarshalJSON(b []byte) error {
	s, err := values.DecodeIntOrPercent(b, reflect.TypeFor[IntOrPercent]())
	if err == nil && s != nil {
		*v = IntOrPercent(*s)
	}
	return err
}

// PoolSpec is everything a user sets on a pool: the display name, the
// config and the rollout strategy, as one flat object (the config's fields
// sit beside display_name and rollout, as in docs/pool-fields.md, whose
// JSON paths validation errors use: network.vlans[1].id).
//
// The types here never embed structs: encoding/json would put the Go name
// of an embedded struct into the path of a decoding error.
type PoolSpec struct {
	DisplayName      string            `json:"display_name"`
	Kubernetes       Kubernetes        `json:"kubernetes"`
	Flatcar          Flatcar           `json:"flatcar"`
	Network          Network           `json:"network"`
	CacheDisk        *CacheDisk        `json:"cache_disk,omitempty"`
	NodeLabels       map[string]string `json:"node_labels,omitempty"`
	Taints           []Taint           `json:"taints,omitempty"`
	KubeletExtraArgs map[string]string `json:"kubelet_extra_args,omitempty"`
	SSHKeys          []string          `json:"ssh_keys,omitempty"`
	Rollout          Rollout           `json:"rollout"`
	// AutoApplyPlatformRevisions: a platform-made revision (a Kubernetes
	// patch release the platform adds) is also requested for rollout, by
	// "platform", as soon as it is made; the rollout waits for the pool's
	// maintenance windows. It needs no reboot and makes no revision.
	// Default false: platform revisions wait to be applied.
	AutoApplyPlatformRevisions bool `json:"auto_apply_platform_revisions"`
}

// Config returns the spec's reboot-relevant part.
func (s PoolSpec) Config() PoolConfig {
	return PoolConfig{
		Kubernetes: s.Kubernetes, Flatcar: s.Flatcar, Network: s.Network, CacheDisk: s.CacheDisk,
		NodeLabels: s.NodeLabels, Taints: s.Taints, KubeletExtraArgs: s.KubeletExtraArgs, SSHKeys: s.SSHKeys,
	}
}

// SpecOf builds a spec from its parts.
func SpecOf(displayName string, c PoolConfig, r Rollout) PoolSpec {
	return PoolSpec{
		DisplayName: displayName, Kubernetes: c.Kubernetes, Flatcar: c.Flatcar, Network: c.Network, CacheDisk: c.CacheDisk,
		NodeLabels: c.NodeLabels, Taints: c.Taints, KubeletExtraArgs: c.KubeletExtraArgs, SSHKeys: c.SSHKeys, Rollout: r,
	}
}

// AppliedRevision is the revision last applied to a pool, in short.
type AppliedRevision struct {
	Number            int     `json:"number"`
	KubernetesVersion string  `json:"kubernetes_version"`
	Flatcar           Flatcar `json:"flatcar"`
}

// RevisionSummary is one revision in a pool's history.
type RevisionSummary struct {
	Number       int       `json:"number"`
	Hash         string    `json:"hash"`
	Author       string    `json:"author"`
	Message      string    `json:"message,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	PlatformMade bool      `json:"platform_made"`
	Applied      bool      `json:"applied"` // the revision last requested for rollout
}

// Revision is one immutable revision with its config.
type Revision struct {
	Org               string     `json:"org"`
	Pool              string     `json:"pool"`
	Number            int        `json:"number"`
	Hash              string     `json:"hash"`
	Author            string     `json:"author"`
	Message           string     `json:"message,omitempty"`
	CreatedAt         time.Time  `json:"created_at"`
	PlatformMade      bool       `json:"platform_made"`
	Applied           bool       `json:"applied"`
	KubernetesVersion string     `json:"kubernetes_version"`
	Config            PoolConfig `json:"config"`
}

// Pool is a machine pool: its current spec (the latest revision's config),
// its revisions and which one was last applied.
type Pool struct {
	Org               string   `json:"org"`
	Name              string   `json:"name"`
	Cluster           string   `json:"cluster"`
	Spec              PoolSpec `json:"spec"`
	KubernetesVersion string   `json:"kubernetes_version"`
	LatestRevision    int      `json:"latest_revision"`
	AppliedRevision   int      `json:"applied_revision"` // 0: none requested yet
	// Applied is what the applied revision says the machines run, which
	// differs from Spec (the latest saved revision) after a Save without
	// Apply or a rollback; absent before the first apply. What each
	// machine runs is GET …/machines?pool= (current_revision).
	Applied   *AppliedRevision  `json:"applied,omitempty"`
	Revisions []RevisionSummary `json:"revisions"`
	Deleted   bool              `json:"deleted,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
	Version   uint64            `json:"version"`
}

// PoolSummary is a pool in a list.
type PoolSummary struct {
	Org               string `json:"org"`
	Name              string `json:"name"`
	Cluster           string `json:"cluster"`
	DisplayName       string `json:"display_name"`
	KubernetesVersion string `json:"kubernetes_version"`
	LatestRevision    int    `json:"latest_revision"`
	AppliedRevision   int    `json:"applied_revision"`
	// AppliedKubernetesVersion is the applied revision's version (the
	// latest saved one is KubernetesVersion); empty before the first apply.
	AppliedKubernetesVersion string    `json:"applied_kubernetes_version,omitempty"`
	CreatedAt                time.Time `json:"created_at"`
	UpdatedAt                time.Time `json:"updated_at"`
	Version                  uint64    `json:"version"`
}

// CreatePoolRequest creates a pool with its first revision ("Save"), and
// with Apply also asks for it to be rolled out ("Save & Apply"). The
// spec's fields sit at the top level (see PoolSpec); NewCreatePoolRequest
// fills them from a PoolSpec.
type CreatePoolRequest struct {
	Org     string `json:"org"`
	Name    string `json:"name"`
	Cluster string `json:"cluster"`

	DisplayName      string            `json:"display_name"`
	Kubernetes       Kubernetes        `json:"kubernetes"`
	Flatcar          Flatcar           `json:"flatcar"`
	Network          Network           `json:"network"`
	CacheDisk        *CacheDisk        `json:"cache_disk,omitempty"`
	NodeLabels       map[string]string `json:"node_labels,omitempty"`
	Taints           []Taint           `json:"taints,omitempty"`
	KubeletExtraArgs map[string]string `json:"kubelet_extra_args,omitempty"`
	SSHKeys          []string          `json:"ssh_keys,omitempty"`
	Rollout          Rollout           `json:"rollout"`

	AutoApplyPlatformRevisions bool `json:"auto_apply_platform_revisions,omitempty"`

	Message string `json:"message,omitempty"`
	Apply   bool   `json:"apply"`
}

// NewCreatePoolRequest builds a request from a spec.
func NewCreatePoolRequest(org, name, cluster string, spec PoolSpec) CreatePoolRequest {
	return CreatePoolRequest{
		Org: org, Name: name, Cluster: cluster,
		DisplayName: spec.DisplayName, Kubernetes: spec.Kubernetes, Flatcar: spec.Flatcar, Network: spec.Network,
		CacheDisk: spec.CacheDisk, NodeLabels: spec.NodeLabels, Taints: spec.Taints,
		KubeletExtraArgs: spec.KubeletExtraArgs, SSHKeys: spec.SSHKeys, Rollout: spec.Rollout,
		AutoApplyPlatformRevisions: spec.AutoApplyPlatformRevisions,
	}
}

// Spec returns the request's spec.
func (r CreatePoolRequest) Spec() PoolSpec {
	return PoolSpec{
		DisplayName: r.DisplayName, Kubernetes: r.Kubernetes, Flatcar: r.Flatcar, Network: r.Network,
		CacheDisk: r.CacheDisk, NodeLabels: r.NodeLabels, Taints: r.Taints,
		KubeletExtraArgs: r.KubeletExtraArgs, SSHKeys: r.SSHKeys, Rollout: r.Rollout,
		AutoApplyPlatformRevisions: r.AutoApplyPlatformRevisions,
	}
}

// UpdatePoolRequest saves the whole spec (a form save). A config change
// makes exactly one revision; display name, rollout and auto-apply
// changes make none.
// With Apply, the latest revision is requested for rollout unless it is
// already the applied one. The spec's fields sit at the top level.
type UpdatePoolRequest struct {
	Org  string `json:"org"`
	Name string `json:"name"`

	DisplayName      string            `json:"display_name"`
	Kubernetes       Kubernetes        `json:"kubernetes"`
	Flatcar          Flatcar           `json:"flatcar"`
	Network          Network           `json:"network"`
	CacheDisk        *CacheDisk        `json:"cache_disk,omitempty"`
	NodeLabels       map[string]string `json:"node_labels,omitempty"`
	Taints           []Taint           `json:"taints,omitempty"`
	KubeletExtraArgs map[string]string `json:"kubelet_extra_args,omitempty"`
	SSHKeys          []string          `json:"ssh_keys,omitempty"`
	Rollout          Rollout           `json:"rollout"`

	AutoApplyPlatformRevisions bool `json:"auto_apply_platform_revisions,omitempty"`

	Message         string `json:"message,omitempty"`
	Apply           bool   `json:"apply"`
	ExpectedVersion uint64 `json:"expected_version,omitempty"`
}

// NewUpdatePoolRequest builds a request from a spec.
func NewUpdatePoolRequest(org, name string, spec PoolSpec) UpdatePoolRequest {
	return UpdatePoolRequest{
		Org: org, Name: name,
		DisplayName: spec.DisplayName, Kubernetes: spec.Kubernetes, Flatcar: spec.Flatcar, Network: spec.Network,
		CacheDisk: spec.CacheDisk, NodeLabels: spec.NodeLabels, Taints: spec.Taints,
		KubeletExtraArgs: spec.KubeletExtraArgs, SSHKeys: spec.SSHKeys, Rollout: spec.Rollout,
		AutoApplyPlatformRevisions: spec.AutoApplyPlatformRevisions,
	}
}

// Spec returns the request's spec.
func (r UpdatePoolRequest) Spec() PoolSpec {
	return PoolSpec{
		DisplayName: r.DisplayName, Kubernetes: r.Kubernetes, Flatcar: r.Flatcar, Network: r.Network,
		CacheDisk: r.CacheDisk, NodeLabels: r.NodeLabels, Taints: r.Taints,
		KubeletExtraArgs: r.KubeletExtraArgs, SSHKeys: r.SSHKeys, Rollout: r.Rollout,
		AutoApplyPlatformRevisions: r.AutoApplyPlatformRevisions,
	}
}

// ApplyRevisionRequest requests any existing revision for rollout: the
// latest, the current one again (retry), or an older one (rollback).
type ApplyRevisionRequest struct {
	Org             string `json:"org"`
	Pool            string `json:"pool"`
	Revision        int    `json:"revision"`
	ExpectedVersion uint64 `json:"expected_version,omitempty"`
}

// PoolChange is the pool after a command, and what the command did.
type PoolChange struct {
	Pool            Pool `json:"pool"`
	Changed         bool `json:"changed"`                    // anything was appended
	RevisionCreated int  `json:"revision_created,omitempty"` // the new revision's number
	SettingsChanged bool `json:"settings_changed,omitempty"` // display name, rollout or auto-apply
	ApplyRequested  int  `json:"apply_requested,omitempty"`  // the revision requested for rollout
	Rollback        bool `json:"rollback,omitempty"`         // it is older than the one applied before
	// Rollout is the id of the rollout the apply starts (GET
	// /rollouts/{id} follows it; it may take a moment to appear).
	Rollout string `json:"rollout,omitempty"`
}

// DeletePoolRequest deletes a pool; its name is never reused.
type DeletePoolRequest struct {
	Org             string `json:"org"`
	Name            string `json:"name"`
	ExpectedVersion uint64 `json:"expected_version,omitempty"`
}

// GetPoolRequest reads one pool; At and MinVersion as in GetClusterRequest.
type GetPoolRequest struct {
	Org        string `json:"org"`
	Name       string `json:"name"`
	At         string `json:"at,omitempty"`
	MinVersion uint64 `json:"min_version,omitempty"`
}

// ListPoolsRequest lists an organization's live pools, optionally of one
// cluster.
type ListPoolsRequest struct {
	Org        string `json:"org"`
	Cluster    string `json:"cluster,omitempty"`
	MinVersion uint64 `json:"min_version,omitempty"`
}

// PoolList is the pools, by name.
type PoolList struct {
	Pools []PoolSummary `json:"pools"`
}

// ---- revisions ----

// ListRevisionsRequest lists a pool's revisions, oldest first.
type ListRevisionsRequest struct {
	Org        string `json:"org"`
	Pool       string `json:"pool"`
	MinVersion uint64 `json:"min_version,omitempty"`
}

// RevisionList is a pool's revisions.
type RevisionList struct {
	Pool            string            `json:"pool"`
	AppliedRevision int               `json:"applied_revision"`
	Revisions       []RevisionSummary `json:"revisions"`
}

// GetRevisionRequest reads one revision.
type GetRevisionRequest struct {
	Org        string `json:"org"`
	Pool       string `json:"pool"`
	Revision   int    `json:"revision"`
	MinVersion uint64 `json:"min_version,omitempty"`
}

// DiffRevisionsRequest compares any two revisions of a pool.
type DiffRevisionsRequest struct {
	Org  string `json:"org"`
	Pool string `json:"pool"`
	From int    `json:"from"`
	To   int    `json:"to"`
}

// Change is one config field that differs; Old is absent for an addition,
// New for a removal.
type Change struct {
	Path string          `json:"path"`
	Old  json.RawMessage `json:"old,omitempty"`
	New  json.RawMessage `json:"new,omitempty"`
}

// FileDiff is the unified diff of one file or unit as it lands on disk.
type FileDiff struct {
	Path    string `json:"path"`
	Unified string `json:"unified"`
}

// RevisionDiff is the structured and the unified Ignition diff of two
// revisions (rendered as the preview machine, see RevisionIgnition).
type RevisionDiff struct {
	From     int        `json:"from"`
	To       int        `json:"to"`
	FromHash string     `json:"from_hash"`
	ToHash   string     `json:"to_hash"`
	Changes  []Change   `json:"changes"`
	Ignition string     `json:"ignition"`
	Files    []FileDiff `json:"files,omitempty"`
}

// RevisionIgnitionRequest previews the Ignition of a pool revision.
type RevisionIgnitionRequest struct {
	Org      string `json:"org"`
	Pool     string `json:"pool"`
	Revision int    `json:"revision"`
}

// RevisionIgnition is the Ignition a machine named "preview" without labels
// of its own would boot with revision Revision. The bootstrap token's
// secret half is redacted ("<id>.redactedredacted"), and the agent
// credential placeholder is in place.
type RevisionIgnition struct {
	Pool              string          `json:"pool"`
	Revision          int             `json:"revision"`
	Hash              string          `json:"hash"`
	MachineRevisionID string          `json:"machine_revision_id"`
	Ignition          json.RawMessage `json:"ignition"`
}

// ---- catalog ----

// ListCatalogRequest lists the supported Kubernetes versions. Org is the
// caller's organization, or empty for a platform administrator (the
// catalog itself is platform-wide).
type ListCatalogRequest struct {
	Org string `json:"org"`
}

// CatalogMinor is one supported minor and its patches, oldest first.
type CatalogMinor struct {
	Minor    string   `json:"minor"`
	Latest   string   `json:"latest"`
	Versions []string `json:"versions"`
}

// Catalog is the platform's Kubernetes version catalog.
type Catalog struct {
	Versions []string       `json:"versions"`
	Minors   []CatalogMinor `json:"minors"`
	Version  uint64         `json:"version"`
}

// AddCatalogVersionRequest adds a version to the catalog. It is a
// platform administrator's command and carries no organization: the
// gateway must allow it to platform administrators only. Adding a patch
// makes a platform-made pending revision for every pool on its minor.
type AddCatalogVersionRequest struct {
	Version string `json:"version"`
}

// CheckSkewRequest asks whether a kubelet version may run against a
// control plane: Kubelet is x.y (resolved to the newest patch in the
// catalog) or x.y.z; the control plane is ControlPlane or, if Cluster is
// set instead, that cluster's control plane version.
type CheckSkewRequest struct {
	Org          string `json:"org"`
	ControlPlane string `json:"control_plane,omitempty"`
	Cluster      string `json:"cluster,omitempty"`
	Kubelet      string `json:"kubelet"`
}

// SkewCheck is the answer: Allowed, or the Reason (stating both versions).
type SkewCheck struct {
	ControlPlane string `json:"control_plane"`
	Kubelet      string `json:"kubelet"`
	InCatalog    bool   `json:"in_catalog"`
	Allowed      bool   `json:"allowed"`
	Reason       string `json:"reason,omitempty"`
}

// ---- rendering ----

// RenderMachineRequest asks for the Ignition of a machine: revision
// Revision of pool Pool plus the machine's own hostname and labels.
type RenderMachineRequest struct {
	Org      string            `json:"org"`
	Pool     string            `json:"pool"`
	Revision int               `json:"revision"`
	Hostname string            `json:"hostname"`
	Labels   map[string]string `json:"labels,omitempty"`
}

// RenderedMachine is the machine revision and its Ignition 3.4.0 config
// (JSON). The config still contains AgentCredentialPlaceholder exactly
// once; the boot service swaps in the machine's credential per request.
// It also holds the cluster's bootstrap token: serve it only to the
// machine.
type RenderedMachine struct {
	MachineRevisionID string          `json:"machine_revision_id"`
	PoolRevision      int             `json:"pool_revision"`
	Hash              string          `json:"hash"` // the machine revision's hash
	Ignition          json.RawMessage `json:"ignition"`
}

// ParseAt reads an At value: a stream sequence or an RFC 3339 time. It is
// exported so that the gateway can validate a query parameter early.
func ParseAt(s string) (seq uint64, t time.Time, err error) {
	if s == "" {
		return 0, time.Time{}, fmt.Errorf("is empty")
	}
	if strings.TrimLeft(s, "0123456789") == "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			return 0, time.Time{}, fmt.Errorf("must be a stream sequence >= 1 or an RFC 3339 time")
		}
		return n, time.Time{}, nil
	}
	t, err = time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("must be a stream sequence or an RFC 3339 time such as 2025-06-02T09:00:00Z")
	}
	return 0, t, nil
}
