{{/* nats-server's configuration. Secrets stay out of it: each service's password is the
environment variable NATS_PASSWORD_<SERVICE> (from that service's Secret), and the route
credentials are in routes.conf (a Secret) included into the cluster block. */}}
{{- define "anvil.natsConfig" -}}
{{- $b := .Values.nats.bundled -}}
server_name: $NATS_SERVER_NAME
listen: "0.0.0.0:4222"
http: "0.0.0.0:8222"
max_payload: {{ int64 $b.maxPayload }}

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
  include "routes.conf"
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

{{- define "anvil.natsRoutes" -}}
{{- $b := .root.Values.nats.bundled -}}
{{- $name := include "anvil.natsName" .root -}}
authorization {
  user: "anvil-route"
  password: {{ .password | quote }}
}
routes: [
{{- range $i := until (int $b.replicas) }}
  {{ printf "nats://anvil-route:%s@%s-%d.%s-headless.%s.svc:6222" $.password $name $i $name $.root.Release.Namespace | quote }}
{{- end }}
]
{{- end -}}
