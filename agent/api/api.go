// Package api holds the wire types of the agent API that the boot service
// serves under /agent/v1, and the defensive decoding of what the server sends.
//
// The types have no behaviour beyond encoding so that the boot service (or a
// test double of it) can share them without pulling in the agent's loops.
package api

import "time"

// Heartbeat is the body of POST /agent/v1/machines/{uuid}/heartbeat.
type Heartbeat struct {
	BootedRevision string `json:"booted_revision"`
}

// Report is the body of POST /agent/v1/machines/{uuid}/report.
type Report struct {
	BootedRevision string         `json:"booted_revision"`
	Hardware       Hardware       `json:"hardware"`
	RebootRequired RebootRequired `json:"reboot_required"`
	StartupLog     []string       `json:"startup_log"`
}

// Hardware is the machine's inventory as read from /proc and /sys.
type Hardware struct {
	CPUs        int    `json:"cpus"`
	MemoryBytes uint64 `json:"memory_bytes"`
	Disks       []Disk `json:"disks"`
	NICs        []NIC  `json:"nics"`
}

// Disk is one physical block device.
type Disk struct {
	Name       string `json:"name"`
	SizeBytes  uint64 `json:"size_bytes"`
	Model      string `json:"model"`
	Rotational bool   `json:"rotational"`
}

// NIC is one physical network interface. SpeedMbps is 0 when the kernel does
// not know the speed (link down, or a driver that does not report it).
type NIC struct {
	Name      string `json:"name"`
	MAC       string `json:"mac"`
	SpeedMbps int    `json:"speed_mbps"`
}

// RebootRequired says whether the machine needs a reboot and why.
type RebootRequired struct {
	Required bool   `json:"required"`
	Reason   string `json:"reason,omitempty"`
}

// Kind is what an instruction asks the agent to do.
type Kind string

const (
	// KindReboot reboots into Revision, unless that revision is already booted.
	KindReboot Kind = "reboot"
	// KindReapply reboots even when Revision is already booted, to unstick a machine.
	KindReapply Kind = "reapply"
)

// Instruction is one element of the instructions long-poll response.
type Instruction struct {
	ID       string    `json:"id"`
	Kind     Kind      `json:"kind"`
	Revision string    `json:"revision"`
	IssuedAt time.Time `json:"issued_at"`
}

// Instructions is the body of a 200 answer to GET .../instructions.
type Instructions struct {
	Instructions []Instruction `json:"instructions"`
}

// AckStatus is the outcome the agent reports for an instruction.
type AckStatus string

const (
	AckAccepted AckStatus = "accepted"
	AckDone     AckStatus = "done"
	AckSkipped  AckStatus = "skipped"
	AckFailed   AckStatus = "failed"
)

// Terminal reports whether no further ack follows this one for the same instruction.
func (s AckStatus) Terminal() bool { return s == AckDone || s == AckSkipped || s == AckFailed }

// Ack is the body of POST .../instructions/{id}/ack.
type Ack struct {
	Status  AckStatus `json:"status"`
	Message string    `json:"message,omitempty"`
}

// Problem is an RFC 9457 problem document (application/problem+json).
type Problem struct {
	Type   string       `json:"type,omitempty"`
	Title  string       `json:"title,omitempty"`
	Status int          `json:"status,omitempty"`
	Detail string       `json:"detail,omitempty"`
	Errors []FieldError `json:"errors,omitempty"`
}

// FieldError names one invalid field of a request.
type FieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}
