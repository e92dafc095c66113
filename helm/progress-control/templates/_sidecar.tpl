{{/*
Public templates: add the progress-control sidecar to any pod spec.

Each takes this chart's context. In this chart that is `.`; in a parent chart that has this one
as a dependency it is `(index .Subcharts "progress-control")` (or `.Subcharts.<alias>`), so the
sidecar reads this chart's values and names the ConfigMap this chart renders:

  {{- $pc := index .Subcharts "progress-control" }}
  spec:
    initContainers:
      {{- include "progress-control.sidecar.initContainers" $pc | nindent 6 }}
    containers:
      - name: app
        env:
          {{- include "progress-control.app.env" $pc | nindent 10 }}
        volumeMounts:
          {{- include "progress-control.app.volumeMounts" $pc | nindent 10 }}
      {{- include "progress-control.sidecar.containers" $pc | nindent 6 }}
    volumes:
      {{- include "progress-control.sidecar.volumes" $pc | nindent 6 }}

progress-control.sidecar.initContainers  the sidecar as a native sidecar when sidecar.native
                                         (list item for initContainers), else nothing
progress-control.sidecar.containers      the sidecar as a plain container unless sidecar.native
                                         (list item for containers), else nothing
progress-control.sidecar.initContainer   always the native sidecar (restartPolicy: Always)
progress-control.sidecar.container       always the plain container
progress-control.sidecar.volumes         the volumes the sidecar mounts, the reports socket's
                                         included (list items)
progress-control.reports.volume          only the reports socket's emptyDir (list item; nothing
                                         unless reports go over the Unix socket)
progress-control.app.env                 env of an app container whose interceptor reports to
                                         the sidecar (list items; nothing when reports are off)
progress-control.app.volumeMounts        the reports socket's mount of an app container (list
                                         item; nothing unless reports go over the Unix socket)
progress-control.podAnnotations          a checksum of the sidecar's settings, so pods restart
                                         when they change (mapping entries)
*/}}

{{/* The sidecar container's fields, without the list dash and restartPolicy. */}}
{{- define "progress-control.sidecar.spec" -}}
{{- include "progress-control.sidecar.fields" (dict "root" . "ticker" false) -}}
{{- end -}}

{{/* The fields of the sidecar's container, or of the ticker's (`progress-control sidecar` with
the broker watch on and reports off, resources from ticker.*): (dict "root" $ "ticker" bool). */}}
{{- define "progress-control.sidecar.fields" -}}
{{- $root := .root -}}
{{- $ticker := .ticker -}}
{{- include "progress-control.validate" $root -}}
{{- $sidecar := $root.Values.sidecar -}}
name: {{ ternary "ticker" $sidecar.name $ticker }}
image: {{ include "progress-control.image" $root | quote }}
imagePullPolicy: {{ $root.Values.image.pullPolicy }}
command:
  - progress-control
args:
  - sidecar
envFrom:
  - configMapRef:
      name: {{ include "progress-control.configMapName" $root }}
env:
  - name: PROGRESS_CONTROL_HTTP_HOST
    value: {{ $sidecar.http.host | quote }}
  - name: PROGRESS_CONTROL_HTTP_PORT
    value: {{ $sidecar.http.port | int | quote }}
  - name: PROGRESS_CONTROL_SHUTDOWN_TIMEOUT_S
    value: {{ $sidecar.shutdownTimeoutSeconds | int | quote }}
  {{- if $ticker }}
  {{- /* Over the ConfigMap's (env wins over envFrom): watch the broker, take no reports. */}}
  - name: PROGRESS_CONTROL_WATCH_ENABLED
    value: "true"
  - name: PROGRESS_CONTROL_REPORT_LISTEN
    value: ""
  {{- with $root.Values.ticker.topicsInclude }}
  - name: PROGRESS_CONTROL_TOPICS_INCLUDE
    value: {{ join "," . | quote }}
  {{- end }}
  {{- with $root.Values.ticker.topicsExclude }}
  - name: PROGRESS_CONTROL_TOPICS_EXCLUDE
    value: {{ join "," . | quote }}
  {{- end }}
  {{- end }}
  {{- range $name, $key := $root.Values.kafka.secretEnv }}
  - name: PROGRESS_CONTROL_KAFKA__{{ include "progress-control.envSuffix" $name }}
    valueFrom:
      secretKeyRef:
        name: {{ $root.Values.kafka.existingSecret | quote }}
        key: {{ $key | quote }}
  {{- end }}
  {{- with include "progress-control.signingEnv" (dict "signing" $root.Values.signing "prefix" "PROGRESS_CONTROL_") }}
  {{- nindent 2 . }}
  {{- end }}
  {{- with $sidecar.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
ports:
  - name: pc-http
    containerPort: {{ $sidecar.http.port | int }}
    protocol: TCP
{{- with $sidecar.probes.startup }}
{{- if .enabled }}
startupProbe:
  httpGet:
    path: /healthz
    port: {{ $sidecar.http.port | int }}
  periodSeconds: {{ .periodSeconds | int }}
  timeoutSeconds: {{ .timeoutSeconds | int }}
  failureThreshold: {{ .failureThreshold | int }}
{{- end }}
{{- end }}
{{- with $sidecar.probes.liveness }}
{{- if .enabled }}
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ $sidecar.http.port | int }}
  periodSeconds: {{ .periodSeconds | int }}
  timeoutSeconds: {{ .timeoutSeconds | int }}
  failureThreshold: {{ .failureThreshold | int }}
{{- end }}
{{- end }}
{{- with $sidecar.probes.readiness }}
{{- if .enabled }}
readinessProbe:
  httpGet:
    path: /readyz
    port: {{ $sidecar.http.port | int }}
  periodSeconds: {{ .periodSeconds | int }}
  timeoutSeconds: {{ .timeoutSeconds | int }}
  failureThreshold: {{ .failureThreshold | int }}
{{- end }}
{{- end }}
volumeMounts:
  - name: progress-control-tmp
    mountPath: /tmp
  {{- if and (not $ticker) (include "progress-control.reportSocket" $root) }}
  - name: progress-control-reports
    mountPath: {{ include "progress-control.reportSocketDir" . }}
  {{- end }}
  {{- if $root.Values.kafka.mountSecret }}
  - name: progress-control-secrets
    mountPath: /var/run/secrets/progress-control
    readOnly: true
  {{- end }}
resources:
  {{- toYaml (ternary $root.Values.ticker.resources $sidecar.resources $ticker) | nindent 2 }}
securityContext:
  {{- toYaml $sidecar.securityContext | nindent 2 }}
terminationMessagePolicy: FallbackToLogsOnError
{{- end -}}

{{/* The sidecar as a plain container: a list item for `containers`. */}}
{{- define "progress-control.sidecar.container" -}}
- {{ include "progress-control.sidecar.spec" . | nindent 2 | trim }}
{{- end -}}

{{/* The sidecar as a native sidecar (Kubernetes >= 1.29): a list item for `initContainers`. */}}
{{- define "progress-control.sidecar.initContainer" -}}
- {{ include "progress-control.sidecar.spec" . | nindent 2 | trim }}
  restartPolicy: Always
{{- end -}}

{{/* For `initContainers`: the native sidecar when sidecar.native, else nothing. */}}
{{- define "progress-control.sidecar.initContainers" -}}
{{- if .Values.sidecar.native -}}
{{- include "progress-control.sidecar.initContainer" . -}}
{{- end -}}
{{- end -}}

{{/* For `containers`: the plain sidecar container unless sidecar.native, else nothing. */}}
{{- define "progress-control.sidecar.containers" -}}
{{- if not .Values.sidecar.native -}}
{{- include "progress-control.sidecar.container" . -}}
{{- end -}}
{{- end -}}

{{/* Volumes the sidecar mounts: list items for the pod's `volumes`. */}}
{{- define "progress-control.sidecar.volumes" -}}
- name: progress-control-tmp
  emptyDir:
    sizeLimit: {{ .Values.sidecar.tmpSizeLimit }}
{{- with include "progress-control.reports.volume" . }}
{{ . }}
{{- end }}
{{- if .Values.kafka.mountSecret }}
- name: progress-control-secrets
  secret:
    secretName: {{ .Values.kafka.existingSecret | quote }}
    # 0444: readable by the sidecar's non-root user without an fsGroup.
    defaultMode: 292
{{- end }}
{{- end -}}

{{/* The reports socket's volume, a list item for the pod's `volumes` (already in
progress-control.sidecar.volumes): an emptyDir in memory that holds only the socket. */}}
{{- define "progress-control.reports.volume" -}}
{{- if include "progress-control.reportSocket" . -}}
- name: progress-control-reports
  emptyDir:
    medium: Memory
    sizeLimit: {{ .Values.sidecar.report.sizeLimit }}
{{- end -}}
{{- end -}}

{{/* The reports socket's mount of an app container: a list item for its `volumeMounts`. */}}
{{- define "progress-control.app.volumeMounts" -}}
{{- if include "progress-control.reportSocket" . -}}
- name: progress-control-reports
  mountPath: {{ include "progress-control.reportSocketDir" . }}
{{- end -}}
{{- end -}}

{{/* Env of an app container whose interceptor runs in report mode: list items for `env`. */}}
{{- define "progress-control.app.env" -}}
{{- if .Values.sidecar.report.enabled -}}
- name: PROGRESS_CONTROL_MODE
  value: report
- name: PROGRESS_CONTROL_REPORT_ADDRESS
  value: {{ include "progress-control.reportAddress" . | quote }}
{{- end -}}
{{- end -}}

{{/* Pod annotations: a checksum of the sidecar's settings (mapping entries). */}}
{{- define "progress-control.podAnnotations" -}}
checksum/progress-control-config: {{ include "progress-control.configData" . | sha256sum }}
{{- end -}}
