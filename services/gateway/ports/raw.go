package ports

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// rawJSON is an answer the gateway passes on as the service encoded it:
// the hot read paths (a machine, a page of machines) skip decoding the
// registry's reply into Go values only to encode them again. The route's
// Response type still documents (and the tests validate) its shape.
type rawJSON struct {
	body    []byte
	version uint64 // the ETag; 0: none
}

func (r rawJSON) ETagVersion() uint64 { return r.version }

// listMachinesRaw is ListMachines, answered with the registry's own bytes
// (MachinePage has the same shape as the registry's page).
func (h *handler) listMachinesRaw(ctx context.Context, req regapi.MachineList) (any, error) {
	raw, err := command.Call[regapi.MachineList, json.RawMessage](ctx, h.NC, regapi.SubjectMachineList, req)
	if err != nil {
		return nil, err
	}
	return rawJSON{body: raw}, nil
}

// getMachineRaw is GetMachine as a Machine: the registry's machine object
// with its version added.
func (h *handler) getMachineRaw(ctx context.Context, req regapi.MachineGet) (any, error) {
	rep, err := command.Call[regapi.MachineGet, struct {
		Machine json.RawMessage `json:"machine"`
		Version uint64          `json:"version"`
	}](ctx, h.NC, regapi.SubjectMachineGet, req)
	if err != nil {
		return nil, err
	}
	m := rep.Machine
	for len(m) > 0 && m[len(m)-1] != '}' { // trailing white space
		m = m[:len(m)-1]
	}
	if len(m) < 2 || m[0] != '{' {
		return nil, errs.Internal("the registry answered %s with a machine that is not a JSON object", regapi.SubjectMachineGet)
	}
	body := make([]byte, 0, len(m)+32)
	body = append(body, m[:len(m)-1]...)
	if !isBlank(m[1 : len(m)-1]) { // not {}
		body = append(body, ',')
	}
	body = append(body, `"version":`...)
	body = strconv.AppendUint(body, rep.Version, 10)
	body = append(body, '}')
	return rawJSON{body: body, version: rep.Version}, nil
}

func isBlank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\n' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}
