package service_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/services/boot/service"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// life is what one boot handed a machine: the Ignition URL with its
// per-boot token, and the agent credential Ignition wrote.
type life struct {
	ignitionURL, credential, mrid string
}

// bootLife takes an assigned machine through /boot.ipxe, /ipxe and /ignition.
func (s *stack) bootLife(org, uuid, mac, enroll string) life {
	s.t.Helper()
	b, ign := s.bootMachine(org, uuid, mac, enroll)
	mrid, _, _ := strings.Cut(ign.files["/etc/anvil/revision"], "\n")
	return life{ignitionURL: b.ignitionURL, credential: ign.credential, mrid: strings.TrimSpace(mrid)}
}

// agentCall makes one agent API call with a life's credential.
func (s *stack) agentCall(call, uuid string, l life) response {
	s.t.Helper()
	base, auth := s.url+"/agent/v1/machines/"+uuid, "Bearer "+l.credential
	switch call {
	case "heartbeat":
		return do(s.t, http.DefaultClient, http.MethodPost, base+"/heartbeat", auth, strings.NewReader(`{"booted_revision":"`+l.mrid+`"}`))
	case "report":
		return do(s.t, http.DefaultClient, http.MethodPost, base+"/report", auth,
			strings.NewReader(`{"booted_revision":"`+l.mrid+`","startup_log":["anvil-agent started"]}`))
	case "instructions":
		return do(s.t, http.DefaultClient, http.MethodGet, base+"/instructions?wait=0", auth, nil)
	}
	s.t.Fatalf("no agent call %s", call)
	return response{}
}

var agentCalls = []string{"heartbeat", "report", "instructions"}

// works checks that a life's credential passes every agent call and its
// per-boot token gets a config.
func (s *stack) works(uuid string, l life) {
	s.t.Helper()
	for _, call := range agentCalls {
		if r := s.agentCall(call, uuid, l); r.status != http.StatusNoContent {
			s.t.Errorf("%s with the machine's current credential: %d %s", call, r.status, r.body)
		}
	}
	if r := s.get(l.ignitionURL); r.status != http.StatusOK {
		s.t.Errorf("/ignition with the machine's current per-boot token: %d %s", r.status, r.body)
	}
}

// revoked waits until the old life's credential is refused as revoked
// because of cause, then checks that every agent call and /ignition refuse
// it with a problem document that says so and shows no credential.
func (s *stack) revoked(uuid string, old life, cause string) {
	s.t.Helper()
	s.eventually("the old credential is revoked ("+cause+")", 20*time.Second, func() (bool, string) {
		r := s.agentCall("heartbeat", uuid, old)
		return r.status == http.StatusUnauthorized && strings.Contains(r.body, cause), fmt.Sprint(r.status, " ", r.body)
	})
	for _, call := range agentCalls {
		r := s.agentCall(call, uuid, old)
		if r.status != http.StatusUnauthorized || !strings.Contains(r.body, "the agent credential was revoked: "+cause) {
			s.t.Errorf("%s with the revoked credential: %d %s", call, r.status, r.body)
		}
		s.refusal(call, r, old)
	}
	r := s.get(old.ignitionURL)
	if r.status != http.StatusForbidden || !strings.Contains(r.body, "the per-boot token was revoked: "+cause) {
		s.t.Errorf("/ignition with the revoked per-boot token: %d %s", r.status, r.body)
	}
	s.refusal("/ignition", r, old)
}

// refusal checks a refusal is an RFC 9457 problem that echoes no secret
// and carries no config.
func (s *stack) refusal(what string, r response, l life) {
	s.t.Helper()
	if !strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") {
		s.t.Errorf("%s: not a problem document: %s", what, r.header.Get("Content-Type"))
	}
	token := l.ignitionURL[strings.Index(l.ignitionURL, "token=")+len("token="):]
	if strings.Contains(r.body, l.credential) || strings.Contains(r.body, token) || strings.Contains(r.body, bootstrapTok) {
		s.t.Errorf("%s: the refusal shows a secret: %s", what, r.body)
	}
}

// command runs machine commands (as an operator or the rollout service
// would) one after the other, each on the state the one before left.
func (s *stack) command(org, uuid string, cmds ...regapi.MachineCommand) {
	s.t.Helper()
	for _, c := range cmds {
		r, err := s.reg.Machine(s.ctx, org, uuid, c, 0)
		if err != nil {
			s.t.Fatalf("%s: %v", c.CommandType(), err)
		}
		s.waitMachine(r.Version)
	}
}

// reregister waits until the machine is gone from the registry and boots
// it once: it registers itself again, with no pool.
func (s *stack) reregister(org, uuid, mac, enroll string) {
	s.t.Helper()
	s.eventually("machine deleted", 10*time.Second, func() (bool, string) {
		_, err := s.machine(org, uuid)
		return err != nil, errString(err)
	})
	s.register(org, uuid, mac, enroll)
	if m, err := s.machine(org, uuid); err != nil || m.Status != regapi.StatusReadyUnassigned || m.Pool != "" {
		s.t.Fatalf("after registering again: %+v %v", m, err)
	}
}

// secondLife assigns the machine to the same pool and revision again and
// boots it: the new credential and token work, while the old life's stay
// refused although the machine's pool and revision match them again (so
// the revocation refuses them, not the machine's state).
func (s *stack) secondLife(org, uuid, mac, enroll string, old life, cause string) life {
	s.t.Helper()
	s.assign(org, uuid, "workers", 1)
	next := s.bootLife(org, uuid, mac, enroll)
	if next.credential == old.credential || next.mrid != old.mrid {
		s.t.Fatalf("second life: credential changed %v, machine revision %s -> %s", next.credential != old.credential, old.mrid, next.mrid)
	}
	s.works(uuid, next)
	s.revoked(uuid, old, cause)
	if strings.Contains(s.logs.String(), old.credential) || strings.Contains(s.logs.String(), next.credential) {
		s.t.Error("a credential appears in the logs")
	}
	return next
}

func (s *stack) revocations(cause string) float64 {
	return s.metric(`anvil_boot_credential_revocations_total{cause="` + cause + `"}`)
}

// TestCredentialsRevokedByForcedDeleteAndReregistration is the reported
// bug: a machine deleted with policy forced registers itself again under
// the same UUID (no pool); its old agent credential must no longer pass
// heartbeat, report or instructions, and its old per-boot token must no
// longer get a config (with the cluster's bootstrap token and a fresh
// credential) — not even once the machine is back in the same pool at the
// same revision, when its old credential would otherwise be the same
// string as its new one.
func TestCredentialsRevokedByForcedDeleteAndReregistration(t *testing.T) {
	s := newStack(t)
	enroll := s.org("acme")
	s.pool("acme", "workers")
	uuid, mac := uuidN(80), macN(80)
	s.register("acme", uuid, mac, enroll)
	s.assign("acme", uuid, "workers", 1)
	first := s.bootLife("acme", uuid, mac, enroll)
	s.works(uuid, first)
	deleted, again := s.revocations("deleted"), s.revocations("registered_again")

	s.command("acme", uuid, regapi.Delete{Policy: regapi.DeletionForced})
	s.revoked(uuid, first, "the machine was deleted")
	s.reregister("acme", uuid, mac, enroll)
	s.revoked(uuid, first, "the machine registered itself again after it was deleted")
	if d, a := s.revocations("deleted")-deleted, s.revocations("registered_again")-again; d < 1 || a < 1 {
		t.Errorf("revocations counted: deleted +%v, registered_again +%v", d, a)
	}

	second := s.secondLife("acme", uuid, mac, enroll, first, "the machine registered itself again after it was deleted")
	// The new life reports its revision to the registry afresh, although
	// it is the machine revision the old life had reported.
	s.eventually("current revision reported", 10*time.Second, func() (bool, string) {
		m, err := s.machine("acme", uuid)
		return err == nil && m.CurrentRevision == 1, mustJSON(m) + errString(err)
	})

	// A redelivery of every revoking event of the machine changes nothing:
	// not the count, and not the new life's credential.
	envs, err := s.env.Store.Load(s.ctx, events.AggregateRef{Org: "acme", Type: "machine", ID: uuid})
	if err != nil {
		t.Fatal(err)
	}
	reg, before, replayed := service.NewRegistry(), s.revocations("deleted")+s.revocations("registered_again"), 0
	for _, env := range envs {
		if env.Type != "machine.deleted" && env.Type != "machine.registered" {
			continue
		}
		p, err := reg.Decode(&env)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.boot.App.RevokeCredentials(s.ctx, env.Org, env.AggregateID, env.Sequence, env.Time, p); err != nil {
			t.Fatalf("redelivered %s: %v", env.Type, err)
		}
		replayed++
	}
	if replayed != 3 {
		t.Errorf("%d revoking events in the log, want 3 (registered, deleted, registered)", replayed)
	}
	if after := s.revocations("deleted") + s.revocations("registered_again"); after != before {
		t.Errorf("redelivered events counted again: %v -> %v", before, after)
	}
	s.works(uuid, second)
	s.revoked(uuid, first, "the machine registered itself again after it was deleted")
}

// TestCredentialsRevokedByUnassign: a graceful unassignment revokes once
// the machine has left the pool (not while it is drained).
func TestCredentialsRevokedByUnassign(t *testing.T) {
	s := newStack(t)
	enroll := s.org("acme")
	s.pool("acme", "workers")
	uuid, mac := uuidN(81), macN(81)
	s.register("acme", uuid, mac, enroll)
	s.assign("acme", uuid, "workers", 1)
	first := s.bootLife("acme", uuid, mac, enroll)
	before := s.revocations("unassigned")

	s.command("acme", uuid, regapi.Unassign{})
	if m, _ := s.machine("acme", uuid); m.Status != regapi.StatusUnassigning {
		t.Fatalf("status %s, want unassigning", m.Status)
	}
	if r := s.agentCall("heartbeat", uuid, first); r.status != http.StatusNoContent {
		t.Errorf("heartbeat while the machine is drained: %d %s", r.status, r.body)
	}
	s.command("acme", uuid, regapi.CompleteUnassign{})
	s.revoked(uuid, first, "the machine was unassigned from its pool")
	if d := s.revocations("unassigned") - before; d < 1 {
		t.Errorf("revocations counted: +%v", d)
	}
	s.secondLife("acme", uuid, mac, enroll, first, "the machine was unassigned from its pool")
}

// TestCredentialsRevokedByForceUnassign: a forced unassignment revokes at
// once.
func TestCredentialsRevokedByForceUnassign(t *testing.T) {
	s := newStack(t)
	enroll := s.org("acme")
	s.pool("acme", "workers")
	uuid, mac := uuidN(82), macN(82)
	s.register("acme", uuid, mac, enroll)
	s.assign("acme", uuid, "workers", 1)
	first := s.bootLife("acme", uuid, mac, enroll)
	before := s.revocations("force_unassigned")

	s.command("acme", uuid, regapi.ForceUnassign{})
	s.revoked(uuid, first, "the machine was force-unassigned from its pool")
	if d := s.revocations("force_unassigned") - before; d < 1 {
		t.Errorf("revocations counted: +%v", d)
	}
	s.secondLife("acme", uuid, mac, enroll, first, "the machine was force-unassigned from its pool")
}

// TestCredentialsRevokedByGracefulDelete: while a graceful deletion
// prepares, the machine boots nothing (its per-boot token is refused) but
// its agent still works; once it is deleted, both are revoked, and stay so
// when it registers again.
func TestCredentialsRevokedByGracefulDelete(t *testing.T) {
	s := newStack(t)
	enroll := s.org("acme")
	s.pool("acme", "workers")
	uuid, mac := uuidN(83), macN(83)
	s.register("acme", uuid, mac, enroll)
	s.assign("acme", uuid, "workers", 1)
	first := s.bootLife("acme", uuid, mac, enroll)

	s.command("acme", uuid, regapi.Delete{})
	if m, _ := s.machine("acme", uuid); m.Status != regapi.StatusDeleting {
		t.Fatalf("status %s, want deleting", m.Status)
	}
	if r := s.get(first.ignitionURL); r.status != http.StatusForbidden || !strings.Contains(r.body, "it is being deleted") {
		t.Errorf("/ignition while the machine is being deleted: %d %s", r.status, r.body)
	}
	if r := s.agentCall("heartbeat", uuid, first); r.status != http.StatusNoContent {
		t.Errorf("heartbeat while the deletion prepares: %d %s", r.status, r.body)
	}
	s.command("acme", uuid, regapi.CompleteDeletionPreparation{}, regapi.CompleteDeletion{})
	s.revoked(uuid, first, "the machine was deleted")
	s.reregister("acme", uuid, mac, enroll)
	s.revoked(uuid, first, "the machine registered itself again after it was deleted")
	s.secondLife("acme", uuid, mac, enroll, first, "the machine registered itself again after it was deleted")
}

// TestIgnitionFollowsTheMachine: a per-boot token that was not revoked is
// still refused once the machine's pool or revisions no longer match it,
// with a reason, and the token /ipxe issues then works.
func TestIgnitionFollowsTheMachine(t *testing.T) {
	s := newStack(t)
	enroll := s.org("acme")
	s.pool("acme", "workers")
	s.pool("acme", "gpus")
	uuid, mac := uuidN(84), macN(84)
	s.register("acme", uuid, mac, enroll)
	s.assign("acme", uuid, "workers", 1)
	next := chainTarget(t, s.ipxeGet(s.url+"/boot.ipxe?token="+enroll, uuid, mac))
	rev1 := parseBoot(t, s.ipxeGet(next, uuid, mac)).ignitionURL

	// Targeted with revision 2 before it fetched its config (it never
	// booted revision 1): the revision 1 token no longer fits.
	rev := uint64(s.newRevision("acme", "workers", "4230.2.4"))
	s.command("acme", uuid, regapi.SetTargetRevision{Revision: rev})
	if r := s.get(rev1); r.status != http.StatusForbidden || !strings.Contains(r.body, "was issued for revision 1 of pool workers, but the machine's target revision is 2") {
		t.Errorf("/ignition for a revision the machine neither runs nor is to run: %d %s", r.status, r.body)
	}
	rev2 := parseBoot(t, s.ipxeGet(next, uuid, mac)).ignitionURL
	if r := s.get(rev2); r.status != http.StatusOK {
		t.Fatalf("/ignition for the target revision: %d %s", r.status, r.body)
	}
	// Its current revision is still good (a machine that booted it and is
	// not yet moved on), once the agent reported it.
	ign := parseIgnition(t, s.get(rev2).body)
	l := life{ignitionURL: rev2, credential: ign.credential, mrid: strings.TrimSpace(strings.Split(ign.files["/etc/anvil/revision"], "\n")[0])}
	if r := s.agentCall("heartbeat", uuid, l); r.status != http.StatusNoContent {
		t.Fatalf("heartbeat: %d %s", r.status, r.body)
	}
	s.eventually("revision 2 reported", 10*time.Second, func() (bool, string) {
		m, err := s.machine("acme", uuid)
		return err == nil && m.CurrentRevision == rev, mustJSON(m) + errString(err)
	})
	rev3 := uint64(s.newRevision("acme", "workers", "4230.2.5"))
	s.command("acme", uuid, regapi.SetTargetRevision{Revision: rev3})
	if r := s.get(rev2); r.status != http.StatusOK {
		t.Errorf("/ignition for the current revision: %d %s", r.status, r.body)
	}
	// Moved to another pool through a forced unassignment: revoked. A
	// token for the new pool works.
	s.command("acme", uuid, regapi.ForceUnassign{})
	s.assign("acme", uuid, "gpus", 1)
	if r := s.get(rev2); r.status != http.StatusForbidden {
		t.Errorf("/ignition for the old pool: %d %s", r.status, r.body)
	}
	gpus := parseBoot(t, s.ipxeGet(next, uuid, mac)).ignitionURL
	if r := s.get(gpus); r.status != http.StatusOK {
		t.Errorf("/ignition in the new pool: %d %s", r.status, r.body)
	}
}
