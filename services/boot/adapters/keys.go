package adapters

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// generatedKeyName is the KV key of the generated signing key.
const generatedKeyName = "signing-key-v1"

// GeneratedSigningKey returns the signing key kept in the KV bucket
// anvil_boot_keys, creating a random 32-byte one on the first start. Every
// replica gets the same key (the first Create wins, the others read it), and
// a restart keeps it, so per-boot tokens and agent credentials stay valid.
// It is what runs when no key is configured (the dev stack); production
// sets --signing-keys, since anything that can read the bucket can mint
// credentials.
func GeneratedSigningKey(ctx context.Context, js jetstream.JetStream, replicas int) (key []byte, created bool, err error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      KeysBucket,
		Description: "anvil boot service: generated signing key (used when --signing-keys is not set)",
		History:     1,
		Replicas:    max(replicas, 1),
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, false, fmt.Errorf("signing key bucket %s: %w", KeysBucket, err)
	}
	for range 3 {
		if e, err := kv.Get(ctx, generatedKeyName); err == nil {
			if len(e.Value()) < 32 {
				return nil, false, fmt.Errorf("the generated signing key in %s is too short; delete it to generate a new one", KeysBucket)
			}
			return e.Value(), false, nil
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, false, fmt.Errorf("reading the generated signing key: %w", err)
		}
		fresh := make([]byte, 32)
		if _, err := rand.Read(fresh); err != nil {
			return nil, false, err
		}
		if _, err := kv.Create(ctx, generatedKeyName, fresh); err == nil {
			return fresh, true, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, false, fmt.Errorf("storing the generated signing key: %w", err)
		}
	}
	return nil, false, errors.New("could not create or read the generated signing key")
}
