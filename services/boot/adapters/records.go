// Package adapters connects the boot service's app layer to the outside:
// the registry and revisions services over NATS, and JetStream KV buckets
// for the boot records, startup logs and the generated signing key.
package adapters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/libs/events/clock"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/domain/record"
)

// Bucket names.
const (
	RecordsBucket     = api.RecordsBucket
	StartupLogsBucket = "anvil_boot_startup_logs"
	KeysBucket        = "anvil_boot_keys"
)

// maxUpdateAttempts bounds the compare-and-swap retries of one update.
const maxUpdateAttempts = 32

// Records keeps one record.Record per machine in a KV bucket (key
// <org>.<uuid>, history 1) and lets long polls wait for changes.
type Records struct {
	kv    jetstream.KeyValue
	hub   *hub
	cache *recordCache
}

// NewRecords creates (or reuses) the bucket. Up to cacheEntries records
// are answered from memory while Watch runs (recordCache); 0 reads every
// record from the bucket.
func NewRecords(ctx context.Context, js jetstream.JetStream, replicas, cacheEntries int) (*Records, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      RecordsBucket,
		Description: "anvil boot service: per-machine boot records (served machine revisions, instructions)",
		History:     1,
		Replicas:    max(replicas, 1),
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("boot records bucket %s: %w", RecordsBucket, err)
	}
	return &Records{kv: kv, hub: newHub(), cache: newRecordCache(cacheEntries)}, nil
}

// Get returns the machine's record, or a zero one: from memory when this
// replica holds it (see recordCache for how current that is), else from
// the bucket.
func (s *Records) Get(ctx context.Context, org, uuid string) (record.Record, error) {
	if err := checkKey(org, uuid); err != nil {
		return record.Record{}, err
	}
	if r, ok := s.cache.get(record.Key(org, uuid)); ok {
		return r, nil
	}
	return s.get(ctx, org, uuid)
}

// get reads the machine's record from the bucket.
func (s *Records) get(ctx context.Context, org, uuid string) (record.Record, error) {
	readsFromStore.Inc()
	key := record.Key(org, uuid)
	ticket := s.cache.begin(key)
	r, err := s.load(ctx, org, uuid, key)
	if err != nil {
		s.cache.end(ticket, key, nil)
		return record.Record{}, err
	}
	s.cache.end(ticket, key, &r)
	return r, nil
}

func (s *Records) load(ctx context.Context, org, uuid, key string) (record.Record, error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return record.Record{Org: org, UUID: uuid}, nil
	}
	if err != nil {
		return record.Record{}, errs.Unavailable("reading the boot record of %s/%s: %v", org, uuid, err)
	}
	var r record.Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return record.Record{}, errs.Internal("the boot record of %s/%s does not decode: %v", org, uuid, err)
	}
	r.Org, r.UUID, r.Revision = org, uuid, e.Revision()
	return r, nil
}

// checkKey refuses an organization or UUID that would make an ambiguous
// key.
func checkKey(org, uuid string) error {
	if !validKeyPart(org) || !validKeyPart(uuid) {
		return errs.Invalid("machine", "organization and UUID must not hold '.', '*', '>' or spaces")
	}
	return nil
}

// Update applies fn and stores the result with compare-and-swap, retrying
// when another replica wrote in between.
func (s *Records) Update(ctx context.Context, org, uuid string, fn func(*record.Record) (bool, error)) (record.Record, error) {
	return s.update(ctx, org, uuid, nil, fn)
}

// UpdateFrom is Update whose first attempt applies fn to read, a record
// as Get returned it, instead of reading the record again: one round trip
// less when nothing changed it since.
func (s *Records) UpdateFrom(ctx context.Context, read record.Record, fn func(*record.Record) (bool, error)) (record.Record, error) {
	if err := checkKey(read.Org, read.UUID); err != nil {
		return record.Record{}, err
	}
	c := read.Clone()
	return s.update(ctx, read.Org, read.UUID, &c, fn)
}

// update is Update with, if read is not nil, the first attempt's record.
func (s *Records) update(ctx context.Context, org, uuid string, read *record.Record, fn func(*record.Record) (bool, error)) (record.Record, error) {
	key := record.Key(org, uuid)
	for attempt := range maxUpdateAttempts {
		var r record.Record
		var err error
		switch {
		case read != nil:
			r, read = *read, nil
		case attempt == 0:
			r, err = s.Get(ctx, org, uuid)
		default:
			// The last attempt lost a race: what is stored, not what
			// this replica remembers.
			r, err = s.get(ctx, org, uuid)
		}
		if err != nil {
			return record.Record{}, err
		}
		changed, err := fn(&r)
		if err != nil || !changed {
			return r, err
		}
		r.Org, r.UUID = org, uuid
		data, err := json.Marshal(r)
		if err != nil {
			return record.Record{}, errs.Internal("encoding the boot record: %v", err)
		}
		var rev uint64
		if r.Revision == 0 {
			rev, err = s.kv.Create(ctx, key, data)
		} else {
			rev, err = s.kv.Update(ctx, key, data, r.Revision)
		}
		switch {
		case err == nil:
			r.Revision = rev
			s.cache.wrote(key, r)
			s.hub.notify(key) // local waiters need not wait for the watcher
			return r, nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			s.cache.forget(key)
			continue // lost a race: decide again on the newer record
		default:
			return record.Record{}, errs.Unavailable("writing the boot record of %s/%s: %v", org, uuid, err)
		}
	}
	return record.Record{}, errs.Unavailable("the boot record of %s/%s changed %d times while being updated", org, uuid, maxUpdateAttempts)
}

// Wait returns a channel closed at the next change of the machine's record.
func (s *Records) Wait(org, uuid string) (<-chan struct{}, func()) {
	return s.hub.wait(record.Key(org, uuid))
}

// Watch follows every change of the bucket, from any replica, and wakes
// the waiters of the changed key, until ctx ends. When the watch has to be
// re-established, every waiter is woken (they re-read), so no change is
// missed.
func (s *Records) Watch(ctx context.Context, log *slog.Logger) {
	for ctx.Err() == nil {
		w, err := s.kv.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.MetaOnly())
		if err != nil {
			log.Warn("watching the boot records failed; retrying", "err", err)
			_ = clock.Sleep(ctx, time.Second)
			continue
		}
		// Changes made while no watch ran were not delivered: what was
		// cached before is dropped, and the waiters read again.
		s.cache.watching(true)
		s.hub.notifyAll()
		for e := range w.Updates() {
			if e != nil {
				s.cache.changed(e.Key(), e.Revision()) // before the waiters read it again
				s.hub.notify(e.Key())
			}
		}
		s.cache.watching(false)
		_ = w.Stop()
	}
}

// hub wakes the long polls waiting on a key.
type hub struct {
	mu      sync.Mutex
	waiters map[string]map[*waiter]struct{}
}

type waiter struct {
	ch   chan struct{}
	once sync.Once
}

func (w *waiter) fire() { w.once.Do(func() { close(w.ch) }) }

func newHub() *hub { return &hub{waiters: map[string]map[*waiter]struct{}{}} }

func (h *hub) wait(key string) (<-chan struct{}, func()) {
	w := &waiter{ch: make(chan struct{})}
	h.mu.Lock()
	set := h.waiters[key]
	if set == nil {
		set = map[*waiter]struct{}{}
		h.waiters[key] = set
	}
	set[w] = struct{}{}
	h.mu.Unlock()
	return w.ch, func() {
		h.mu.Lock()
		if set := h.waiters[key]; set != nil {
			delete(set, w)
			if len(set) == 0 {
				delete(h.waiters, key)
			}
		}
		h.mu.Unlock()
	}
}

func (h *hub) notify(key string) {
	h.mu.Lock()
	set := h.waiters[key]
	delete(h.waiters, key)
	h.mu.Unlock()
	for w := range set {
		w.fire()
	}
}

func (h *hub) notifyAll() {
	h.mu.Lock()
	all := h.waiters
	h.waiters = map[string]map[*waiter]struct{}{}
	h.mu.Unlock()
	for _, set := range all {
		for w := range set {
			w.fire()
		}
	}
}

// StartupLogs keeps each machine's last startup log in a KV bucket.
type StartupLogs struct{ kv jetstream.KeyValue }

// NewStartupLogs creates (or reuses) the bucket. A log is at most 200
// lines of 2 KiB plus a little, well under the 1 MiB value limit.
func NewStartupLogs(ctx context.Context, js jetstream.JetStream, replicas int) (*StartupLogs, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:       StartupLogsBucket,
		Description:  "anvil boot service: each machine's last startup log (agent report)",
		History:      1,
		Replicas:     max(replicas, 1),
		Storage:      jetstream.FileStorage,
		MaxValueSize: 1 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("startup log bucket %s: %w", StartupLogsBucket, err)
	}
	return &StartupLogs{kv: kv}, nil
}

// StartupLog is the stored form.
type StartupLog = api.StartupLog

// Put stores a machine's log, replacing the previous one.
func (s *StartupLogs) Put(ctx context.Context, l StartupLog) error {
	if err := checkKey(l.Org, l.UUID); err != nil {
		return err
	}
	data, err := json.Marshal(l)
	if err != nil {
		return errs.Internal("encoding the startup log: %v", err)
	}
	if _, err := s.kv.Put(ctx, record.Key(l.Org, l.UUID), data); err != nil {
		return errs.Unavailable("storing the startup log of %s/%s: %v", l.Org, l.UUID, err)
	}
	return nil
}

// Get returns a machine's log.
func (s *StartupLogs) Get(ctx context.Context, org, uuid string) (StartupLog, error) {
	if err := checkKey(org, uuid); err != nil {
		return StartupLog{}, err
	}
	e, err := s.kv.Get(ctx, record.Key(org, uuid))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return StartupLog{}, errs.NotFound("machine %s of organization %s has no startup log (its agent never reported)", uuid, org)
	}
	if err != nil {
		return StartupLog{}, errs.Unavailable("reading the startup log: %v", err)
	}
	var l StartupLog
	if err := json.Unmarshal(e.Value(), &l); err != nil {
		return StartupLog{}, errs.Internal("the startup log of %s/%s does not decode: %v", org, uuid, err)
	}
	return l, nil
}

// validKeyPart guards KV keys built from request data; the app validates
// org and UUID before they get here, this is a second line.
func validKeyPart(s string) bool {
	return s != "" && !strings.ContainsAny(s, ".*> \t\r\n")
}
