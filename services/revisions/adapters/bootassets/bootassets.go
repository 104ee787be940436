// Package bootassets asks the boot service, over NATS, about the files a
// rendered config makes machines fetch (cmd.boot.assets.resolve): the
// production implementation of app.Assets.
package bootassets

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
)

// Timeout bounds one resolve: the boot service answers within
// bootapi's ResolveWait (a sysext it is fetching from its mirror is then
// "pending"), so this leaves room for the round trip.
const Timeout = 8 * time.Second

// Client resolves assets through the boot service.
type Client struct{ NC *nats.Conn }

// ResolveAssets implements app.Assets. The boot service not answering is
// errs.KindUnavailable.
func (c Client) ResolveAssets(ctx context.Context, names []string) ([]bootapi.Asset, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	r, err := bootapi.ResolveAssets(ctx, c.NC, bootapi.ResolveAssetsRequest{Names: names})
	if err != nil {
		return nil, err
	}
	return r.Assets, nil
}
