package app

import (
	"context"
	"fmt"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/boot/domain/ipxe"
)

// ScriptRequest is a firmware request for an iPXE script.
type ScriptRequest struct {
	RawQuery string
	// Base is the boot service's URL as the firmware reaches it; retries
	// and the chain go there.
	Base string
	// IgnitionBase is where the kernel's Ignition fetches its config
	// (the HTTPS listener when TLS is configured).
	IgnitionBase string
	// Buf, when set, is scratch space a boot script is appended to (Body
	// may then alias it): the caller reuses it once Body was written.
	Buf []byte
}

// Script is an iPXE script and what it says. Every script is a valid
// "#!ipxe" script served with HTTP 200.
type Script struct {
	Body    []byte
	Kind    string        // chain, wait, boot or refusal
	Refusal *ipxe.Refusal // set for refusals
}

// refuse builds the refusal script, logs the reason and counts it.
func (a *App) refuse(ctx context.Context, endpoint string, ref *ipxe.Refusal, attempt int, retryURL string, attrs ...any) Script {
	ipxeRefusals.WithLabelValues(string(ref.Reason)).Inc()
	ipxeScripts.WithLabelValues("refusal").Inc()
	attrs = append(attrs, "endpoint", endpoint, "reason", string(ref.Reason), "detail", ref.Message, "attempt", attempt)
	a.Log.WarnContext(ctx, "iPXE request refused; the firmware is told why and retries", attrs...)
	return Script{Body: []byte(ipxe.RefusalScript(ref, a.backoff(attempt), attempt, retryURL)), Kind: "refusal", Refusal: ref}
}

// Internal answers a request that failed unexpectedly (a panic, say) with a
// refusal script, so the console still shows something and retries.
func (a *App) Internal(ctx context.Context, endpoint string, req ScriptRequest, cause any) Script {
	ref := ipxe.Refuse(ipxe.ReasonInternal, "the boot service failed unexpectedly; its log says why")
	var retry string
	if endpoint == "/boot.ipxe" {
		q, _ := ipxe.ParseChainQuery(req.RawQuery)
		retry = ipxe.ChainURL(req.Base, q.Token, q.Attempt+1)
		return a.refuse(ctx, endpoint, ref, q.Attempt, retry, "cause", fmt.Sprint(cause))
	}
	q, _ := ipxe.ParseMachineQuery(req.RawQuery)
	retry = ipxe.MachineURL(req.Base, q.Token, q.Attempt+1)
	return a.refuse(ctx, endpoint, ref, q.Attempt, retry, "cause", fmt.Sprint(cause))
}

// registryRefusal turns the registry's answer to SelfRegister into what the
// console shows.
func registryRefusal(err error) *ipxe.Refusal {
	e := errs.As(err)
	switch e.Kind {
	case errs.KindUnauthorized, errs.KindForbidden:
		return ipxe.Refuse(ipxe.ReasonTokenRefused, "the enrollment token was refused (%s); check the token in the chain URL, or issue a new one", e.Message)
	case errs.KindNotFound:
		return ipxe.Refuse(ipxe.ReasonTokenRefused, "the enrollment token's organization was not found (%s)", e.Message)
	case errs.KindValidation, errs.KindConflict, errs.KindPrecondition, errs.KindRateLimited:
		return ipxe.Refuse(ipxe.ReasonMachineRefused, "the registry refused this machine: %s", e.Error())
	case errs.KindUnavailable:
		return ipxe.Refuse(ipxe.ReasonRegistryUnavailable, "the registry is not available (%s)", e.Message)
	}
	return ipxe.Refuse(ipxe.ReasonInternal, "the registry failed; the boot service's log says why")
}

func revisionsRefusal(err error, org, pool string, rev uint64) *ipxe.Refusal {
	e := errs.As(err)
	switch e.Kind {
	case errs.KindNotFound, errs.KindValidation:
		return ipxe.Refuse(ipxe.ReasonRevisionMissing, "revision %d of pool %s (organization %s) was not found: %s", rev, pool, org, e.Message)
	case errs.KindUnavailable:
		return ipxe.Refuse(ipxe.ReasonRevisionsUnavailable, "the revisions service is not available (%s)", e.Message)
	}
	return ipxe.Refuse(ipxe.ReasonInternal, "the revisions service failed; the boot service's log says why")
}
