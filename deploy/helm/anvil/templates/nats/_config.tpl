{{/* nats-server's configuration. It holds no secret: each service's password is the
environment variable NATS_PASSWORD_<SERVICE>, the route password NATS_ROUTE_PASSWORD and each
route's URL NATS_ROUTE_<n> (the StatefulSet builds them from your Secrets; see
anvil.natsSecretEnv). */}}
{{- define "anvil.natsConfig" -}}
{{- $b := .Values.nats.bundled -}}
server_name: $NATS_SERVER_NAME
listen: "0.0.0.0:4222"
http: "0.0.0.0:8222"
max_payload: {{ int64 $b.maxPayload }}
# The preStop hook finds the server here to put it into lame duck mode.
pid_file: "/var/run/nats/nats.pid"
# Lame duck mode: the server stops taking clients, hands its JetStream leaderships to the others,
# then closes its clients over lame_duck_duration (after lame_duck_grace_period), so that they
# reconnect to the other servers a few at a time instead of all at once.
lame_duck_duration: "{{ int $b.lameDuck.durationSeconds }}s"
lame_duck_grace_period: "{{ int $b.lameDuck.gracePeriodSeconds }}s"

jetstream {
  store_dir: "/data"
  max_memory_store: {{ $b.jetstream.maxMemoryStore }}
  max_file_store: {{ $b.jetstream.maxFileStore }}
}
{{- if gt (int $b.replicas) 1 }}

cluster {
  name: {{ $b.clusterName | quote }}
  listen: "0.0.0.0:6222"
  # Clients learn the servers from the Service, not from gossip.
  no_advertise: true
  authorization {
    user: "anvil-route"
    password: $NATS_ROUTE_PASSWORD
  }
  routes: [
{{- range $i := until (int $b.replicas) }}
    $NATS_ROUTE_{{ $i }}
{{- end }}
  ]
}
{{- end }}

authorization {
  users: [
{{- range $svc := splitList " " (include "anvil.services" $) }}
{{- $u := index $.Values.nats.users $svc }}
    {
      user: {{ $u.name | quote }}
      password: $NATS_PASSWORD_{{ upper $svc }}
      {{- include "anvil.natsPermissions" (dict "root" $ "component" $svc) | nindent 6 }}
    }
{{- end }}
  ]
}
{{- end -}}

{{/* The environment that carries the secrets into nats-server's configuration. Each secret
comes raw from its Secret (NATS_SECRET_*) and is referred to by a second variable, in quotes:
nats-server parses a variable's value as configuration, where 1234 or 1k would be numbers. */}}
{{- define "anvil.natsSecretEnv" -}}
{{- $b := .Values.nats.bundled -}}
{{- $name := include "anvil.natsName" . -}}
{{- range $svc := splitList " " (include "anvil.services" $) }}
- name: NATS_SECRET_{{ upper $svc }}
  {{- include "anvil.credentialRef" (dict "root" $ "id" (printf "nats-%s" $svc)) | nindent 2 }}
- name: NATS_PASSWORD_{{ upper $svc }}
  value: "\"$(NATS_SECRET_{{ upper $svc }})\""
{{- end }}
{{- if gt (int $b.replicas) 1 }}
- name: NATS_SECRET_ROUTES
  {{- include "anvil.credentialRef" (dict "root" $ "id" "natsRoutes") | nindent 2 }}
- name: NATS_ROUTE_PASSWORD
  value: "\"$(NATS_SECRET_ROUTES)\""
{{- range $i := until (int $b.replicas) }}
- name: NATS_ROUTE_{{ $i }}
  value: {{ printf "\"nats://anvil-route:$(NATS_SECRET_ROUTES)@%s-%d.%s-headless.%s.svc:6222\"" $name $i $name $.Release.Namespace | quote }}
{{- end }}
{{- end }}
{{- end -}}
