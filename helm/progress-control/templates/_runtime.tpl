{{/* Names, env and checks of the streams runtime's StatefulSet (runtime.*). */}}

{{/* Name of the StatefulSet and of its headless Service. 52 characters at most: a StatefulSet's
pods carry a controller-revision-hash label of its name plus 11 characters, and a label value
has 63. */}}
{{- define "progress-control.runtime.name" -}}
{{- include "progress-control.fullname" . | trunc 44 | trimSuffix "-" }}-runtime
{{- end -}}

{{/* Labels selecting the runtime's pods. */}}
{{- define "progress-control.runtime.selectorLabels" -}}
{{ include "progress-control.selectorLabels" . }}
app.kubernetes.io/component: streams-runtime
{{- end -}}

{{/* The runtime's image reference: runtime.image, else the chart's image (with image.digest
when neither runtime.image.repository nor runtime.image.tag is set). */}}
{{- define "progress-control.runtime.image" -}}
{{- $image := .Values.runtime.image -}}
{{- $digest := $image.digest | default (ternary .Values.image.digest "" (not (or $image.repository $image.tag))) -}}
{{- include "progress-control.imageRef" (dict "repository" ($image.repository | default .Values.image.repository) "tag" ($image.tag | default (.Values.image.tag | default .Chart.AppVersion)) "digest" $digest) -}}
{{- end -}}

{{/* DNS name of pod $(POD_NAME) behind the headless Service: what the instance advertises. */}}
{{- define "progress-control.runtime.podHost" -}}
{{- printf "$(POD_NAME).%s.%s.svc.%s" (include "progress-control.runtime.name" .) .Release.Namespace .Values.runtime.clusterDomain -}}
{{- end -}}

{{/* Runtime settings the chart sets itself (runtime.settings may not). */}}
{{- define "progress-control.runtime.ownSettings" -}}
application_id bootstrap_servers state_dir application_server query_bind_host query_token metrics_port metrics_host kafka signing_key_id signing_key_secret signing_key_file
{{- end -}}

{{/* Checks the schema cannot express. */}}
{{- define "progress-control.runtime.validate" -}}
{{- $runtime := .Values.runtime -}}
{{- if and $runtime.queries.enabled (not $runtime.queries.tokenSecret.name) (not (index $runtime.settings "query_allow_unauthenticated")) -}}
{{- fail "progress-control: runtime.queries.tokenSecret.name must name an existing Secret with the query token: the query server listens on the pod network (or set runtime.queries.enabled=false, or runtime.settings.query_allow_unauthenticated=true to serve anyone who can connect)" -}}
{{- end -}}
{{- if and $runtime.queries.enabled (eq (int $runtime.queries.port) (int $runtime.metrics.port)) -}}
{{- fail "progress-control: runtime.queries.port and runtime.metrics.port must differ" -}}
{{- end -}}
{{- $own := splitList " " (include "progress-control.runtime.ownSettings" .) -}}
{{- range $name, $_ := $runtime.settings -}}
{{- if has (lower $name) $own -}}
{{- fail (printf "progress-control: runtime.settings.%s is set by the chart; use the runtime.* value for it (see the chart's README)" $name) -}}
{{- end -}}
{{- if regexMatch "(?i)(token|secret|password|credential|keys)" $name -}}
{{- fail (printf "progress-control: runtime.settings.%s looks like a credential; pod specs are not secret: put it in a Secret and use runtime.extraEnv (valueFrom.secretKeyRef) or runtime.envFromSecrets" $name) -}}
{{- end -}}
{{- end -}}
{{- range $runtime.extraEnv -}}
{{- if has .name (list "POD_NAME" "PROGRESS_CONTROL_RUNTIME_APPLICATION_ID" "PROGRESS_CONTROL_RUNTIME_BOOTSTRAP_SERVERS" "PROGRESS_CONTROL_RUNTIME_STATE_DIR" "PROGRESS_CONTROL_RUNTIME_APPLICATION_SERVER") -}}
{{- fail (printf "progress-control: runtime.extraEnv sets %s, which the chart sets from runtime.* values" .name) -}}
{{- end -}}
{{- end -}}
{{- $paths := list $runtime.persistence.mountPath "/tmp" -}}
{{- range $runtime.secretMounts -}}
{{- if has .mountPath $paths -}}
{{- fail (printf "progress-control: runtime.secretMounts mounts %s at %s, which is taken" .name .mountPath) -}}
{{- end -}}
{{- $paths = append $paths .mountPath -}}
{{- end -}}
{{- end -}}

{{/* Env of the runtime container (list items). */}}
{{- define "progress-control.runtime.env" -}}
{{- $runtime := .Values.runtime -}}
# First: the variables below refer to it as $(POD_NAME).
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: PROGRESS_CONTROL_RUNTIME_APPLICATION_ID
  value: {{ $runtime.applicationId | quote }}
- name: PROGRESS_CONTROL_RUNTIME_BOOTSTRAP_SERVERS
  value: {{ $runtime.bootstrapServers | default .Values.kafka.bootstrapServers | quote }}
{{- range $name, $value := .Values.kafka.config }}
- name: PROGRESS_CONTROL_RUNTIME_KAFKA__{{ include "progress-control.envSuffix" $name }}
  value: {{ include "progress-control.envString" $value | quote }}
{{- end }}
{{- range $name, $key := .Values.kafka.secretEnv }}
- name: PROGRESS_CONTROL_RUNTIME_KAFKA__{{ include "progress-control.envSuffix" $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $.Values.kafka.existingSecret | quote }}
      key: {{ $key | quote }}
{{- end }}
- name: PROGRESS_CONTROL_RUNTIME_STATE_DIR
  value: {{ $runtime.persistence.mountPath | quote }}
- name: PROGRESS_CONTROL_RUNTIME_METRICS_PORT
  value: {{ $runtime.metrics.port | int | quote }}
# All addresses: the kubelet probes the pod IP.
- name: PROGRESS_CONTROL_RUNTIME_METRICS_HOST
  value: "0.0.0.0"
{{- if $runtime.queries.enabled }}
- name: PROGRESS_CONTROL_RUNTIME_APPLICATION_SERVER
  value: {{ printf "%s:%d" (include "progress-control.runtime.podHost" .) (int $runtime.queries.port) | quote }}
- name: PROGRESS_CONTROL_RUNTIME_QUERY_BIND_HOST
  value: "0.0.0.0"
{{- with $runtime.queries.tokenSecret.name }}
- name: PROGRESS_CONTROL_RUNTIME_QUERY_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ $runtime.queries.tokenSecret.key | quote }}
{{- end }}
{{- end }}
{{- with include "progress-control.signingEnv" (dict "signing" .Values.signing "prefix" "PROGRESS_CONTROL_RUNTIME_") }}
{{ . }}
{{- end }}
{{- range $name, $value := $runtime.settings }}
{{- if not (kindIs "invalid" $value) }}
- name: PROGRESS_CONTROL_RUNTIME_{{ upper $name }}
  value: {{ include "progress-control.envString" $value | quote }}
{{- end }}
{{- end }}
{{- with $runtime.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* An HTTP or TCP probe of the runtime container: (dict "probe" $values "action" $yaml). */}}
{{- define "progress-control.runtime.probe" -}}
{{ .action }}
periodSeconds: {{ .probe.periodSeconds | int }}
timeoutSeconds: {{ .probe.timeoutSeconds | int }}
failureThreshold: {{ .probe.failureThreshold | int }}
{{- end -}}
