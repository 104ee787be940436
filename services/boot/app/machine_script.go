package app

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/services/boot/domain/ipxe"
	"github.com/anvil-fleet/anvil/services/boot/domain/signing"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// MachineScript answers GET /ipxe?uuid&mac&token[&attempt]: it registers
// the machine through the registry (which verifies the enrollment token and
// records the iPXE boot), or answers a machine that booted before and did
// not change since from memory (KnownMachines), or confirms a machine
// remembered as waiting in a batch with others, and then either boots it
// (kernel, initrd and an Ignition URL with a per-boot token) or, while it
// has no pool or no target
// revision, tells it to wait and ask again with a growing delay.
func (a *App) MachineScript(ctx context.Context, req ScriptRequest) Script {
	const endpoint = "/ipxe"
	q, ref := ipxe.ParseMachineQuery(req.RawQuery)
	retry := a.machineURL(req.Base, q.Token, q.Attempt+1)
	if ref != nil {
		return a.refuse(ctx, endpoint, ref, q.Attempt, retry)
	}
	now := a.Now()
	// The delay before the firmware asks again is fixed before the
	// registry hears of the boot, so that it knows until when a machine
	// waiting in this loop is alive (the rollout's sanity checks).
	delay := a.backoff(q.Attempt)
	boot := regapi.SelfRegister{EnrollmentToken: q.Token, UUID: q.UUID, MAC: q.MAC, At: now, RetryIn: time.Duration(delay) * time.Second}
	var kb KnownBoot
	known := false
	if a.Known != nil {
		// A machine that booted before and did not change since is
		// answered from memory; the registry hears of the boot afterwards.
		kb, known = a.Known.Boot(boot, now)
	}
	m := kb.Machine
	asked := false // the registry answered for this request
	if known && kb.Waits {
		// Remembered as waiting: the registry confirms it, with the
		// other waiting machines' requests, so that an assignment made
		// just now shows.
		c, err := a.Known.ConfirmWait(ctx, a.Registry, boot, kb, a.Now, a.Log)
		if err != nil {
			return a.refuse(ctx, endpoint, registryRefusal(err), q.Attempt, retry, "uuid", q.UUID, "err", err)
		}
		known, asked, m = false, !c.Alone, c.Machine
	}
	if !known && !asked {
		var ticket KnownTicket
		if a.Known != nil {
			ticket = a.Known.Ticket()
		}
		reply, err := a.Registry.SelfRegister(ctx, boot)
		if err != nil {
			return a.refuse(ctx, endpoint, registryRefusal(err), q.Attempt, retry, "uuid", q.UUID, "err", err)
		}
		m = reply.Machine
		if reply.Created {
			a.Log.InfoContext(ctx, "machine registered itself", "org", m.Org, "uuid", m.UUID, "mac", q.MAC)
		}
		if a.Known != nil {
			a.Known.Remember(ticket, boot, reply.MachineReply, now)
		}
	}
	if waiting := waitReason(m); waiting != "" {
		ipxeScripts.WithLabelValues("wait").Inc()
		a.Log.DebugContext(ctx, "machine waits", "org", m.Org, "uuid", m.UUID, "why", waiting, "attempt", q.Attempt, "retry_in_s", delay)
		msgs := []string{fmt.Sprintf("machine %s is registered in organization %s (status %s)", m.UUID, m.Org, m.Status), waiting}
		return Script{Body: []byte(ipxe.WaitScript(msgs, delay, q.Attempt, retry)), Kind: "wait"}
	}

	var prep *preparedBoot
	if known {
		prep = kb.preparedAt(req.Base)
	}
	if prep == nil {
		var refusal *Script
		if prep, refusal = a.prepareBoot(ctx, req, m, q, retry); refusal != nil {
			return *refusal
		}
		switch {
		case known:
			a.Known.keepPrepared(kb, req.Base, prep)
		case a.Known != nil:
			// Remembered just now: its next boot finds the script prepared.
			a.Known.keepPreparedFor(m, req.Base, prep)
		}
	}
	// The per-boot token is signed into the script in place, after the
	// part of it kept from this machine's boot before.
	claims := signing.BootClaims{
		Org: m.Org, UUID: m.UUID, Pool: m.Pool, Revision: m.TargetRevision, Expires: now.Add(a.Settings.BootTokenTTL), Issued: now,
	}
	body, err := prep.script.AppendBoot(req.Buf, req.IgnitionBase, m.UUID, func(b []byte) []byte { return a.Keys.AppendBoot(b, claims) }, delay, retry)
	if err != nil {
		return a.refuse(ctx, endpoint, ipxe.Refuse(ipxe.ReasonConfigInvalid, "the boot script cannot be built: %v", err), q.Attempt, retry, "org", m.Org, "uuid", m.UUID)
	}
	bootScripts.Inc()
	if a.Log.Enabled(ctx, slog.LevelInfo) {
		a.Log.InfoContext(ctx, "machine boots", "org", m.Org, "uuid", m.UUID, "pool", m.Pool, "revision", m.TargetRevision,
			"flatcar", prep.flatcar, "from_memory", known)
	}
	return Script{Body: body, Kind: "boot"}
}

// bootScripts is looked up once: it is counted on every /ipxe that boots.
var bootScripts = ipxeScripts.WithLabelValues("boot")

// preparedBoot is what a machine's boot script holds but for what each
// request changes: it stands as long as the machine does not change (the
// Flatcar image of a pool revision never does).
type preparedBoot struct {
	script  *ipxe.PreparedBoot
	flatcar string
}

// prepareBoot renders machine m's boot script up to what each request
// changes, or the refusal that answers the request instead.
func (a *App) prepareBoot(ctx context.Context, req ScriptRequest, m regapi.Machine, q ipxe.MachineQuery, retry string) (*preparedBoot, *Script) {
	const endpoint = "/ipxe"
	fc, err := a.Revisions.Flatcar(ctx, m.Org, m.Pool, m.TargetRevision)
	if err != nil {
		s := a.refuse(ctx, endpoint, revisionsRefusal(err, m.Org, m.Pool, m.TargetRevision), q.Attempt, retry, "org", m.Org, "uuid", m.UUID, "err", err)
		return nil, &s
	}
	template := a.Settings.AssetBaseURL
	if strings.HasPrefix(template, "/") {
		template = req.Base + template // served by this boot service (--assets-dir)
	}
	assets, err := ipxe.AssetBase(template, fc.Channel, fc.Version)
	if err != nil {
		s := a.refuse(ctx, endpoint, ipxe.Refuse(ipxe.ReasonConfigInvalid, "no image URL for Flatcar %s %s: %v", fc.Channel, fc.Version, err),
			q.Attempt, retry, "org", m.Org, "uuid", m.UUID)
		return nil, &s
	}
	p, err := ipxe.PrepareBoot(ipxe.Boot{
		Messages: []string{fmt.Sprintf("machine %s (organization %s) boots revision %d of pool %s: Flatcar %s %s",
			m.UUID, m.Org, m.TargetRevision, m.Pool, fc.Channel, fc.Version)},
		AssetBase:  assets,
		KernelArgs: a.Settings.KernelArgs,
	})
	if err != nil {
		s := a.refuse(ctx, endpoint, ipxe.Refuse(ipxe.ReasonConfigInvalid, "the boot script cannot be built: %v", err), q.Attempt, retry, "org", m.Org, "uuid", m.UUID)
		return nil, &s
	}
	return &preparedBoot{script: p, flatcar: fc.Channel + "/" + fc.Version}, nil
}

// waitReason says why a registered machine cannot boot a revision yet, or
// "" when it can.
func waitReason(m regapi.Machine) string {
	switch {
	case m.Status == regapi.StatusDeleting:
		return "it is being deleted; it boots nothing until the deletion is aborted"
	case m.Pool == "":
		return "waiting to be assigned to a machine pool"
	case m.TargetRevision == 0:
		return fmt.Sprintf("assigned to pool %s; it provisions itself with the pool's applied revision (waiting for it, or for the pool's first Save & Apply)", m.Pool)
	case m.TargetRevision > math.MaxInt32:
		return fmt.Sprintf("its target revision %d is out of range", m.TargetRevision)
	}
	return ""
}
