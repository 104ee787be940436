{{/*
The NATS subjects each service needs, derived from the code (README.md, "NATS permissions"):

- every service: the JetStream API ($JS.API.>: streams, consumers, KV, direct gets), acks of
  its durable consumers ($JS.ACK.>), flow control of ordered push consumers (KV watches,
  $JS.FC.>), and replies on its inbox (_INBOX.>);
- a service that serves commands subscribes to its own cmd.<service>.> (queue group <service>)
  and may answer the requests it received (allow_responses);
- a service that calls another publishes to that service's cmd.<service>.>;
- a service that appends events publishes to events.>; one with projections or handlers
  publishes to poison.> (the poison queue);
- a KV bucket is written ($KV.<bucket>.>) only by its owner, and read only by its owner and the
  services that read it (the JetStream API on KV_<bucket> is denied to everyone else);
- nobody may delete, purge or reconfigure the EVENTS stream or delete POISON.
*/}}
{{- define "anvil.natsBuckets" -}}
registry: [anvil_heartbeats]
revisions: []
rollout: [anvil_rollout_leases]
boot: [anvil_boot_machines, anvil_boot_startup_logs, anvil_boot_keys]
gateway: [anvil_idempotency, anvil_console_sessions]
{{- end -}}

{{- define "anvil.natsSubjects" -}}
registry:
  publish: [events.>, poison.>]
  subscribe: [cmd.registry.>]
  reads: []
revisions:
  # cmd.boot.assets.>: the files a revision makes machines fetch, checked before it is saved.
  publish: [events.>, poison.>, cmd.boot.assets.>]
  subscribe: [cmd.revisions.>]
  reads: []
rollout:
  publish: [events.>, poison.>, cmd.registry.>, cmd.revisions.>, cmd.boot.>]
  # events.>: core subscriptions that wake rollouts on machine and rollout events.
  subscribe: [cmd.rollout.>, cmd.operation.>, events.>]
  reads: [anvil_boot_machines]
boot:
  publish: [poison.>, cmd.registry.>, cmd.revisions.>]
  subscribe: [cmd.boot.>]
  reads: []
gateway:
  publish: [cmd.registry.>, cmd.revisions.>, cmd.rollout.>, cmd.operation.>]
  subscribe: []
  reads: []
{{- end -}}

{{/* The permissions block of one user in nats-server's configuration syntax; call with
(dict "root" $ "component" "registry"). */}}
{{- define "anvil.natsPermissions" -}}
{{- $svc := .component -}}
{{- $buckets := include "anvil.natsBuckets" . | fromYaml -}}
{{- $s := index (include "anvil.natsSubjects" . | fromYaml) $svc -}}
{{- $u := index .root.Values.nats.users $svc -}}
{{- $pub := concat (list "$JS.API.>" "$JS.ACK.>" "$JS.FC.>") $s.publish -}}
{{- range (index $buckets $svc) }}{{ $pub = append $pub (printf "$KV.%s.>" .) }}{{ end -}}
{{- $pub = concat $pub ($u.extraPublish | default list) -}}
{{- $sub := concat (list "_INBOX.>") $s.subscribe ($u.extraSubscribe | default list) -}}
{{- $deny := list -}}
{{- range $stream := list "EVENTS" "POISON" -}}
{{- range $op := list "STREAM.DELETE" "STREAM.PURGE" "STREAM.MSG.DELETE" -}}
{{- $deny = append $deny (printf "$JS.API.%s.%s" $op $stream) -}}
{{- end -}}
{{- end -}}
{{- $deny = append $deny "$JS.API.STREAM.UPDATE.EVENTS" -}}
{{- range $owner, $bs := $buckets -}}
{{- if ne $owner $svc -}}
{{- range $b := $bs -}}
{{- if not (has $b $s.reads) -}}
{{- range $p := list "$JS.API.*.*.KV_%s" "$JS.API.*.*.KV_%s.>" "$JS.API.*.*.*.KV_%s" "$JS.API.*.*.*.KV_%s.>" -}}
{{- $deny = append $deny (printf $p $b) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
permissions: {
  publish: {
    allow: {{ include "anvil.natsList" $pub }}
    deny: {{ include "anvil.natsList" $deny }}
  }
  subscribe: {
    allow: {{ include "anvil.natsList" $sub }}
  }
{{- if $s.subscribe }}
  allow_responses: true
{{- end }}
}
{{- end -}}


{{/* A list in nats-server's configuration syntax (toJson would escape ">"). */}}
{{- define "anvil.natsList" -}}
[{{ range $i, $v := . }}{{ if $i }}, {{ end }}{{ $v | quote }}{{ end }}]
{{- end -}}
