package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
	"github.com/anvil-fleet/anvil/services/registry/domain/org"
	"github.com/anvil-fleet/anvil/services/registry/domain/token"
)

// filler sets every exported field of a value to a distinct non-zero
// value, so that omitempty leaves nothing out and a field one side lacks
// shows in its JSON.
type filler struct{ n int }

var timeType = reflect.TypeFor[time.Time]()

func (f *filler) fill(v reflect.Value) {
	f.n++
	n := f.n
	if v.Type() == timeType {
		v.Set(reflect.ValueOf(time.Date(2025, 1, 2, 3, 4, 5, n*1000, time.UTC)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(n))
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem())
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			f.fill(s.Index(i))
		}
		v.Set(s)
	case reflect.Array:
		for i := range v.Len() {
			f.fill(v.Index(i))
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			f.fill(k)
			f.fill(e)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i))
			}
		}
	default:
		panic(fmt.Sprintf("filler: %s", v.Type()))
	}
}

// filled returns a new value of t with every field set.
func filled(t reflect.Type) any {
	p := reflect.New(t)
	(&filler{}).fill(p.Elem())
	return p.Elem().Interface()
}

// strictly decodes b into a new value of t, refusing unknown fields: a
// field the sender has and t lacks is an error, not a silent loss.
func strictly(t reflect.Type, b []byte) (any, error) {
	p := reflect.New(t)
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(p.Interface()); err != nil {
		return nil, err
	}
	return p.Elem().Interface(), nil
}

// sameJSON checks that a value of `from` with every field set encodes,
// decodes into `to` and encodes again to the very same bytes, both ways.
func sameJSON(t *testing.T, name string, a, b reflect.Type) {
	t.Helper()
	for _, dir := range [][2]reflect.Type{{a, b}, {b, a}} {
		from, to := dir[0], dir[1]
		want, err := json.Marshal(filled(from))
		if err != nil {
			t.Fatal(err)
		}
		v, err := strictly(to, want)
		if err != nil {
			t.Errorf("%s: %s's JSON does not decode into %s: %v\n%s", name, from, to, err, want)
			continue
		}
		got, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %s → %s changes the JSON:\n got %s\nwant %s", name, from, to, got, want)
		}
	}
}

// Every machine command of the contract is the domain's command of the
// same name, field for field in the same JSON; and the contract has every
// command the registry serves (all but register, which goes through
// self_register).
func TestMachineCommandsEncodeAsTheDomainCommands(t *testing.T) {
	domain := map[string]reflect.Type{}
	for _, c := range machine.CommandTypes() {
		domain[c.(machine.Command).CommandType()] = reflect.TypeOf(c)
	}
	var contract []string
	for _, c := range api.MachineCommands() {
		name := c.CommandType()
		contract = append(contract, name)
		d, ok := domain[name]
		if !ok {
			t.Errorf("api command %s has no domain command", name)
			continue
		}
		sameJSON(t, name, reflect.TypeOf(c), d)
		if got, err := MachineCommand(name, mustJSON(t, filled(reflect.TypeOf(c)))); err != nil || got.CommandType() != name {
			t.Errorf("MachineCommand(%s) = %T, %v", name, got, err)
		}
	}
	for name := range domain {
		if name != (machine.Register{}).CommandType() && !slices.Contains(contract, name) {
			t.Errorf("the registry serves %s, the api has no such command", name)
		}
	}
}

// A command's unknown field is refused, naming the field, as the registry
// always did.
func TestMachineCommandIsDecodedStrictly(t *testing.T) {
	_, err := MachineCommand("machine.set_hostname", json.RawMessage(`{"hostname":"h","colour":"red"}`))
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("colour")) {
		t.Fatalf("unknown field: %v", err)
	}
	if c, err := MachineCommand("machine.unassign", nil); err != nil || c != (machine.Unassign{}) {
		t.Fatalf("no body: %v %v", c, err)
	}
	if _, err := MachineCommand("machine.register", json.RawMessage(`{}`)); err != nil {
		t.Fatalf("register decodes (ports do not serve it): %v", err)
	}
	if _, err := MachineCommand("machine.no_such", nil); err == nil {
		t.Fatal("an unknown command decoded")
	}
}

// Every integration event is the domain's event of the same type, field
// for field in the same JSON, so that a consumer decodes the registry's
// stored events into the api types.
func TestIntegrationEventsEncodeAsTheDomainEvents(t *testing.T) {
	domain := map[string]reflect.Type{}
	for _, e := range machine.EventTypes() {
		domain[e.(machine.Event).EventType()] = reflect.TypeOf(e)
	}
	seen := map[string]bool{}
	for _, e := range api.EventTypes() {
		name := e.(interface{ EventType() string }).EventType()
		if seen[name] {
			t.Errorf("api event %s is listed twice", name)
		}
		seen[name] = true
		d, ok := domain[name]
		if !ok {
			t.Errorf("api event %s is no registry event", name)
			continue
		}
		sameJSON(t, name, reflect.TypeOf(e), d)
	}
	// What the consumers decode today (boot: revocations; rollout:
	// provisioning and machine operations) must be in the contract.
	for _, name := range []string{
		"machine.registered", "machine.assigned_to_pool", "machine.unassigned", "machine.force_unassigned",
		"machine.unassign_started", "machine.maintenance_requested", "machine.maintenance_exited",
		"machine.deletion_started", "machine.deletion_aborting", "machine.deleted",
	} {
		if !seen[name] {
			t.Errorf("consumers decode %s; the api has no such event", name)
		}
	}
}

// legacyMachine is api.Machine as it was when it embedded the domain's
// state: what the registry answered and the gateway served.
type legacyMachine struct {
	Org string `json:"org"`
	machine.State
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	LastSeen  time.Time `json:"last_seen,omitzero"`
}

// api.Machine made by Machine encodes byte for byte as the machine did
// when the api embedded the domain's state, with every field set and with
// none; api.Machine has no field the domain lacks; and State undoes
// Machine.
func TestMachineEncodesAsBefore(t *testing.T) {
	full := filled(reflect.TypeFor[machine.State]()).(machine.State)
	sparse := machine.State{UUID: "4c4c4544-0000-0000-0000-000000000001", Status: machine.StatusReadyUnassigned,
		Hardware: &machine.Hardware{CPUs: 4, RAMBytes: 1 << 30}}
	times := [3]time.Time{time.Date(2025, 5, 1, 0, 0, 0, 1, time.UTC), time.Date(2025, 5, 2, 0, 0, 0, 0, time.UTC), time.Date(2025, 5, 3, 0, 0, 0, 0, time.UTC)}
	for _, c := range []struct {
		name  string
		s     machine.State
		times [3]time.Time
	}{{"full", full, times}, {"sparse", sparse, [3]time.Time{}}, {"zero", machine.State{}, [3]time.Time{}}} {
		want := mustJSON(t, legacyMachine{Org: "acme", State: c.s, CreatedAt: c.times[0], UpdatedAt: c.times[1], LastSeen: c.times[2]})
		m := Machine("acme", c.s)
		m.CreatedAt, m.UpdatedAt, m.LastSeen = c.times[0], c.times[1], c.times[2]
		if got := mustJSON(t, m); !bytes.Equal(got, want) {
			t.Errorf("%s machine:\n got %s\nwant %s", c.name, got, want)
		}
		if back := State(m); !reflect.DeepEqual(back, c.s) {
			t.Errorf("%s machine: State(Machine(s)) = %+v, want %+v", c.name, back, c.s)
		}
	}
	sameJSON(t, "machine", reflect.TypeFor[api.Machine](), reflect.TypeFor[legacyMachine]())
}

// MachineWithIPXEBoot changes what the domain's WithIPXEBoot changes.
func TestMachineWithIPXEBoot(t *testing.T) {
	s := machine.State{UUID: "4c4c4544-0000-0000-0000-000000000001", Status: machine.StatusReadyUnassigned,
		LastIPXEBootAt: time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)}
	for _, at := range []time.Time{s.LastIPXEBootAt.Add(-time.Minute), s.LastIPXEBootAt.Add(time.Minute)} {
		retry := at.Add(5 * time.Minute)
		want := Machine("acme", s.WithIPXEBoot(at, retry))
		if got := MachineWithIPXEBoot(Machine("acme", s), at, retry); !reflect.DeepEqual(got, want) {
			t.Errorf("boot at %s: got %+v, want %+v", at, got, want)
		}
	}
}

// A token as the API lists it is the domain's description, in the same
// JSON.
func TestTokenInfoEncodesAsBefore(t *testing.T) {
	info := filled(reflect.TypeFor[org.TokenInfo]()).(org.TokenInfo)
	if got, want := mustJSON(t, TokenInfo(info)), mustJSON(t, info); !bytes.Equal(got, want) {
		t.Errorf("token info:\n got %s\nwant %s", got, want)
	}
	sameJSON(t, "token info", reflect.TypeFor[api.TokenInfo](), reflect.TypeFor[org.TokenInfo]())
}

// The contract's enumerations spell every value as the domain does.
func TestEnumerationsMatchTheDomain(t *testing.T) {
	same := func(what string, got, want []string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: api %q, domain %q", what, got, want)
		}
	}
	same("statuses", stringsOf(api.Statuses()), stringsOf(machine.Statuses()))
	same("deletion policies", stringsOf([]api.DeletionPolicy{api.DeletionGraceful, api.DeletionUnsafe, api.DeletionForced}),
		stringsOf([]machine.DeletionPolicy{machine.DeletionGraceful, machine.DeletionUnsafe, machine.DeletionForced}))
	same("deletion phases", stringsOf([]api.DeletionPhase{api.PhaseStarted, api.PhaseCompleted, api.PhaseAborting, api.PhaseFailed}),
		stringsOf([]machine.DeletionPhase{machine.PhaseStarted, machine.PhaseCompleted, machine.PhaseAborting, machine.PhaseFailed}))
	same("connectivity", stringsOf([]api.Connectivity{api.ConnectivityUnknown, api.Online, api.Offline}),
		stringsOf([]machine.Connectivity{machine.ConnectivityUnknown, machine.Online, machine.Offline}))
	same("roles", stringsOf([]api.Role{api.RoleViewer, api.RoleOperator, api.RoleAdmin}),
		stringsOf([]org.Role{org.RoleViewer, org.RoleOperator, org.RoleAdmin}))
	same("token statuses", stringsOf([]api.TokenStatus{api.TokenActive, api.TokenExpired, api.TokenRevoked}),
		stringsOf([]org.TokenStatus{org.TokenActive, org.TokenExpired, org.TokenRevoked}))
	same("token kinds", stringsOf([]api.TokenKind{api.KindAPI, api.KindEnrollment}),
		stringsOf([]token.Kind{token.KindAPI, token.KindEnrollment}))
	if api.MaxReasonLen != machine.MaxReasonLen {
		t.Errorf("MaxReasonLen: api %d, domain %d", api.MaxReasonLen, machine.MaxReasonLen)
	}
	for _, c := range [][2]string{{"", "4c4c4544-0000-0000-0000-000000000001"}, {"w1", "4c4c4544-0000-0000-0000-000000000001"}} {
		if api.NodeNameOf(c[0], c[1]) != machine.NodeNameOf(c[0], c[1]) {
			t.Errorf("NodeNameOf%q: api %q, domain %q", c, api.NodeNameOf(c[0], c[1]), machine.NodeNameOf(c[0], c[1]))
		}
	}
	for _, p := range []string{"workers", "", "Workers", "-a", "a_b", string(make([]byte, 64))} {
		if (api.ValidPoolName(p) == nil) != (machine.ValidatePool(p) == nil) {
			t.Errorf("pool name %q: api says %v, domain %v", p, api.ValidPoolName(p), machine.ValidatePool(p))
		}
	}
}

func stringsOf[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
