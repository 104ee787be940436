package client

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// The API's JSON types, as the client reads and writes them. Times are
// RFC 3339 UTC; a zero time is an absent one.

// Page is one page of a list: follow Next (as ListOptions.Cursor) until it
// is empty, or use the AllX iterators, which do.
type Page[T any] struct {
	Items []T    `json:"items"`
	Next  string `json:"next,omitempty"`
}

// ListOptions are every list's paging: Cursor is the Next of the previous
// page (empty: the first page), Limit the page size (0: the server's
// default; see docs/api.md for each list's default and maximum).
type ListOptions struct {
	Cursor string `query:"cursor"`
	Limit  int    `query:"limit"`
}

// VersionInfo is the gateway's build (GET /version).
type VersionInfo struct {
	Version   string `json:"version"`
	GitCommit string `json:"git_commit"`
	GoVersion string `json:"go_version"`
}

// ---- organizations and tokens ----

// Org is an organization.
type Org struct {
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	Version     uint64 `json:"version"`
}

// OrgCreate creates an organization (the bootstrap admin only).
type OrgCreate struct {
	ID          string `json:"id"`
	DisplayName string `json:"display_name,omitempty"`
}

// Role is an API token's role.
type Role string

const (
	RoleViewer   Role = "viewer"
	RoleOperator Role = "operator"
	RoleAdmin    Role = "admin"
)

// TokenInfo describes an API or enrollment token (never its secret).
type TokenInfo struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"` // api or enroll
	Name      string    `json:"name,omitempty"`
	Role      Role      `json:"role,omitempty"`
	IssuedAt  time.Time `json:"issued_at"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	Status    string    `json:"status"` // active, expired or revoked
	// MaxMachines (enrollment tokens): how many machines it may register;
	// 0: no cap.
	MaxMachines int `json:"max_machines,omitempty"`
	// RegisteredMachines (enrollment tokens): how many it has registered.
	RegisteredMachines *int `json:"registered_machines,omitempty"`
}

// TokenIssued is a new token: Token is its secret, shown this once.
type TokenIssued struct {
	Token string    `json:"token"`
	Info  TokenInfo `json:"info"`
}

// TokenCreate issues an API token.
type TokenCreate struct {
	Name      string    `json:"name,omitempty"`
	Role      Role      `json:"role,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// EnrollmentTokenCreate issues an enrollment token.
type EnrollmentTokenCreate struct {
	Name      string    `json:"name,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// MaxMachines caps how many machines it may register; 0: no cap.
	MaxMachines int `json:"max_machines,omitempty"`
}

// ---- machines ----

// MachineStatus is a machine's lifecycle status.
type MachineStatus string

const (
	StatusPreregistered       MachineStatus = "preregistered"
	StatusReadyUnassigned     MachineStatus = "ready_unassigned"
	StatusPending             MachineStatus = "pending"
	StatusProvisioning        MachineStatus = "provisioning"
	StatusReady               MachineStatus = "ready"
	StatusReconfiguring       MachineStatus = "reconfiguring"
	StatusEnteringMaintenance MachineStatus = "entering_maintenance"
	StatusMaintenance         MachineStatus = "maintenance"
	StatusUnassigning         MachineStatus = "unassigning"
	StatusDeleting            MachineStatus = "deleting"
	StatusFailed              MachineStatus = "failed"
)

// DeletionPolicy is how a machine is deleted.
type DeletionPolicy string

const (
	// DeleteGraceful (the default) drains the node, then removes it.
	DeleteGraceful DeletionPolicy = "graceful"
	// DeleteUnsafe removes the node without draining it.
	DeleteUnsafe DeletionPolicy = "unsafe"
	// DeleteForced removes the machine at once.
	DeleteForced DeletionPolicy = "forced"
)

// Machine is a bare-metal machine.
type Machine struct {
	Org                string            `json:"org"`
	UUID               string            `json:"uuid"`
	Status             MachineStatus     `json:"status"`
	Hostname           string            `json:"hostname,omitempty"`
	MAC                string            `json:"mac,omitempty"`
	Labels             map[string]string `json:"labels,omitempty"`
	Pool               string            `json:"pool,omitempty"`
	UpgradeIndex       int               `json:"upgrade_index,omitempty"`
	ControlPlane       bool              `json:"control_plane,omitempty"`
	NodeName           string            `json:"node_name,omitempty"`
	EnrollmentTokenID  string            `json:"enrollment_token_id,omitempty"`
	CurrentRevision    uint64            `json:"current_revision,omitempty"`
	CurrentRevisionAt  time.Time         `json:"current_revision_at,omitzero"`
	TargetRevision     uint64            `json:"target_revision,omitempty"`
	MaintenanceReturn  MachineStatus     `json:"maintenance_return,omitempty"`
	Connectivity       string            `json:"connectivity,omitempty"` // online or offline
	ConnectivitySince  time.Time         `json:"connectivity_since,omitzero"`
	LastSeen           time.Time         `json:"last_seen,omitzero"`
	LastIPXEBootAt     time.Time         `json:"last_ipxe_boot_at,omitzero"`
	LastIgnitionAt     time.Time         `json:"last_ignition_at,omitzero"`
	IPXERetryBy        time.Time         `json:"ipxe_retry_by,omitzero"`
	RegisteredAt       time.Time         `json:"registered_at,omitzero"`
	CreatedAt          time.Time         `json:"created_at,omitzero"`
	UpdatedAt          time.Time         `json:"updated_at,omitzero"`
	Hardware           *Hardware         `json:"hardware,omitempty"`
	HardwareReportedAt time.Time         `json:"hardware_reported_at,omitzero"`
	Reboot             *Reboot           `json:"reboot,omitempty"`
	Failure            *MachineFailure   `json:"failure,omitempty"`
	Deletion           *Deletion         `json:"deletion,omitempty"`
	// Version is the machine's version (its ETag): pass it to IfMatch.
	// Machines in a list carry none.
	Version uint64 `json:"version,omitempty"`
	// Deleted: a DELETE removed the machine; the rest is how it last was.
	Deleted bool `json:"deleted,omitempty"`
}

// Hardware is what the machine's agent reported.
type Hardware struct {
	CPUs     int    `json:"cpus"`
	RAMBytes uint64 `json:"ram_bytes"`
	Disks    []Disk `json:"disks,omitempty"`
	NICs     []NIC  `json:"nics,omitempty"`
}

// Disk is a disk of a machine.
type Disk struct {
	Name      string `json:"name"`
	SizeBytes uint64 `json:"size_bytes"`
}

// NIC is a network interface of a machine.
type NIC struct {
	Name string `json:"name"`
	MAC  string `json:"mac"`
}

// Reboot says whether a machine must reboot, and why.
type Reboot struct {
	Required bool   `json:"required,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// MachineFailure is why a machine is failed.
type MachineFailure struct {
	During MachineStatus `json:"during"`
	Step   string        `json:"step,omitempty"`
	Reason string        `json:"reason"`
}

// Deletion is a machine's deletion under way.
type Deletion struct {
	Policy         DeletionPolicy `json:"policy"`
	Phase          string         `json:"phase"` // started, completed, aborting or failed
	PreviousStatus MachineStatus  `json:"previous_status"`
	Prepared       bool           `json:"prepared,omitempty"`
	Reason         string         `json:"reason,omitempty"`
}

// MachineFilter narrows ListMachines.
type MachineFilter struct {
	Pool   string        `query:"pool"`
	Status MachineStatus `query:"status"`
	// Selector is a Kubernetes label selector over the machines' labels.
	Selector string `query:"selector"`
	ListOptions
}

// MachinePreregister registers a machine before its first boot.
type MachinePreregister struct {
	UUID         string            `json:"uuid"`
	Hostname     string            `json:"hostname,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Pool         string            `json:"pool,omitempty"`
	UpgradeIndex int               `json:"upgrade_index,omitempty"`
	ControlPlane bool              `json:"control_plane,omitempty"`
}

// MachinePatch changes a machine; nil fields stay as they are.
type MachinePatch struct {
	Hostname     *string            `json:"hostname,omitempty"`
	Labels       *map[string]string `json:"labels,omitempty"`
	UpgradeIndex *int               `json:"upgrade_index,omitempty"`
	ControlPlane *bool              `json:"control_plane,omitempty"`
}

// MachineRevisions is what the control plane knows of one machine's pool
// revisions.
type MachineRevisions struct {
	UUID                  string            `json:"uuid"`
	Pool                  string            `json:"pool,omitempty"`
	CurrentRevision       uint64            `json:"current_revision"`
	CurrentRevisionAt     time.Time         `json:"current_revision_at,omitzero"`
	TargetRevision        uint64            `json:"target_revision"`
	BootedMachineRevision string            `json:"booted_machine_revision,omitempty"`
	AppliedRevision       int               `json:"applied_revision"`
	Revisions             []MachineRevision `json:"revisions"`
	Instructions          []Instruction     `json:"instructions"`
	Version               uint64            `json:"version"`
}

// MachineRevision is one of the pool's revisions, marked as the machine's
// current or target one.
type MachineRevision struct {
	RevisionSummary
	Current bool `json:"current,omitempty"`
	Target  bool `json:"target,omitempty"`
}

// Instruction is a reboot instruction the boot service holds for a
// machine.
type Instruction struct {
	ID                string    `json:"id"`
	Org               string    `json:"org"`
	UUID              string    `json:"uuid"`
	Pool              string    `json:"pool,omitempty"`
	Kind              string    `json:"kind"`
	Revision          uint64    `json:"revision"`
	MachineRevisionID string    `json:"machine_revision_id,omitempty"`
	Status            string    `json:"status"`
	AgentStatus       string    `json:"agent_status,omitempty"`
	Reason            string    `json:"reason,omitempty"`
	Message           string    `json:"message,omitempty"`
	Deliveries        int       `json:"deliveries"`
	IssuedAt          time.Time `json:"issued_at"`
	ExpiresAt         time.Time `json:"expires_at,omitzero"`
	LastDeliveredAt   time.Time `json:"last_delivered_at,omitzero"`
	AcceptedAt        time.Time `json:"accepted_at,omitzero"`
	RebootSeenAt      time.Time `json:"reboot_seen_at,omitzero"`
	SettledAt         time.Time `json:"settled_at,omitzero"`
	SettledBy         string    `json:"settled_by,omitempty"`
	UpdatedAt         time.Time `json:"updated_at"`
}

// StartupLog is a machine's last startup log, as its agent reported it.
type StartupLog struct {
	Org            string    `json:"org"`
	UUID           string    `json:"uuid"`
	BootedRevision string    `json:"booted_revision"`
	ReportedAt     time.Time `json:"reported_at"`
	Lines          []string  `json:"lines"`
	Problems       []string  `json:"problems,omitempty"`
}

// ---- clusters ----

// Cluster is a Kubernetes cluster pools join. Its kubeconfig and bootstrap
// token are never returned.
type Cluster struct {
	Org               string    `json:"org"`
	Name              string    `json:"name"`
	APIEndpoint       string    `json:"api_endpoint"`
	KubernetesVersion string    `json:"kubernetes_version"`
	CACertHash        string    `json:"ca_cert_hash"`
	BootstrapTokenID  string    `json:"bootstrap_token_id"`
	Pools             int       `json:"pools"`
	Deleted           bool      `json:"deleted,omitempty"`
	CreatedAt         time.Time `json:"created_at"`
	UpdatedAt         time.Time `json:"updated_at"`
	Version           uint64    `json:"version"`
}

// ClusterCreate creates a cluster.
type ClusterCreate struct {
	Name              string `json:"name"`
	APIEndpoint       string `json:"api_endpoint"`
	KubernetesVersion string `json:"kubernetes_version"`
	// Kubeconfig is what the rollout service cordons and drains with.
	Kubeconfig string `json:"kubeconfig"`
	// BootstrapToken is the join token (<id>.<secret>).
	BootstrapToken string `json:"bootstrap_token"`
	CACertHash     string `json:"ca_cert_hash"`
}

// ClusterPatch changes a cluster; nil fields stay as they are.
type ClusterPatch struct {
	APIEndpoint       *string `json:"api_endpoint,omitempty"`
	KubernetesVersion *string `json:"kubernetes_version,omitempty"`
	CACertHash        *string `json:"ca_cert_hash,omitempty"`
}

// ClusterChange is a cluster after a change.
type ClusterChange struct {
	Changed bool    `json:"changed"`
	Cluster Cluster `json:"cluster"`
}

// ---- pools and revisions ----

// IntOrPercent is a count ("3") or a percentage ("25%"); in JSON a number
// or a string, as Kubernetes writes it.
type IntOrPercent string

// MarshalJSON writes a count as a number.
func (v IntOrPercent) MarshalJSON() ([]byte, error) {
	s := string(v)
	if s != "" && !strings.HasSuffix(s, "%") {
		if n, err := strconv.Atoi(s); err == nil {
			return []byte(strconv.Itoa(n)), nil
		}
	}
	return json.Marshal(s)
}

// UnmarshalJSON reads a number or a string.
func (v *IntOrPercent) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		*v = IntOrPercent(n.String())
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*v = IntOrPercent(s)
	return nil
}

// Kubernetes is a pool's Kubernetes minor; Version, in answers, the patch
// version it resolved to.
type Kubernetes struct {
	Minor   string `json:"minor"`
	Version string `json:"version,omitempty"`
}

// Flatcar is a pool's Flatcar channel and version.
type Flatcar struct {
	Channel string `json:"channel"`
	Version string `json:"version"`
}

// Network is a pool's network configuration.
type Network struct {
	Interfaces []Interface `json:"interfaces,omitempty"`
	Bonds      []Bond      `json:"bonds,omitempty"`
	Bridges    []Bridge    `json:"bridges,omitempty"`
	VLANs      []VLAN      `json:"vlans,omitempty"`
}

// Interface configures one network interface.
type Interface struct {
	Name      string   `json:"name"`
	DHCP      string   `json:"dhcp,omitempty"`
	Addresses []string `json:"addresses,omitempty"`
	Gateways  []string `json:"gateways,omitempty"`
	DNS       []string `json:"dns,omitempty"`
	MTU       int      `json:"mtu,omitempty"`
}

// Bond is a bonded interface.
type Bond struct {
	Name    string   `json:"name"`
	Mode    string   `json:"mode"`
	Members []string `json:"members"`
}

// Bridge is a bridge.
type Bridge struct {
	Name    string   `json:"name"`
	Members []string `json:"members"`
}

// VLAN is a VLAN interface.
type VLAN struct {
	ID     int    `json:"id"`
	Parent string `json:"parent"`
	Name   string `json:"name,omitempty"`
}

// CacheDisk is a disk for container images.
type CacheDisk struct {
	Device     string `json:"device"`
	Filesystem string `json:"filesystem"`
	Wipe       bool   `json:"wipe"`
}

// Taint is a node taint.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// MaintenanceWindow is when rollouts may move machines.
type MaintenanceWindow struct {
	Days     []string `json:"days"`
	Start    string   `json:"start"`
	End      string   `json:"end"`
	TimeZone string   `json:"time_zone"`
}

// Remediation bounds how many machines are remediated at once.
type Remediation struct {
	MaxInFlight int `json:"max_in_flight"`
}

// PoolRollout is how a pool's revisions are rolled out. Durations are Go
// durations ("90s").
type PoolRollout struct {
	MaxUnavailable     IntOrPercent        `json:"max_unavailable,omitempty"`
	Pause              string              `json:"pause,omitempty"`
	DrainTimeout       string              `json:"drain_timeout,omitempty"`
	DrainGracePeriod   string              `json:"drain_grace_period,omitempty"`
	NodeReadyTimeout   string              `json:"node_ready_timeout,omitempty"`
	MaintenanceWindows []MaintenanceWindow `json:"maintenance_windows,omitempty"`
	Remediation        *Remediation        `json:"remediation,omitempty"`
}

// PoolConfig is what a revision holds: everything that needs a reboot.
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

// PoolSpec is a pool's settings.
type PoolSpec struct {
	DisplayName string `json:"display_name"`
	PoolConfig
	Rollout PoolRollout `json:"rollout"`
	// AutoApplyPlatformRevisions: revisions the platform makes (a new
	// Kubernetes patch) are rolled out at once, in maintenance windows.
	AutoApplyPlatformRevisions bool `json:"auto_apply_platform_revisions"`
}

// PoolCreate creates a pool: "Save" makes revision 1; Apply ("Save &
// Apply") also rolls it out.
type PoolCreate struct {
	Name    string `json:"name"`
	Cluster string `json:"cluster"`
	PoolSpec
	Message string `json:"message,omitempty"`
	Apply   bool   `json:"apply,omitempty"`
}

// PoolUpdate changes a pool: a change that needs a reboot makes a new
// revision; Apply also rolls it out.
type PoolUpdate struct {
	PoolSpec
	Message string `json:"message,omitempty"`
	Apply   bool   `json:"apply,omitempty"`
}

// PoolSummary is a pool in a list.
type PoolSummary struct {
	Org                      string    `json:"org"`
	Name                     string    `json:"name"`
	Cluster                  string    `json:"cluster"`
	DisplayName              string    `json:"display_name"`
	KubernetesVersion        string    `json:"kubernetes_version"`
	LatestRevision           int       `json:"latest_revision"`
	AppliedRevision          int       `json:"applied_revision"`
	AppliedKubernetesVersion string    `json:"applied_kubernetes_version,omitempty"`
	CreatedAt                time.Time `json:"created_at"`
	UpdatedAt                time.Time `json:"updated_at"`
	Version                  uint64    `json:"version"`
}

// Pool is a machine pool: the latest saved spec, and what runs.
type Pool struct {
	Org               string            `json:"org"`
	Name              string            `json:"name"`
	Cluster           string            `json:"cluster"`
	Spec              PoolSpec          `json:"spec"`
	KubernetesVersion string            `json:"kubernetes_version"`
	LatestRevision    int               `json:"latest_revision"`
	AppliedRevision   int               `json:"applied_revision"`
	Applied           *AppliedRevision  `json:"applied,omitempty"`
	Revisions         []RevisionSummary `json:"revisions"`
	Deleted           bool              `json:"deleted,omitempty"`
	CreatedAt         time.Time         `json:"created_at"`
	UpdatedAt         time.Time         `json:"updated_at"`
	Version           uint64            `json:"version"`
}

// AppliedRevision is the revision last applied to a pool, in short.
type AppliedRevision struct {
	Number            int     `json:"number"`
	KubernetesVersion string  `json:"kubernetes_version"`
	Flatcar           Flatcar `json:"flatcar"`
}

// PoolChange is a pool after a command, and what the command did.
type PoolChange struct {
	Pool            Pool `json:"pool"`
	Changed         bool `json:"changed"`
	RevisionCreated int  `json:"revision_created,omitempty"`
	ApplyRequested  int  `json:"apply_requested,omitempty"`
	Rollback        bool `json:"rollback,omitempty"`
	SettingsChanged bool `json:"settings_changed,omitempty"`
	// Rollout is the rollout an apply starts (GetRollout; it may answer
	// 404 for a moment).
	Rollout string `json:"rollout,omitempty"`
}

// PoolFilter narrows ListPools.
type PoolFilter struct {
	Cluster string `query:"cluster"`
	ListOptions
}

// RevisionSummary is one revision in a pool's history.
type RevisionSummary struct {
	Number       int       `json:"number"`
	Hash         string    `json:"hash"`
	Author       string    `json:"author"`
	Message      string    `json:"message,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	PlatformMade bool      `json:"platform_made"`
	Applied      bool      `json:"applied"`
}

// RevisionList is a page of a pool's revisions, oldest first, with the
// revision last applied.
type RevisionList struct {
	Page[RevisionSummary]
	Pool            string `json:"pool"`
	AppliedRevision int    `json:"applied_revision"`
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

// RevisionDiff compares two revisions.
type RevisionDiff struct {
	From     int        `json:"from"`
	To       int        `json:"to"`
	FromHash string     `json:"from_hash"`
	ToHash   string     `json:"to_hash"`
	Changes  []Change   `json:"changes"`
	Files    []FileDiff `json:"files,omitempty"`
	// Ignition is a unified diff of the rendered Ignition.
	Ignition string `json:"ignition"`
}

// Change is one config field that differs.
type Change struct {
	Path string          `json:"path"`
	Old  json.RawMessage `json:"old,omitempty"`
	New  json.RawMessage `json:"new,omitempty"`
}

// FileDiff is a unified diff of one rendered file.
type FileDiff struct {
	Path    string `json:"path"`
	Unified string `json:"unified"`
}

// RevisionIgnition is a revision's rendered Ignition (credentials left as
// placeholders).
type RevisionIgnition struct {
	Pool              string          `json:"pool"`
	Revision          int             `json:"revision"`
	Hash              string          `json:"hash"`
	MachineRevisionID string          `json:"machine_revision_id"`
	Ignition          json.RawMessage `json:"ignition"`
}

// Catalog is the platform-wide Kubernetes version catalog.
type Catalog struct {
	Versions []string       `json:"versions"`
	Minors   []CatalogMinor `json:"minors"`
	Version  uint64         `json:"version"`
}

// CatalogMinor is one minor and its patches, oldest first.
type CatalogMinor struct {
	Minor    string   `json:"minor"`
	Latest   string   `json:"latest"`
	Versions []string `json:"versions"`
}

// ---- rollouts and operations ----

// RolloutStatus is a rollout's status.
type RolloutStatus string

const (
	RolloutPending   RolloutStatus = "pending"
	RolloutRunning   RolloutStatus = "running"
	RolloutPaused    RolloutStatus = "paused"
	RolloutSucceeded RolloutStatus = "succeeded"
	RolloutFailed    RolloutStatus = "failed"
	RolloutAborted   RolloutStatus = "aborted"
	// RolloutActive, as a filter only: every rollout not over.
	RolloutActive RolloutStatus = "active"
)

// Rollout rolls a pool revision out.
type Rollout struct {
	Org             string           `json:"org"`
	ID              string           `json:"id"`
	Kind            string           `json:"kind"`
	Pool            string           `json:"pool"`
	Cluster         string           `json:"cluster,omitempty"`
	Revision        uint64           `json:"revision"`
	Status          RolloutStatus    `json:"status"`
	Reason          string           `json:"reason,omitempty"`
	Refused         bool             `json:"refused,omitempty"`
	Rollback        bool             `json:"rollback,omitempty"`
	Aborting        bool             `json:"aborting,omitempty"`
	After           string           `json:"after,omitempty"`
	RequestedBy     string           `json:"requested_by,omitempty"`
	Strategy        RolloutStrategy  `json:"strategy"`
	Progress        Progress         `json:"progress"`
	Machines        []RolloutMachine `json:"machines"`
	Log             []LogEntry       `json:"log"`
	Checks          []CheckResult    `json:"checks,omitempty"`
	Excluded        []Exclusion      `json:"excluded,omitempty"`
	Conditions      []Condition      `json:"conditions,omitempty"`
	StartedAt       time.Time        `json:"started_at"`
	FinishedAt      time.Time        `json:"finished_at,omitzero"`
	UpdatedAt       time.Time        `json:"updated_at"`
	LastProgressAt  time.Time        `json:"last_progress_at,omitzero"`
	EstimatedDoneAt time.Time        `json:"estimated_done_at,omitzero"`
	Version         uint64           `json:"version"`
}

// RolloutStrategy is the settings a rollout runs with.
type RolloutStrategy struct {
	MaxUnavailable         IntOrPercent        `json:"max_unavailable,omitempty"`
	Pause                  string              `json:"pause,omitempty"`
	CordonTimeout          string              `json:"cordon_timeout,omitempty"`
	DrainTimeout           string              `json:"drain_timeout,omitempty"`
	DrainGracePeriod       string              `json:"drain_grace_period,omitempty"`
	RebootTimeout          string              `json:"reboot_timeout,omitempty"`
	NodeReadyTimeout       string              `json:"node_ready_timeout,omitempty"`
	UncordonTimeout        string              `json:"uncordon_timeout,omitempty"`
	MaintenanceWindows     []MaintenanceWindow `json:"maintenance_windows,omitempty"`
	Remediation            *Remediation        `json:"remediation,omitempty"`
	RemediationMaxInFlight int                 `json:"remediation_max_in_flight,omitempty"`
}

// Progress counts an operation's machines.
type Progress struct {
	Total      int `json:"total"`
	Done       int `json:"done"`
	InProgress int `json:"in_progress"`
	NotStarted int `json:"not_started"`
	Failed     int `json:"failed"`
	Released   int `json:"released"`
}

// RolloutMachine is one machine of a rollout.
type RolloutMachine struct {
	UUID       string      `json:"uuid"`
	Hostname   string      `json:"hostname"`
	Node       string      `json:"node"`
	Phase      string      `json:"phase"`
	Step       string      `json:"step,omitempty"`
	StepStatus string      `json:"step_status,omitempty"`
	Attempt    int         `json:"attempt,omitempty"`
	Deadline   time.Time   `json:"deadline,omitzero"`
	Outcome    string      `json:"outcome"`
	Rebooted   bool        `json:"rebooted,omitempty"`
	Reason     string      `json:"reason,omitempty"`
	Blocked    *DrainBlock `json:"blocked,omitempty"`
}

// DrainBlock is what holds a drain up: a PodDisruptionBudget.
type DrainBlock struct {
	At        time.Time `json:"at"`
	Pod       string    `json:"pod"`
	Budget    string    `json:"budget"`
	WaitedFor string    `json:"waited_for"`
	Message   string    `json:"message,omitempty"`
}

// CheckResult is a rollout's sanity check.
type CheckResult struct {
	Name    string `json:"name"`
	Machine string `json:"machine,omitempty"`
	Passed  bool   `json:"passed"`
	Reason  string `json:"reason,omitempty"`
}

// Exclusion is a machine a rollout leaves out, and why.
type Exclusion struct {
	UUID     string `json:"uuid"`
	Hostname string `json:"hostname,omitempty"`
	Reason   string `json:"reason"`
}

// Condition is a Kubernetes-style condition of an operation.
type Condition struct {
	Type    string    `json:"type"`
	Status  string    `json:"status"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Until   time.Time `json:"until,omitzero"`
}

// LogEntry is one entry of an operation's log.
type LogEntry struct {
	At      time.Time `json:"at"`
	Machine string    `json:"machine,omitempty"`
	Node    string    `json:"node,omitempty"`
	Step    string    `json:"step,omitempty"`
	Outcome string    `json:"outcome"`
	Message string    `json:"message,omitempty"`
}

// RolloutStart starts a rollout by hand.
type RolloutStart struct {
	Pool string `json:"pool"`
	// Revision to roll out; 0: the latest.
	Revision int `json:"revision,omitempty"`
	// Machine, if set, rolls out only this machine (its UUID).
	Machine string `json:"machine,omitempty"`
	// After is a rollout that must succeed first.
	After string `json:"after,omitempty"`
}

// RolloutFilter narrows ListRollouts.
type RolloutFilter struct {
	Pool   string        `query:"pool"`
	Status RolloutStatus `query:"status"`
	ListOptions
}

// Operation is any operation: a rollout, or a maintenance, unassignment
// or deletion of one machine.
type Operation struct {
	Org             string      `json:"org"`
	ID              string      `json:"id"`
	Kind            string      `json:"kind"`
	Pool            string      `json:"pool,omitempty"`
	Machine         string      `json:"machine,omitempty"`
	Node            string      `json:"node,omitempty"`
	Status          string      `json:"status"`
	Reason          string      `json:"reason,omitempty"`
	Progress        Progress    `json:"progress"`
	Step            string      `json:"step,omitempty"`
	StepStatus      string      `json:"step_status,omitempty"`
	StartedAt       time.Time   `json:"started_at"`
	FinishedAt      time.Time   `json:"finished_at,omitzero"`
	UpdatedAt       time.Time   `json:"updated_at"`
	LogLength       int         `json:"log_length"`
	Log             []LogEntry  `json:"log,omitempty"`
	Rollout         *Rollout    `json:"rollout,omitempty"`
	Conditions      []Condition `json:"conditions,omitempty"`
	LastProgressAt  time.Time   `json:"last_progress_at,omitzero"`
	EstimatedDoneAt time.Time   `json:"estimated_done_at,omitzero"`
	Version         uint64      `json:"version"`
}

// OperationFilter narrows ListOperations.
type OperationFilter struct {
	Pool   string `query:"pool"`
	Status string `query:"status"`
	Kind   string `query:"kind"`
	ListOptions
}

// LogPage is a slice of an operation's log: Next is the index to read
// from next; Final says the operation is over and no entry will follow.
type LogPage struct {
	Entries []LogEntry `json:"entries"`
	Next    int        `json:"next"`
	Status  string     `json:"status"`
	Final   bool       `json:"final"`
}

// ---- the audit log ----

// Event is one event of the audit log.
type Event struct {
	Sequence      uint64          `json:"sequence"`
	ID            string          `json:"id"`
	Type          string          `json:"type"`
	SchemaVersion int             `json:"schema_version"`
	Aggregate     string          `json:"aggregate"` // <type>/<id>
	Time          time.Time       `json:"time"`
	Actor         string          `json:"actor,omitempty"`
	CorrelationID string          `json:"correlation_id,omitempty"`
	CausationID   string          `json:"causation_id,omitempty"`
	Payload       json.RawMessage `json:"payload"`
}

// EventFilter narrows ListEvents.
type EventFilter struct {
	// Aggregate is <type> or <type>/<id>, such as machine/4c4c4544-….
	Aggregate string   `query:"aggregate"`
	Types     []string `query:"type"`
	// Actor is an exact actor, a kind (token, service, machine,
	// platform), or a kind and a name (token:t1, service:rollout).
	Actor string    `query:"actor"`
	Since time.Time `query:"since"`
	Until time.Time `query:"until"`
	ListOptions
}
