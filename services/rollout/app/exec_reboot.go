package app

import (
	"context"
	"fmt"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// accepted reports whether the agent took the instruction (and so may be
// rebooting): a withdrawal after the acceptance cannot stop it.
func accepted(in bootapi.Instruction) bool {
	switch in.Status {
	case bootapi.StatusAccepted, bootapi.StatusDone, bootapi.StatusSkipped:
		return true
	}
	return !in.AcceptedAt.IsZero()
}

func (x *executor) instruction(ctx context.Context) (bootapi.Instruction, bool, error) {
	in, err := x.a.Boot.Instruction(ctx, x.d.org, x.act.Machine, x.act.InstructionID)
	if errs.KindOf(err) == errs.KindNotFound {
		return in, false, nil // the boot service has not stored it yet
	}
	return in, err == nil, err
}

func (x *executor) withdraw(ctx context.Context, reason string) error {
	return x.publish(ctx, bootapi.InstructionWithdrawn{
		Org: x.d.org, UUID: x.act.Machine, InstructionID: x.act.InstructionID, Reason: reason,
	}, "iw-"+x.act.InstructionID)
}

// issueReboot targets the machine at the revision, puts the reboot
// instruction in the log once (the boot service delivers it to the agent),
// and waits for the agent's answer.
func (x *executor) issueReboot(ctx context.Context) {
	defer x.a.Boot.Follow(x.d.org, x.act.Machine)()
	issued := false
	x.retry(ctx, func() <-chan struct{} { return x.a.Notify.C(machineKey(x.d.org, x.act.Machine)) }, func() (bool, error) {
		if !issued {
			if err := x.setTarget(ctx, x.act.Revision); err != nil {
				if permanent(err) {
					// Not withdrawn: it was never issued.
					x.fail(ctx, "the registry refused to target the machine: "+err.Error())
					return true, nil
				}
				return false, err
			}
			err := x.publish(ctx, bootapi.RebootRequested{
				Org: x.d.org, UUID: x.act.Machine, InstructionID: x.act.InstructionID, Kind: string(x.act.InstructionKind),
				Pool: x.act.Pool, Revision: x.act.Revision,
				Reason: fmt.Sprintf("rollout %s of pool %s to revision %d (attempt %d)", x.d.id, x.act.Pool, x.act.Revision, x.act.Attempt),
			}, "rr-"+x.act.InstructionID)
			if err != nil {
				return false, err
			}
			issued = true
		}
		in, found, err := x.instruction(ctx)
		if err != nil || !found {
			return false, err
		}
		switch {
		case accepted(in):
			note, err := x.dropStaleNode(ctx)
			if err != nil {
				return false, err
			}
			x.succeed(ctx, fmt.Sprintf("the agent %s the instruction%s", in.Status, note))
			return true, nil
		case in.Status == bootapi.StatusPending:
			return false, nil
		}
		// failed, expired, superseded or withdrawn, never accepted: make
		// sure no agent takes it later, then fail the step.
		if err := x.withdraw(ctx, "the instruction "+string(in.Status)); err != nil {
			return false, err
		}
		x.fail(ctx, fmt.Sprintf("the reboot instruction was %s without the agent accepting it%s", in.Status, suffix(in.Message)))
		return true, nil
	})
}

// confirmReboot withdraws an instruction (timed out, or the rollout is
// aborted) and reads whether the agent had accepted it first.
func (x *executor) confirmReboot(ctx context.Context) {
	defer x.a.Boot.Follow(x.d.org, x.act.Machine)()
	withdrawn := false
	x.retry(ctx, func() <-chan struct{} { return x.a.Notify.C(machineKey(x.d.org, x.act.Machine)) }, func() (bool, error) {
		if !withdrawn {
			if err := x.withdraw(ctx, "the rollout's reboot step "+x.act.Why); err != nil {
				return false, err
			}
			withdrawn = true
		}
		in, found, err := x.instruction(ctx)
		if err != nil {
			return false, err
		}
		switch {
		case !found && x.wasIssued:
			return false, nil // the boot service has not stored it yet; the withdrawal follows it
		case found && accepted(in):
			note, err := x.dropStaleNode(ctx)
			if err != nil {
				return false, err
			}
			x.succeed(ctx, fmt.Sprintf("the agent had accepted the instruction (%s) before it was withdrawn%s", in.Status, note))
			return true, nil
		case found && in.Status == bootapi.StatusPending:
			return false, nil // the withdrawal is not processed yet
		}
		if x.act.Why == "aborted" {
			x.report(ctx, rollout.CancelStep{Machine: x.act.Machine, Step: x.act.Step, Attempt: x.act.Attempt,
				Reason: "the reboot instruction was withdrawn before the agent accepted it"})
			return true, nil
		}
		x.report(ctx, rollout.FailStep{Machine: x.act.Machine, Step: x.act.Step, Attempt: x.act.Attempt, TimedOut: true,
			Reason: fmt.Sprintf("the agent did not accept the reboot instruction within %s; it was withdrawn", x.act.Deadline.Sub(x.stepStartedAt))})
		return true, nil
	})
}

// waitBoot waits until the agent reports that the machine booted the
// target revision after the reboot.
func (x *executor) waitBoot(ctx context.Context) {
	defer x.a.Boot.Follow(x.d.org, x.act.Machine)()
	askedRegistry := x.a.now()
	x.retry(ctx, func() <-chan struct{} { return x.a.Notify.C(machineKey(x.d.org, x.act.Machine)) }, func() (bool, error) {
		var in bootapi.Instruction
		found := false
		if x.instructionID != "" {
			var err error
			in, err = x.a.Boot.Instruction(ctx, x.d.org, x.act.Machine, x.instructionID)
			switch {
			case err == nil:
				found = true
			case errs.KindOf(err) != errs.KindNotFound:
				return false, err
			}
		}
		if found && in.Status == bootapi.StatusFailed {
			x.fail(ctx, "the machine did not boot the revision: "+in.Message)
			return true, nil
		}
		if found && in.Status == bootapi.StatusDone {
			x.succeed(ctx, fmt.Sprintf("booted revision %d", x.act.Revision))
			return true, nil
		}
		// The boot service settles an instruction the agent took (done or
		// failed) before it reports the booted revision to the registry:
		// while it is unsettled the registry cannot tell more, and is
		// asked only every Replan, in case. Asking at every wake-up was
		// 12 registry reads a machine in a 10,000-machine rollout.
		if found && (in.Status == bootapi.StatusAccepted || in.Status == bootapi.StatusPending) &&
			x.a.now().Sub(askedRegistry) < x.a.Settings.Replan {
			return false, nil
		}
		askedRegistry = x.a.now()
		m, err := x.a.Registry.Machine(ctx, x.d.org, x.act.Machine)
		if err != nil {
			return false, err
		}
		if m.CurrentRevision != x.act.Revision {
			return false, nil
		}
		// A reapply boots the revision the machine already ran: only the
		// boot service's "done" (above) tells the new boot from the old.
		if x.kind == rollout.KindReapply {
			return false, nil
		}
		if found && in.Status != bootapi.StatusSkipped && !in.AcceptedAt.IsZero() && m.CurrentRevisionAt.Before(in.AcceptedAt) {
			return false, nil // that report is from before the reboot
		}
		x.succeed(ctx, fmt.Sprintf("the agent reports revision %d", x.act.Revision))
		return true, nil
	})
}

func suffix(msg string) string {
	if msg == "" {
		return ""
	}
	return ": " + msg
}

// dropStaleNode deletes the machine's Node once its agent accepted the
// reboot, when a kubelet registered it (it reports a boot id) and it is
// still the Node of the boot before the reboot. The machine joins again
// from a fresh root file system: kubeadm join refuses to join while a
// Node of that name says Ready, which the old one does for the
// node-monitor grace period, and the kubelet of the new boot registers
// it anew with the revision's labels and taints. Nodes that report no boot
// id (kwok's) are left alone: nothing would register them again. It
// returns a note for the step's message.
func (x *executor) dropStaleNode(ctx context.Context) (string, error) {
	if x.bootIDBefore == "" || x.act.Node == "" {
		return "", nil
	}
	cl, err := x.a.Clusters.Cluster(ctx, x.d.org, x.cluster)
	if err != nil {
		return "", err
	}
	deleted, err := cl.DeleteNodeOfBoot(ctx, x.act.Node, x.bootIDBefore)
	if err != nil || !deleted {
		return "", err // gone already, or registered by the new boot
	}
	return "; node " + x.act.Node + " deleted: the kubelet of the new boot registers it again", nil
}
