package api

// SubjectMachinesChanged carries MachinesChanged notices: core NATS (not
// the event stream), published by every registry replica after its read
// model changed, so that a reader that keeps the registry's answers (the
// gateway's read cache) drops the ones that changed. At most once: a
// reader detects a lost notice by a gap in Counter and forgets everything.
const SubjectMachinesChanged = "registry.machines.changed"

// MachinesChangedVersion is the notice's schema version; a reader drops
// everything on a notice of a version it does not know.
const MachinesChangedVersion = 1

// MachinesChanged says which machines' answers changed in one replica's
// read model since its previous notice. A replica sends at most one per
// short interval (see the registry's adapters), in the order its model
// changed.
type MachinesChanged struct {
	Version int `json:"v"`
	// Instance and Counter identify the sender and number its notices
	// from 1 without gaps; a new Instance starts a new count.
	Instance string `json:"instance"`
	Counter  uint64 `json:"counter"`
	// Position: the sender's read model has applied every machine event up
	// to this stream sequence, and this notice or an earlier one named
	// every machine they changed.
	Position uint64 `json:"position,omitempty"`
	// Reset: the sender's model was replaced (rebuilt or restored), or it
	// had too much to name: forget every answer of every organization.
	Reset bool                 `json:"reset,omitempty"`
	Orgs  []OrgMachinesChanged `json:"orgs,omitempty"`
}

// OrgMachinesChanged is one organization's part of a notice.
type OrgMachinesChanged struct {
	Org string `json:"org"`
	// Changed: machines whose answer changed (an event, a recorded boot),
	// and so every list of Org.
	Changed []string `json:"changed,omitempty"`
	// Seen: machines whose last_seen alone moved (a heartbeat), which
	// changes the machine's own answer and the last_seen lists show.
	Seen []string `json:"seen,omitempty"`
}
