package app

import (
	"context"

	"github.com/anvil-fleet/anvil/services/boot/domain/ipxe"
)

// ChainScript answers GET /boot.ipxe?token=<enrollment token>, the chain URL
// operators put into DHCP or an iPXE build: a script that hands the
// machine's SMBIOS UUID and MAC to /ipxe. It checks only the token's form;
// /ipxe verifies it, so a rack powering on costs one registry call per
// machine, not two.
func (a *App) ChainScript(ctx context.Context, req ScriptRequest) Script {
	q, ref := ipxe.ParseChainQuery(req.RawQuery)
	if ref != nil {
		return a.refuse(ctx, "/boot.ipxe", ref, q.Attempt, ipxe.ChainURL(req.Base, q.Token, q.Attempt+1))
	}
	ipxeScripts.WithLabelValues("chain").Inc()
	return Script{Body: []byte(ipxe.ChainScript(ipxe.MachineURL(req.Base, q.Token, 0))), Kind: "chain"}
}
