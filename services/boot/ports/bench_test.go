package ports

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/services/boot/app"
	"github.com/anvil-fleet/anvil/services/boot/domain/signing"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// benchRegistry answers every SelfRegister with a machine that boots.
type benchRegistry struct{ app.Registry }

func (benchRegistry) SelfRegister(_ context.Context, r regapi.SelfRegister) (regapi.SelfRegisterReply, error) {
	return regapi.SelfRegisterReply{MachineReply: regapi.MachineReply{Version: 7, Machine: regapi.Machine{
		Org: "acme", UUID: r.UUID, Pool: "workers", TargetRevision: 1, Status: regapi.StatusProvisioning}}}, nil
}

type benchRevisions struct{}

func (benchRevisions) Flatcar(context.Context, string, string, uint64) (app.Flatcar, error) {
	return app.Flatcar{Channel: "stable", Version: "4230.2.3"}, nil
}

// BenchmarkKnownMachineScript is the whole handler chain (tracing,
// metrics, access log, /ipxe) for a machine answered from memory: what
// each boot of a rack that boots again costs the boot service itself,
// without the network.
func BenchmarkKnownMachineScript(b *testing.B) {
	keys, err := signing.NewKeys(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		b.Fatal(err)
	}
	a := &app.App{Keys: keys, Log: slog.New(slog.DiscardHandler), Registry: benchRegistry{}, Revisions: benchRevisions{},
		Known: app.NewKnownMachines(time.Hour, time.Hour)}
	a.Settings.AssetBaseURL = "http://mirror.test/flatcar"
	a.Settings.KernelArgs = []string{"console=tty0", "console=ttyS0,115200n8"}
	a.Defaults()
	h := NewHTTP(a, HTTPOptions{Log: slog.New(slog.DiscardHandler)})
	req := httptest.NewRequest(http.MethodGet, "http://boot.test:8080/ipxe?uuid=4c4c4544-0035-4b10-8056-b7c04f4e3532&mac=52-54-00-12-34-56"+
		"&token=anvil_enroll_5i7bmyxrkemkbbjm_iyoum7o2mgqih5mbeauvmam3ua3pjdsqypc4vwall6vcibu5ci5a", nil)
	serve := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	// The first boot asks the registry; the rest are answered from memory.
	if w := serve(); !strings.Contains(w.Body.String(), "ignition.config.url=") {
		b.Fatalf("no boot script:\n%s", w.Body)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		serve()
	}
}
