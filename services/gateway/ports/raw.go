package ports

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"

	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/fields"
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
// (MachinePage has the same shape as the registry's page), which the
// registry makes from its read model's cached encodings: nothing on the
// way decodes or encodes the page.
func (h *handler) listMachinesRaw(ctx context.Context, req regapi.MachineList) (any, error) {
	raw, err := command.CallJSON(ctx, h.NC, regapi.SubjectMachineList, req)
	if err != nil {
		return nil, err
	}
	if len(raw) == 0 {
		return nil, errs.Internal("the registry answered %s with nothing", regapi.SubjectMachineList)
	}
	return rawJSON{body: raw}, nil
}

// getMachineRaw is GetMachine as a Machine: the registry's machine object
// with its version added.
func (h *handler) getMachineRaw(ctx context.Context, req regapi.MachineGet) (any, error) {
	raw, err := command.CallJSON(ctx, h.NC, regapi.SubjectMachineGet, req)
	if err != nil {
		return nil, err
	}
	m, version, ok := splitMachineReply(raw)
	if !ok { // framed otherwise: decode the envelope (not the machine)
		var rep struct {
			Machine json.RawMessage `json:"machine"`
			Version uint64          `json:"version"`
		}
		if err := json.Unmarshal(raw, &rep); err != nil {
			return nil, errs.Internal("the registry answered %s with something that is not a machine: %v", regapi.SubjectMachineGet, err)
		}
		m, version = rep.Machine, rep.Version
	}
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
	body = strconv.AppendUint(body, version, 10)
	body = append(body, '}')
	return rawJSON{body: body, version: version}, nil
}

// splitMachineReply takes a MachineReply apart as the registry encodes it,
// {"machine":{…},"version":N}, without scanning the machine. A quote
// inside a JSON string is escaped, so the last `,"version":` followed by
// digits and the closing brace can only be the reply's own field.
func splitMachineReply(raw []byte) (machine []byte, version uint64, ok bool) {
	const head, tail = `{"machine":`, `,"version":`
	if !bytes.HasPrefix(raw, []byte(head)) || len(raw) < len(head)+len(tail)+3 || raw[len(raw)-1] != '}' {
		return nil, 0, false
	}
	i := bytes.LastIndex(raw, []byte(tail))
	if i < len(head) {
		return nil, 0, false
	}
	v, err := strconv.ParseUint(string(raw[i+len(tail):len(raw)-1]), 10, 64)
	if err != nil {
		return nil, 0, false
	}
	return raw[len(head):i], v, true
}

// newline ends every JSON answer, as json.Encoder does.
var newline = []byte{'\n'}

func isBlank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\n' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}

// getMachineCached is getMachineRaw through the read cache, for a machine
// as it is now.
func (h *handler) getMachineCached(ctx context.Context, req regapi.MachineGet) (any, error) {
	if h.reads == nil || req.At != "" || !fields.CanonicalUUID(req.UUID) {
		if h.reads != nil {
			readsBypassed[0].Inc()
		}
		return h.getMachineRaw(ctx, req)
	}
	return h.reads.through(ctx, machineKey(req.Org, req.UUID), req.Org, false, req.MinVersion,
		func(ctx context.Context, minVersion uint64) (any, error) {
			req.MinVersion = minVersion
			return h.getMachineRaw(ctx, req)
		})
}

// listMachinesCached is listMachinesRaw through the read cache.
func (h *handler) listMachinesCached(ctx context.Context, req regapi.MachineList) (any, error) {
	if h.reads == nil {
		return h.listMachinesRaw(ctx, req)
	}
	return h.reads.through(ctx, pageKey(req), req.Org, true, req.MinVersion,
		func(ctx context.Context, minVersion uint64) (any, error) {
			req.MinVersion = minVersion
			return h.listMachinesRaw(ctx, req)
		})
}
