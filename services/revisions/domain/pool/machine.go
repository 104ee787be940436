package pool

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/revisions/domain/check"
)

// MachineSettings are a machine's own reboot-relevant settings.
type MachineSettings struct {
	Hostname string            `json:"hostname"`
	Labels   map[string]string `json:"labels,omitempty"` // become node labels; they win over the pool's
}

// Validate checks the settings.
func (s MachineSettings) Validate() error {
	var f errs.Fields
	if err := check.Hostname(s.Hostname); err != nil {
		f.Add("hostname", "%v", err)
	}
	validateNodeLabels(&f, "labels", s.Labels)
	return f.Err()
}

// MachineRevision is a pool revision plus one machine's settings: what the
// machine boots. It is a value; its ID and Hash are derived from the pool,
// the pool revision (number and content hash), the hostname and the
// labels, so changing any of them gives a new machine revision.
type MachineRevision struct {
	ID               string            `json:"id"`   // "mr-" + 20 hex digits, written to /etc/anvil/revision
	Hash             string            `json:"hash"` // "sha256:<hex>", the full digest
	Pool             string            `json:"pool"`
	PoolRevision     int               `json:"pool_revision"`
	PoolRevisionHash string            `json:"pool_revision_hash"`
	Hostname         string            `json:"hostname"`
	Labels           map[string]string `json:"labels,omitempty"`
}

// NewMachineRevision builds the machine revision of a machine with
// settings s in pool at revision rev.
func NewMachineRevision(pool string, rev Revision, s MachineSettings) (MachineRevision, error) {
	var f errs.Fields
	if err := check.DNSLabel(pool); err != nil {
		f.Add("pool", "%v", err)
	}
	if rev.Number < 1 || rev.Hash == "" {
		f.Add("pool_revision", "must be an existing pool revision")
	}
	f.Merge("", s.Validate())
	if err := f.Err(); err != nil {
		return MachineRevision{}, err
	}
	m := MachineRevision{
		Pool:             pool,
		PoolRevision:     rev.Number,
		PoolRevisionHash: rev.Hash,
		Hostname:         s.Hostname,
		Labels:           cloneMap(s.Labels),
	}
	m.Hash = m.computeHash()
	m.ID = "mr-" + m.Hash[len("sha256:"):][:20]
	return m, nil
}

// Verify reports whether ID and Hash match the content (a value read back
// from storage, say).
func (m MachineRevision) Verify() error {
	h := m.computeHash()
	if m.Hash != h || m.ID != "mr-"+h[len("sha256:"):][:20] {
		return fmt.Errorf("machine revision %s: id or hash does not match its content", m.ID)
	}
	return nil
}

func (m MachineRevision) computeHash() string {
	b, _ := json.Marshal(struct {
		Pool             string            `json:"pool"`
		PoolRevision     int               `json:"pool_revision"`
		PoolRevisionHash string            `json:"pool_revision_hash"`
		Hostname         string            `json:"hostname"`
		Labels           map[string]string `json:"labels,omitempty"`
	}{m.Pool, m.PoolRevision, m.PoolRevisionHash, m.Hostname, m.Labels})
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// NodeLabels merges the pool's node labels with the machine's; the
// machine's win.
func (m MachineRevision) NodeLabels(rev Revision) map[string]string {
	return api.NodeLabels(rev.Config.NodeLabels, m.Labels)
}
