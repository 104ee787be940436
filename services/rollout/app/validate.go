package app

import (
	"regexp"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/fields"
)

// The rules for what a request names live here, beside the handlers they
// guard, as in the registry, revisions and boot services; the ports call
// them before a command or query runs, and every refusal names its field.

var (
	idRE   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// MaxReasonLen bounds the reason given with a pause, resume, abort or retry.
const MaxReasonLen = 1024

func checkOrg(f *errs.Fields, org string) {
	if err := fields.OrgID(org); err != nil {
		f.Add("org", "%v", err)
	}
}

func checkID(f *errs.Fields, field, id string) {
	if !idRE.MatchString(id) {
		f.Add(field, "must be 1-128 letters, digits, '-' or '_'")
	}
}

// CheckOrg checks the organization a list names.
func CheckOrg(org string) error {
	var f errs.Fields
	checkOrg(&f, org)
	return f.Err()
}

// CheckRef checks the organization and the rollout or operation id a
// request names.
func CheckRef(org, id string) error {
	var f errs.Fields
	checkOrg(&f, org)
	checkID(&f, "id", id)
	return f.Err()
}

// CheckControl checks a pause, resume, abort or retry.
func CheckControl(org, id, reason string) error {
	var f errs.Fields
	checkOrg(&f, org)
	checkID(&f, "id", id)
	if len(reason) > MaxReasonLen {
		f.Add("reason", "must be at most %d characters", MaxReasonLen)
	}
	return f.Err()
}

// CheckStart checks a rollout started by hand: the machine (if one), the
// rollout it comes after (if any) and its id (if chosen).
func CheckStart(org, machine, after, id string) error {
	var f errs.Fields
	checkOrg(&f, org)
	if machine != "" && !uuidRE.MatchString(machine) {
		f.Add("machine", "must be a lowercase canonical SMBIOS UUID")
	}
	if after != "" && !idRE.MatchString(after) {
		f.Add("after", "must be a rollout id")
	}
	if id != "" {
		checkID(&f, "id", id)
	}
	return f.Err()
}

// CheckLogPage checks a read of an operation's log: where it starts, how
// many entries, and how long it may wait for the next (at most maxWait).
func CheckLogPage(org, id string, after, limit int, wait, maxWait time.Duration) error {
	var f errs.Fields
	checkOrg(&f, org)
	checkID(&f, "id", id)
	if after < 0 {
		f.Add("after", "must be 0 or more")
	}
	if limit < 0 || limit > 1000 {
		f.Add("limit", "must be between 1 and 1000")
	}
	if wait < 0 || wait > maxWait {
		f.Add("wait", "must be between 0 and %s", maxWait)
	}
	return f.Err()
}
